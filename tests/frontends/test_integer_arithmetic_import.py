"""Integer arithmetic from torch.export and ONNX: remainders (a ring-buffer cache slot), rounding
and floor divisions, Div/Mod of integers, against PyTorch and onnx's reference evaluator (exact,
negative operands included); float rounding divisions are refused with their reason."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need PyTorch")
onnx = pytest.importorskip("onnx", reason="the ONNX importer tests need onnx")

from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator

import optgraph as og
from optgraph.frontends.onnx import from_onnx
from optgraph.frontends.torch_export import from_torch
from tests.frontends.numerics import assert_matches, ops_of


class RingSlots(torch.nn.Module):
    """What a sliding-window (ring buffer) cache computes from positions, and signed variants."""

    def forward(self, pos, step):  # type: ignore[no-untyped-def]
        return (
            pos % 8, torch.remainder(pos - 9, step), torch.fmod(pos - 9, step),
            torch.div(pos - 9, step, rounding_mode="trunc"),
            torch.div(pos - 9, step, rounding_mode="floor"), (pos - 9) // step,
            torch.minimum(pos, step), torch.where(pos >= step, pos - step, pos),
            torch.cat([pos, step])[2:5].reshape(1, 3),
        )  # fmt: skip


def test_remainders_and_rounding_divisions_match_pytorch() -> None:
    args = (torch.tensor([0, 3, 7, 8, 12, 17]), torch.tensor([5, -3, 4, -4, 7, 2]))
    with torch.no_grad():
        expected = [e.numpy() for e in RingSlots()(*args)]
    graph, weights = from_torch(RingSlots(), args)
    inputs = {"pos": args[0].numpy(), "step": args[1].numpy()}
    assert_matches(graph, weights, inputs, expected, tolerance=0.0)
    ops = ops_of(graph)
    assert ops.count("mod") >= 4 and "div" in ops and "greater_equal" in ops, ops


class FloatFloor(torch.nn.Module):
    def forward(self, x):  # type: ignore[no-untyped-def]
        return torch.div(x, 3.0, rounding_mode="floor")


def test_float_rounding_division_is_refused_with_its_reason() -> None:
    with pytest.raises(og.OptGraphError, match="rounding_mode='floor' on f32"):
        from_torch(FloatFloor(), (torch.randn(4),))


def _onnx_model(dtype: int) -> onnx.ModelProto:
    nodes = [
        helper.make_node("Div", ["a", "b"], ["quotient"]),
        helper.make_node("Mod", ["a", "b"], ["python_mod"]),
        helper.make_node("Mod", ["a", "b"], ["c_mod"], fmod=1),
        helper.make_node("LessOrEqual", ["a", "b"], ["upto"]),
    ]
    if dtype != TensorProto.INT32:
        nodes[1] = helper.make_node("Mod", ["a", "b"], ["python_mod"], fmod=1)
    inputs = [helper.make_tensor_value_info(n, dtype, [8]) for n in ("a", "b")]
    outputs = [helper.make_tensor_value_info(n, dtype, [8]) for n in ("quotient", "python_mod")]
    outputs += [helper.make_tensor_value_info("c_mod", dtype, [8])]
    outputs += [helper.make_tensor_value_info("upto", TensorProto.BOOL, [8])]
    graph = helper.make_graph(nodes, "arith", inputs, outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize(
    ("dtype", "np_dtype"), [(TensorProto.INT32, np.int32), (TensorProto.FLOAT, np.float32)]
)
def test_onnx_div_and_mod_match_the_reference_evaluator(dtype: int, np_dtype: type) -> None:
    model = _onnx_model(dtype)
    feeds = {
        "a": np.array([-7, 7, -7, 7, 0, 13, -13, 9], np_dtype),
        "b": np.array([2, 2, -2, -2, 3, -5, 5, 4], np_dtype),
    }
    expected = [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]
    graph, weights = from_onnx(model)
    assert_matches(graph, weights, feeds, expected, tolerance=0.0)
    assert ops_of(graph).count("mod") == 2 and "div" in ops_of(graph)
