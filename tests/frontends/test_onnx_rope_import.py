"""The rope matcher on an ONNX graph written the way exporters write transformers' rotary
embedding (positions input, a llama3-scaled frequency initializer, yarn's factor on cos and sin,
partial rotary): raised to one `rope` with the scaling's attributes, and equal to onnx's
reference evaluator (float32 NMSE <= 1e-10)."""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX importer tests need onnx")

from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

from optgraph.frontends.onnx import from_onnx
from optgraph.ir.graph import Node
from optgraph.ir.op_rules_rope import rope_frequencies
from tests.frontends.numerics import assert_matches, ops_of

HEAD, HEADS, SEQ = 32, 2, 5


def _model(attrs: dict[str, object], rotary: int, factor: float) -> onnx.ModelProto:
    """x [1,H,S,D], pos [1,S] (int64) -> rope of the first `rotary` entries, the rest kept."""
    freq = rope_frequencies({**attrs, "rotary_dim": rotary}, HEAD)  # type: ignore[arg-type]
    half = rotary // 2
    ints = {"axes1": [1], "axes0": [0], "zero": [0], "half": [half], "rot": [rotary],
            "end": [HEAD], "last": [3]}  # fmt: skip
    inits = [numpy_helper.from_array(np.array(v, np.int64), k) for k, v in ints.items()]
    inits += [
        numpy_helper.from_array(np.array(freq.inv_freq, np.float32), "inv_freq"),
        numpy_helper.from_array(np.array(factor, np.float32), "factor"),
    ]
    nodes = [
        helper.make_node("Unsqueeze", ["pos", "axes1"], ["pos3"]),  # [1,1,S]
        helper.make_node("Cast", ["pos3"], ["posf"], to=TensorProto.FLOAT),
        helper.make_node("Transpose", ["posf"], ["post"], perm=[0, 2, 1]),  # [1,S,1]
        helper.make_node("Mul", ["post", "inv_freq"], ["freqs"]),  # [1,S,half]
        helper.make_node("Concat", ["freqs", "freqs"], ["emb"], axis=-1),
        helper.make_node("Cos", ["emb"], ["cos0"]),
        helper.make_node("Sin", ["emb"], ["sin0"]),
        helper.make_node("Mul", ["cos0", "factor"], ["cos1"]),
        helper.make_node("Mul", ["sin0", "factor"], ["sin1"]),
        helper.make_node("Unsqueeze", ["cos1", "axes1"], ["cos"]),  # [1,1,S,rot]
        helper.make_node("Unsqueeze", ["sin1", "axes1"], ["sin"]),
        helper.make_node("Slice", ["x", "zero", "rot", "last"], ["xr"]),
        helper.make_node("Slice", ["x", "rot", "end", "last"], ["xp"]),
        helper.make_node("Slice", ["xr", "zero", "half", "last"], ["x1"]),
        helper.make_node("Slice", ["xr", "half", "rot", "last"], ["x2"]),
        helper.make_node("Neg", ["x2"], ["nx2"]),
        helper.make_node("Concat", ["nx2", "x1"], ["rotated"], axis=-1),
        helper.make_node("Mul", ["xr", "cos"], ["a"]),
        helper.make_node("Mul", ["rotated", "sin"], ["b"]),
        helper.make_node("Add", ["a", "b"], ["roped"]),
    ]
    if rotary < HEAD:
        nodes.append(helper.make_node("Concat", ["roped", "xp"], ["y"], axis=-1))
    else:
        nodes.append(helper.make_node("Identity", ["roped"], ["y"]))
    inputs = [
        helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, HEADS, SEQ, HEAD]),
        helper.make_tensor_value_info("pos", TensorProto.INT64, [1, SEQ]),
    ]
    outputs = [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, HEADS, SEQ, HEAD])]
    graph = helper.make_graph(nodes, "rope", inputs, outputs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


LLAMA3 = {"theta": 500000.0, "scaling": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
          "high_freq_factor": 4.0, "original_max_position": 128}  # fmt: skip
YARN = {"theta": 10000.0, "scaling": "yarn", "factor": 4.0, "original_max_position": 64}


@pytest.mark.parametrize(
    ("attrs", "rotary", "factor"),
    [(LLAMA3, HEAD, 1.0), (YARN, 16, 1.0 + 0.1 * np.log(4.0)), ({"theta": 10000.0}, 8, 1.0)],
)
def test_onnx_rope_pattern_raises_with_its_scaling(
    attrs: dict[str, object], rotary: int, factor: float
) -> None:
    model = _model(attrs, rotary, factor)
    feeds = {
        "x": np.random.default_rng(7).normal(size=(1, HEADS, SEQ, HEAD)).astype(np.float32),
        "pos": np.array([[0, 1, 2, 30, 31]], np.int64),
    }
    expected = [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]
    graph, weights = from_onnx(model)
    assert_matches(graph, weights, feeds, expected)
    ops = ops_of(graph)
    assert ops.count("rope") == 1 and not {"cos", "sin", "concat"} & set(ops), ops
    rope: Node = next(n for n in graph.nodes if n.op == "rope")
    assert rope.attrs.get("scaling", "none") == attrs.get("scaling", "none")
    assert rope.attrs.get("rotary_dim", HEAD) == rotary
    assert rope.attrs["theta"] == attrs["theta"]
