"""softplus, log(1 + eˣ) (Mamba's step sizes, Mish): its reference semantics against float64, and
its imports from torch.export (F.softplus with beta and threshold) and ONNX (Softplus) against
PyTorch and onnx's ReferenceEvaluator. Its CUDA kernel runs in the emulator with every op case
(tests/codegen/test_op_kernels_emulated.py)."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.reference.interpreter import run_reference
from tests.frontends.numerics import assert_matches, ops_of


def test_reference_is_log1p_exp_without_overflow() -> None:
    graph = og.parse("graph g { input %x : f32[9]\n %y = softplus(%x) : f32[9]\n output %y }")
    x = np.array([-80.0, -20.0, -1.0, -1e-4, 0.0, 1e-4, 1.0, 20.0, 100.0], np.float32)
    got = run_reference(graph, {"x": x}, {})["y"]
    exact = np.logaddexp(0.0, x.astype(np.float64))
    np.testing.assert_allclose(got, exact, rtol=2e-7, atol=0)
    assert got[-1] == np.float32(100.0) and np.all(np.isfinite(got))


def test_verifier_rejects_integer_operands() -> None:
    graph = og.parse("graph g { input %x : i32[4]\n %y = softplus(%x) : i32[4]\n output %y }")
    with pytest.raises(og.OptGraphError, match="softplus: expected a float operand"):
        og.verify(graph)


def test_torch_softplus_with_beta_matches_pytorch() -> None:
    torch = pytest.importorskip("torch", reason="the torch importer tests need PyTorch")
    from optgraph.frontends.torch_export import from_torch

    class Softplus(torch.nn.Module):
        def forward(self, x):  # type: ignore[no-untyped-def]
            f = torch.nn.functional
            return f.softplus(x), f.softplus(x, beta=2.0), f.softplus(x, threshold=30.0)

    x = torch.linspace(-30.0, 30.0, 121).reshape(11, 11)
    with torch.no_grad():
        expected = [e.numpy() for e in Softplus()(x)]
    graph, weights = from_torch(Softplus(), (x,))
    assert_matches(graph, weights, {graph.inputs[0].name: x.numpy()}, expected)
    assert ops_of(graph).count("softplus") == 3 and ops_of(graph).count("scale") == 2


def test_torch_softplus_below_the_default_threshold_is_refused() -> None:
    torch = pytest.importorskip("torch", reason="the torch importer tests need PyTorch")
    from optgraph.frontends.torch_export import from_torch

    class Linearized(torch.nn.Module):
        def forward(self, x):  # type: ignore[no-untyped-def]
            return torch.nn.functional.softplus(x, threshold=5.0)

    with pytest.raises(og.OptGraphError, match="threshold=5.0"):
        from_torch(Linearized(), (torch.randn(4),))


def test_onnx_softplus_matches_the_reference_evaluator() -> None:
    pytest.importorskip("onnx", reason="the ONNX importer tests need onnx")
    from onnx import TensorProto, helper
    from onnx.reference import ReferenceEvaluator

    from optgraph.frontends.onnx import from_onnx

    node = helper.make_node("Softplus", ["x"], ["y"])
    x_info = helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 40])
    y_info = helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 40])
    model = helper.make_model(
        helper.make_graph([node], "softplus", [x_info], [y_info]),
        opset_imports=[helper.make_opsetid("", 18)],
    )
    model.ir_version = 9
    x = np.linspace(-12.0, 12.0, 120, dtype=np.float32).reshape(3, 40)
    expected = ReferenceEvaluator(model).run(None, {"x": x})
    graph, weights = from_onnx(model)
    assert_matches(graph, weights, {"x": x}, expected)
    assert ops_of(graph) == ["softplus"]
