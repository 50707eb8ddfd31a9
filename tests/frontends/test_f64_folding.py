"""Float64 arithmetic on constants folds at import in float64 and only its result, narrowed to
float32, reaches the graph (Flux's rope tables: positions and frequencies in float64); float64
on run-time values is refused with what to do, through both importers."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the import tests need PyTorch")
onnx = pytest.importorskip("onnx", reason="the import tests need onnx")

from onnx import TensorProto, helper, numpy_helper

import optgraph as og
from optgraph.errors import OptGraphError
from optgraph.frontends.torch_export import from_torch
from optgraph.reference.interpreter import run_reference


class FluxStyleRope(torch.nn.Module):
    """Angles `pos · freq` of 300 positions in float64 (as diffusers' FluxPosEmbed computes
    them), then cos / sin cast to float32."""

    def forward(self, x: Any) -> Any:
        pos = torch.arange(300, dtype=torch.float64) * 7.3
        freqs = 1.0 / (10000.0 ** (torch.arange(0, 8, 2, dtype=torch.float64) / 8))
        angles = torch.outer(pos, freqs)
        return x * angles.cos().float() + angles.sin().float()


def test_float64_constant_arithmetic_folds_exactly() -> None:
    x = torch.randn(300, 4)
    graph, weights = from_torch(FluxStyleRope(), (x,))
    assert all(w.type.dtype == "f32" for w in graph.weights)
    got = run_reference(graph, {"x": x.numpy()}, weights)[graph.output_names()[0]]
    assert np.array_equal(got, FluxStyleRope()(x).numpy())  # the tables of float64 angles
    # What narrowing each step would give instead (angles up to 2190 rad lose ~1e-4 in f32):
    pos = np.arange(300, dtype=np.float32) * np.float32(7.3)
    freqs = (1.0 / (10000.0 ** (np.arange(0, 8, 2) / 8))).astype(np.float32)
    narrowed = x.numpy() * np.cos(np.outer(pos, freqs)) + np.sin(np.outer(pos, freqs))
    assert not np.allclose(got, narrowed, rtol=0, atol=1e-6)


def test_float64_on_run_time_values_is_refused_with_what_to_do() -> None:
    class Doubled(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return (x.double() * 2).float()

    with pytest.raises(OptGraphError, match="computes in float64 on run-time values"):
        from_torch(Doubled(), (torch.randn(3),))


def test_onnx_casts_to_double_of_constants_fold() -> None:
    positions = numpy_helper.from_array(np.arange(64, dtype=np.int64) * 37, "positions")
    theta = numpy_helper.from_array(np.array([0.001234567891234], dtype=np.float64), "theta")
    nodes = [
        helper.make_node("Cast", ["positions"], ["p64"], to=TensorProto.DOUBLE),
        helper.make_node("Mul", ["p64", "theta"], ["angles"]),
        helper.make_node("Sin", ["angles"], ["s64"]),
        helper.make_node("Cast", ["s64"], ["s"], to=TensorProto.FLOAT),
        helper.make_node("Add", ["x", "s"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], [positions, theta],
    )  # fmt: skip
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g, weights = og.from_onnx(model)
    x = np.zeros(64, np.float32)
    got = run_reference(g, {"x": x}, weights)["y"]
    want = np.sin(np.arange(64, dtype=np.float64) * 37 * 0.001234567891234).astype(np.float32)
    assert np.array_equal(got, want)
    assert [n.op for n in g.nodes] == ["add"] and all(w.type.dtype == "f32" for w in g.weights)
    run_time = helper.make_graph(
        [helper.make_node("Cast", ["x"], ["d"], to=TensorProto.DOUBLE)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
        [helper.make_tensor_value_info("d", TensorProto.DOUBLE, None)],
    )  # fmt: skip
    with pytest.raises(OptGraphError, match="DOUBLE: optgraph has no f64"):
        og.from_onnx(helper.make_model(run_time, opset_imports=[helper.make_opsetid("", 17)]))
