"""The ONNX ops the dynamo exporter writes for Llama, BERT, RoBERTa, Falcon, BLOOM and Mixtral
(each refused before): Reciprocal, Clip of integers, Gather on any axis with run-time (and negative) indices or a
0-d constant one, GatherElements, GatherND, TopK, 1-D Conv, InstanceNormalization and IsNaN. Against onnx's ReferenceEvaluator, exactly,
on the reference, the compiled CPU program and the CUDA kernels in the emulator; then whole
models through `torch.onnx.export` against transformers."""

from __future__ import annotations

import contextlib
import io

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX importer tests need onnx")

from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from optgraph.frontends.onnx import from_onnx
from optgraph.reference.interpreter import run_reference
from tests.frontends.numerics import assert_matches, ops_of
from tests.support import cuda_emulator

F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _model(nodes: list, inputs: list, outputs: list, inits: list) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "ops", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def _run(model: onnx.ModelProto, feeds: dict[str, np.ndarray], tolerance: float = 0.0) -> list:
    expected = [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]
    graph, weights = from_onnx(model)
    assert_matches(graph, weights, feeds, expected, tolerance=tolerance)
    if cuda_emulator.available():
        got = cuda_emulator.run_graph(graph, feeds, weights)
        for name, want in zip(graph.output_names(), expected):
            assert np.allclose(got[name], want, rtol=1e-6, atol=0, equal_nan=True), name
    return ops_of(graph)


def test_gathers_match_the_reference_evaluator() -> None:
    out = [helper.make_tensor_value_info(n, F, None) for n in ("a", "b", "c", "d", "e", "f")]
    out.append(helper.make_tensor_value_info("g", I64, None))
    model = _model(
        [
            helper.make_node("Gather", ["x", "ids"], ["a"], axis=1),  # a middle axis
            helper.make_node("Gather", ["x", "ids"], ["b"], axis=0),
            helper.make_node("Gather", ["x", "three"], ["c"], axis=2),  # 0-d: the axis goes
            helper.make_node("GatherElements", ["x", "elements"], ["d"], axis=1),
            helper.make_node("GatherND", ["x", "pairs"], ["e"]),  # coordinates of 2 axes
            helper.make_node("GatherND", ["x", "singles"], ["f"]),
            helper.make_node("Clip", ["ids", "lo", "hi"], ["g"]),  # integers: maximum, minimum
        ],
        [
            helper.make_tensor_value_info("x", F, [3, 4, 5]),
            helper.make_tensor_value_info("ids", I64, [2, 2]),
            helper.make_tensor_value_info("elements", I64, [3, 2, 5]),
            helper.make_tensor_value_info("pairs", I64, [2, 2]),
            helper.make_tensor_value_info("singles", I64, [4, 1]),
        ],
        out,
        [
            numpy_helper.from_array(np.array(3, np.int64), "three"),
            numpy_helper.from_array(np.array(0, np.int64), "lo"),
            numpy_helper.from_array(np.array(1, np.int64), "hi"),
        ],
    )
    rng = np.random.default_rng(3)
    feeds = {
        "x": rng.normal(size=(3, 4, 5)).astype(np.float32),
        "ids": np.array([[0, -1], [2, 1]], np.int64),
        "elements": rng.integers(-4, 4, (3, 2, 5)).astype(np.int64),
        "pairs": np.array([[2, -1], [0, 3]], np.int64),
        "singles": np.array([[1], [-3], [2], [0]], np.int64),
    }
    ops = _run(model, feeds)
    assert ops.count("get_rows") == 5 and "transpose" in ops and "clip" not in ops


def test_reciprocal_and_topk_match_the_reference_evaluator() -> None:
    k = numpy_helper.from_array(np.array([3], np.int64), "k")
    model = _model(
        [
            helper.make_node("Sqrt", ["x"], ["root"]),
            helper.make_node("Reciprocal", ["root"], ["r"]),  # the exporter's rsqrt: rsqrt
            helper.make_node("Reciprocal", ["x"], ["rx"]),  # of anything else: div(1, x)
            helper.make_node("TopK", ["x", "k"], ["v", "i"], axis=1),
            helper.make_node("TopK", ["x", "k"], ["vs", "is"], axis=-1, largest=0),
        ],
        [helper.make_tensor_value_info("x", F, [2, 6, 7])],
        [
            helper.make_tensor_value_info(n, F if n[0] in "rv" else I64, None)
            for n in ("r", "v", "i", "vs", "is", "rx")
        ],
        [k],
    )
    x = np.abs(np.random.default_rng(4).normal(size=(2, 6, 7))).astype(np.float32) + 0.1
    expected = [np.asarray(o) for o in ReferenceEvaluator(model).run(None, {"x": x})]
    graph, weights = from_onnx(model)
    got = run_reference(graph, {"x": x}, weights)
    names = graph.output_names()
    assert np.allclose(got[names[0]], expected[0], rtol=1e-6)  # rsqrt: another rounding
    assert np.allclose(got[names[5]], expected[5], rtol=1e-7)
    for name, want in zip(names[1:5], expected[1:5]):  # random values: no ties, exact
        assert np.array_equal(got[name], want), name
    ops = ops_of(graph)
    assert "rsqrt" in ops and "div" in ops and "sqrt" not in ops


def _exported_transformers(name: str) -> tuple[object, list[np.ndarray], np.ndarray]:
    """(ONNX model, its inputs, transformers' output) of `tools/transformers_sweep.py`'s model."""
    torch = pytest.importorskip("torch", reason="needs PyTorch")
    pytest.importorskip("transformers", reason="needs transformers")
    from tools import transformers_sweep

    module, args = transformers_sweep.wrapped(name)
    with torch.no_grad():
        want = module(*args).numpy()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        program = torch.onnx.export(module, args, dynamo=True)
    return program.model_proto, [a.numpy() for a in args], want


@pytest.mark.parametrize(
    "name",
    ["llama", "roberta", "falcon", "bloom", "mixtral_batched_mm", "llama_sdpa", "whisper_encoder",
     "wav2vec2"],
)  # fmt: skip
def test_exported_transformers_models_import_and_match(name: str) -> None:
    proto, args, want = _exported_transformers(name)
    graph, weights = from_onnx(proto)
    inputs = {decl.name: a for decl, a in zip(graph.inputs, args)}
    assert_matches(graph, weights, inputs, [want])
    if name == "llama":  # Reciprocal(Sqrt(..)) became rsqrt, and the RMSNorms raise
        assert ops_of(graph).count("rms_norm") == 5


def test_conv1d_instance_norm_and_is_nan_match_the_reference_evaluator() -> None:
    rng = np.random.default_rng(5)
    inits = [
        numpy_helper.from_array(rng.normal(size=(6, 2, 3)).astype(np.float32), "w"),
        numpy_helper.from_array(rng.normal(size=(6,)).astype(np.float32), "b"),
        numpy_helper.from_array(rng.uniform(0.5, 1.5, 6).astype(np.float32), "scale"),
        numpy_helper.from_array(rng.normal(size=(6,)).astype(np.float32), "shift"),
    ]
    model = _model(
        [
            helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1], strides=[2], group=2),
            helper.make_node("InstanceNormalization", ["y", "scale", "shift"], ["z"], epsilon=1e-3),
            helper.make_node("IsNaN", ["x"], ["nan"]),
        ],
        [helper.make_tensor_value_info("x", F, [2, 4, 9])],
        [helper.make_tensor_value_info("z", F, None),
         helper.make_tensor_value_info("nan", TensorProto.BOOL, None)],
        inits,
    )  # fmt: skip
    x = rng.normal(size=(2, 4, 9)).astype(np.float32)
    x[0, 1, 3] = np.nan  # its conv window's outputs are NaN too
    expected = [np.asarray(o) for o in ReferenceEvaluator(model).run(None, {"x": x})]
    graph, weights = from_onnx(model)
    got = run_reference(graph, {"x": x}, weights)
    names = graph.output_names()
    assert np.allclose(got[names[0]], expected[0], rtol=1e-5, atol=1e-6, equal_nan=True)
    assert np.array_equal(got[names[1]], expected[1]) and expected[1].sum() == 1
    ops = ops_of(graph)
    assert "conv2d" in ops and "layer_norm" in ops and "not" in ops
