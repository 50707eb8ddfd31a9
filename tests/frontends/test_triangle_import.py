"""triu/tril of run-time values (torch.export) and ONNX Trilu -> where(constant keep mask, x, 0),
against PyTorch and onnx's reference evaluator (exact)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need PyTorch")
onnx = pytest.importorskip("onnx", reason="the ONNX importer tests need onnx")

from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from optgraph.frontends.onnx import from_onnx
from optgraph.frontends.torch_export import from_torch
from tests.frontends.numerics import assert_matches, ops_of


class Triangles(torch.nn.Module):
    def forward(self, scores, mask):  # type: ignore[no-untyped-def]
        return scores.triu(1), scores.tril(), torch.tril(scores, diagonal=-2), mask.triu()


def test_triu_and_tril_of_run_time_values_match_pytorch() -> None:
    args = (torch.randn(2, 4, 6), torch.rand(5, 3) > 0.5)
    with torch.no_grad():
        expected = [e.numpy() for e in Triangles()(*args)]
    graph, weights = from_torch(Triangles(), args)
    inputs = {"scores": args[0].numpy(), "mask": args[1].numpy()}
    assert_matches(graph, weights, inputs, expected, tolerance=0.0)
    assert ops_of(graph).count("where") == 4


def _trilu_model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("Trilu", ["x"], ["upper"]),
        helper.make_node("Trilu", ["x", "k"], ["lower"], upper=0),
        helper.make_node("Trilu", ["x", "minus"], ["upper_shifted"], upper=1),
    ]
    inits = [
        numpy_helper.from_array(np.array(1, np.int64), "k"),
        numpy_helper.from_array(np.array(-1, np.int64), "minus"),
    ]
    inputs = [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 5, 4])]
    outputs = [
        helper.make_tensor_value_info(n, TensorProto.FLOAT, [3, 5, 4])
        for n in ("upper", "lower", "upper_shifted")
    ]
    graph = helper.make_graph(nodes, "trilu", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def test_onnx_trilu_matches_the_reference_evaluator() -> None:
    model = _trilu_model()
    feeds = {"x": np.random.default_rng(5).normal(size=(3, 5, 4)).astype(np.float32)}
    expected = [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]
    graph, weights = from_onnx(model)
    assert_matches(graph, weights, feeds, expected, tolerance=0.0)
    assert ops_of(graph).count("where") == 3
