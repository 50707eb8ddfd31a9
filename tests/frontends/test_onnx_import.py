"""ONNX importer: models against onnx's reference evaluator and onnxruntime, raising, errors."""

from __future__ import annotations

from pathlib import Path

import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX importer tests need onnx")

import numpy as np
from onnx.reference import ReferenceEvaluator

import optgraph as og
from optgraph.frontends.onnx import from_onnx
from tests.frontends import onnx_models
from tests.frontends.numerics import assert_matches, ops_of


def _expected(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    outputs = ReferenceEvaluator(model).run(None, feeds)
    try:
        import onnxruntime
    except ImportError:
        return [np.asarray(o) for o in outputs]
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    for ours, theirs in zip(outputs, session.run(None, feeds)):
        np.testing.assert_allclose(ours, theirs, rtol=1e-4, atol=1e-5)  # the two references agree
    return [np.asarray(o) for o in outputs]


def test_cnn_matches_the_reference_evaluator_and_onnxruntime() -> None:
    model = onnx_models.cnn()
    feeds = {"image": np.random.default_rng(1).normal(size=(2, 3, 16, 16)).astype(np.float32)}
    graph, weights = from_onnx(model)
    assert_matches(graph, weights, feeds, _expected(model, feeds))
    ops = ops_of(graph)
    assert ops.count("conv2d") == 2 and "max_pool2d" in ops and "softmax" in ops
    assert {"conv1.weight", "bn.var", "fc.bias"} <= set(weights)


def test_transformer_mlp_raises_gelu_and_rms_norm_and_folds_shapes(tmp_path: Path) -> None:
    model = onnx_models.transformer_mlp()
    path = tmp_path / "mlp.onnx"
    onnx.save(model, str(path))
    feeds = {"x": np.random.default_rng(2).normal(size=(4, 3, 32)).astype(np.float32)}
    graph, weights = from_onnx(str(path))
    assert_matches(graph, weights, feeds, _expected(model, feeds))
    ops = ops_of(graph)
    assert ops.count("layer_norm") == 1 and ops.count("rms_norm") == 1
    assert ops.count("gelu") == 1 and "erf" not in ops and "div" not in ops


def test_dynamic_dimension_is_named() -> None:
    model = onnx_models.cnn()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "batch"
    with pytest.raises(og.OptGraphError, match="'image' has a dynamic dimension 0 \\('batch'\\)"):
        from_onnx(model)


def test_unmapped_ops_are_listed_together() -> None:
    model = onnx_models.cnn()
    for node in model.graph.node:
        if node.op_type == "Relu":
            node.op_type = "Celu"
        if node.op_type == "Softmax":
            node.op_type = "Hardmax"
    with pytest.raises(og.OptGraphError) as info:
        from_onnx(model)
    text = str(info.value)
    assert "2 op(s) optgraph cannot map" in text
    assert "Celu ×1: r1" in text and "Hardmax ×1: probs" in text


def test_an_unmapped_op_without_a_static_shape_is_reported_not_what_reads_it() -> None:
    """A Range between run-time bounds (how transformers' ONNX table writes grouped products)
    has no static shape: the MatMul that reads its gathered rows is not blamed for the guess."""
    from onnx import TensorProto, helper, numpy_helper

    ints = TensorProto.INT64
    nodes = [
        helper.make_node("ReduceMax", ["counts"], ["start"], keepdims=0),
        helper.make_node("ReduceSum", ["counts"], ["end"], keepdims=0),
        helper.make_node("Range", ["start", "end", "one"], ["rows"], name="rows"),
        helper.make_node("Gather", ["x", "rows"], ["picked"], axis=0),
        helper.make_node("MatMul", ["picked", "w"], ["y"]),
    ]
    graph = helper.make_graph(
        nodes,
        "grouped",
        [
            helper.make_tensor_value_info("counts", ints, [4]),
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [8, 6]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array(1, np.int64), "one"),
            numpy_helper.from_array(np.ones((6, 5), np.float32), "w"),
        ],
    )
    model = onnx.helper.make_model(graph, opset_imports=[onnx.helper.make_opsetid("", 18)])
    with pytest.raises(og.OptGraphError) as info:
        from_onnx(model)
    text = str(info.value)
    assert "1 op(s) optgraph cannot map" in text and "Range ×1: rows" in text
    assert "matmul" not in text.lower()


def test_a_file_that_is_not_onnx_says_so(tmp_path: Path) -> None:
    path = tmp_path / "model.onnx"
    path.write_text("graph g { }\n")
    with pytest.raises(og.OptGraphError, match="not an ONNX model"):
        from_onnx(str(path))
