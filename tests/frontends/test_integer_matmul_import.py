"""Integer products from ONNX (`MatMul` on int32/int64, against onnx's reference evaluator) and
torch.export (`aten.mm/bmm/matmul` on integer tensors, against PyTorch) import as integer
`matmul` and give the same integers, wrap-around included, from the reference interpreter and
the compiled CPU program."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need PyTorch")
onnx = pytest.importorskip("onnx", reason="the ONNX importer tests need onnx")

from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import optgraph as og
from optgraph.frontends.onnx import from_onnx
from optgraph.frontends.torch_export import from_torch
from optgraph.reference.interpreter import run_reference
from tests.frontends.numerics import ops_of


def _assert_exact(
    graph: og.Graph,
    weights: Mapping[str, np.ndarray],
    inputs: Mapping[str, np.ndarray],
    expected: Sequence[np.ndarray],
) -> None:
    reference = run_reference(graph, dict(inputs), dict(weights))
    compiled = og.compile(graph, target="cpu").run(dict(inputs), dict(weights))
    assert len(graph.output_names()) == len(expected)
    for name, want in zip(graph.output_names(), expected):
        for label, got in (("reference", reference[name]), ("compiled cpu", compiled[name])):
            assert got.dtype == want.dtype, (label, name, got.dtype, want.dtype)
            np.testing.assert_array_equal(got, want, err_msg=f"{label} {name}")


def _onnx_matmuls(dtype: int, np_dtype: type) -> onnx.ModelProto:
    """A batched MatMul against a weight (broadcast), and one between two batched inputs."""
    rng = np.random.default_rng(2)
    info = np.iinfo(np_dtype)
    w = rng.integers(info.min, info.max, (4, 5), dtype=np_dtype, endpoint=True)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["xw"]),
        helper.make_node("MatMul", ["x", "z"], ["xz"]),
    ]
    inputs = [
        helper.make_tensor_value_info("x", dtype, [2, 3, 4]),
        helper.make_tensor_value_info("z", dtype, [2, 4, 6]),
    ]
    outputs = [
        helper.make_tensor_value_info("xw", dtype, [2, 3, 5]),
        helper.make_tensor_value_info("xz", dtype, [2, 3, 6]),
    ]
    graph = helper.make_graph(
        nodes, "int_matmul", inputs, outputs, [numpy_helper.from_array(w, "w")]
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


@pytest.mark.parametrize(
    ("dtype", "np_dtype", "ir_dtype"),
    [(TensorProto.INT64, np.int64, "i64"), (TensorProto.INT32, np.int32, "i32")],
)
def test_onnx_integer_matmul_matches_the_reference_evaluator(
    dtype: int, np_dtype: type, ir_dtype: str
) -> None:
    model = _onnx_matmuls(dtype, np_dtype)
    rng = np.random.default_rng(3)
    info = np.iinfo(np_dtype)
    feeds = {
        "x": rng.integers(info.min, info.max, (2, 3, 4), dtype=np_dtype, endpoint=True),
        "z": rng.integers(-1000, 1000, (2, 4, 6), dtype=np_dtype),
    }
    expected = [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]
    graph, weights = from_onnx(model)
    assert ops_of(graph) == ["matmul", "matmul"]
    assert {t.dtype for t in graph.value_types().values()} == {ir_dtype}
    _assert_exact(graph, weights, feeds, expected)


class IntegerProducts(torch.nn.Module):
    def forward(self, a, b, c):  # type: ignore[no-untyped-def]
        return torch.mm(a, b), torch.bmm(c, c.transpose(1, 2)), torch.matmul(c, b)


@pytest.mark.parametrize("torch_dtype", [torch.int64, torch.int32])
def test_torch_integer_mm_bmm_matmul_match_pytorch(torch_dtype: torch.dtype) -> None:
    g = torch.Generator().manual_seed(4)
    args = (
        torch.randint(-50, 50, (3, 4), generator=g, dtype=torch_dtype),
        torch.randint(-50, 50, (4, 2), generator=g, dtype=torch_dtype),
        torch.randint(-50, 50, (2, 3, 4), generator=g, dtype=torch_dtype),
    )
    with torch.no_grad():
        expected = [e.numpy() for e in IntegerProducts()(*args)]
    graph, weights = from_torch(IntegerProducts(), args)
    assert ops_of(graph).count("matmul") == 3
    inputs = dict(zip(("a", "b", "c"), (t.numpy() for t in args)))
    _assert_exact(graph, weights, inputs, expected)
