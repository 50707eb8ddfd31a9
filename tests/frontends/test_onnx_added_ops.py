"""The ops added for imports, from ONNX, against onnx's ReferenceEvaluator: comparisons, Not,
Where, Clip, LogSoftmax (a kv_len mask on clipped scores), Expand, Tile, Pad, CumSum, ArgMax,
PRelu."""

from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX importer tests need onnx")

import numpy as np
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from optgraph.frontends.onnx import from_onnx
from tests.frontends.numerics import assert_matches, ops_of


def _masked_scores(less_or_equal_on: int = TensorProto.INT64) -> onnx.ModelProto:
    """scores [2,4,6] clipped to [-1, 1], masked where pos >= kv_len, log-softmaxed."""
    inits = [
        numpy_helper.from_array(np.array(-20.0, np.float32), "fill"),
        numpy_helper.from_array(np.array(-1.0, np.float32), "lo"),
        numpy_helper.from_array(np.array(1.0, np.float32), "hi"),
        numpy_helper.from_array(np.array(0.0, np.float32), "zero"),
    ]
    nodes = [
        helper.make_node("Less", ["pos", "kv_len"], ["valid"]),
        helper.make_node("Less", ["kv_len", "pos"], ["past"]),
        helper.make_node("Or", ["past", "valid"], ["everything"]),
        helper.make_node("And", ["everything", "valid"], ["kept"]),
        helper.make_node("Not", ["kept"], ["hidden"]),
        helper.make_node("Clip", ["scores", "lo", "hi"], ["capped"]),
        helper.make_node("Where", ["hidden", "fill", "capped"], ["masked"]),
        helper.make_node("LogSoftmax", ["masked"], ["probs"], axis=-1),
        helper.make_node("Greater", ["scores", "zero"], ["positive"]),
        helper.make_node("Equal", ["pos", "kv_len"], ["at_end"]),
        helper.make_node("LessOrEqual", ["pos", "kv_len"], ["upto"]),
    ]
    inputs = [
        helper.make_tensor_value_info("scores", TensorProto.FLOAT, [2, 4, 6]),
        helper.make_tensor_value_info("pos", less_or_equal_on, [6]),
        helper.make_tensor_value_info("kv_len", less_or_equal_on, [2, 1, 1]),
    ]
    outputs = [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [2, 4, 6])]
    outputs += [
        helper.make_tensor_value_info(name, TensorProto.BOOL, None)
        for name in ("positive", "at_end", "upto")
    ]
    graph = helper.make_graph(nodes, "masked", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def test_kv_len_mask_and_clip_match_the_reference_evaluator() -> None:
    model = _masked_scores()
    feeds = {
        "scores": np.random.default_rng(3).normal(size=(2, 4, 6)).astype(np.float32),
        "pos": np.arange(6, dtype=np.int64),
        "kv_len": np.array([3, 6], np.int64).reshape(2, 1, 1),
    }
    expected = [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]
    graph, weights = from_onnx(model)
    assert_matches(graph, weights, feeds, expected)
    ops = ops_of(graph)
    assert {"less", "not", "clip", "where", "greater", "equal", "log_softmax", "and", "or"} <= set(
        ops
    ), ops
    clip = next(n for n in graph.nodes if n.op == "clip")
    assert (clip.attrs["min"], clip.attrs["max"]) == (-1.0, 1.0)


def test_float_less_or_equal_is_less_equal_and_nan_compares_false() -> None:
    model = _masked_scores(TensorProto.FLOAT)
    feeds = {
        "scores": np.random.default_rng(4).normal(size=(2, 4, 6)).astype(np.float32),
        "pos": np.array([0, 1, np.nan, 3, 4, 5], np.float32),
        "kv_len": np.array([3, np.nan], np.float32).reshape(2, 1, 1),
    }
    expected = [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]
    graph, weights = from_onnx(model)
    assert_matches(graph, weights, feeds, expected)
    assert "less_equal" in ops_of(graph)


def _indexing_model() -> onnx.ModelProto:
    ints = {
        "shape": np.array([2, 3, 4], np.int64),
        "repeats": np.array([1, 2], np.int64),
        "pads": np.array([0, 1, 2, 0], np.int64),
        "axis": np.array(1, np.int64),
    }
    inits = [numpy_helper.from_array(v, k) for k, v in ints.items()]
    inits += [
        numpy_helper.from_array(np.array(-2.0, np.float32), "pad_value"),
        numpy_helper.from_array(np.array([[0.1], [0.3]], np.float32), "slope"),
    ]
    nodes = [
        helper.make_node("Expand", ["row", "shape"], ["expanded"]),
        helper.make_node("Tile", ["x", "repeats"], ["tiled"]),
        helper.make_node("Pad", ["x", "pads", "pad_value"], ["padded"]),
        helper.make_node("CumSum", ["counts", "axis"], ["positions"]),
        helper.make_node("ArgMax", ["x"], ["best"], axis=1, keepdims=0),
        helper.make_node("PRelu", ["x", "slope"], ["leaky"]),
    ]
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 5]),
        helper.make_tensor_value_info("row", TensorProto.FLOAT, [3, 1]),
        helper.make_tensor_value_info("counts", TensorProto.INT64, [2, 5]),
    ]
    names = ("expanded", "tiled", "padded", "positions", "best", "leaky")
    outputs = [helper.make_tensor_value_info(n, TensorProto.UNDEFINED, None) for n in names]
    graph = helper.make_graph(nodes, "indexing", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def test_indexing_ops_match_the_reference_evaluator() -> None:
    model = _indexing_model()
    rng = np.random.default_rng(4)
    feeds = {
        "x": rng.normal(size=(2, 5)).astype(np.float32),
        "row": rng.normal(size=(3, 1)).astype(np.float32),
        "counts": rng.integers(0, 2, size=(2, 5)).astype(np.int64),
    }
    expected = [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]
    graph, weights = from_onnx(model)
    assert_matches(graph, weights, feeds, expected)
    ops = ops_of(graph)
    for op in ("expand", "tile", "pad", "cumsum", "argmax", "prelu"):
        assert op in ops, (op, ops)
