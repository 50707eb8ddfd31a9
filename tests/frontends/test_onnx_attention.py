"""ONNX Attention (opsets 23 to 25) imported and checked against onnx's ReferenceEvaluator
(float32 NMSE <= 1e-10, reference interpreter and compiled CPU program): masks, GQA, softcap,
is_causal with and without a past, present key/value outputs, 3-D inputs, nonpad_kv_seqlen as a
per-batch-row kv_len, causal windows, constant position masks raised into attributes."""

from __future__ import annotations

import pytest

onnx = pytest.importorskip("onnx", reason="the ONNX importer tests need onnx")

import numpy as np
from onnx import helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import optgraph as og
from optgraph.frontends.onnx import from_onnx
from optgraph.ir.graph import AttrValue
from optgraph.ir.ops import attrs_with_defaults
from tests.frontends.numerics import assert_matches

SLOTS = ("Q", "K", "V", "attn_mask", "past_key", "past_value", "nonpad_kv_seqlen")
RNG = np.random.default_rng(7)


def _model(
    feeds: dict[str, np.ndarray],
    attrs: dict[str, object],
    opset: int,
    constants: dict[str, np.ndarray] | None = None,
    outputs: tuple[str, ...] = ("Y",),
) -> onnx.ModelProto:
    constants = constants or {}
    given = set(feeds) | set(constants)
    last = max(i for i, s in enumerate(SLOTS) if s in given)
    names = [s if s in given else "" for s in SLOTS[: last + 1]]
    node = helper.make_node("Attention", names, list(outputs), **attrs)
    inputs = [
        helper.make_tensor_value_info(n, helper.np_dtype_to_tensor_dtype(a.dtype), a.shape)
        for n, a in feeds.items()
    ]
    outs = [helper.make_tensor_value_info(n, onnx.TensorProto.FLOAT, None) for n in outputs if n]
    inits = [numpy_helper.from_array(a, n) for n, a in constants.items()]
    graph = helper.make_graph([node], "attention", inputs, outs, inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _check(model: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> dict[str, AttrValue]:
    expected = [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]
    graph, weights = from_onnx(model)
    assert_matches(graph, weights, feeds, expected)
    (node,) = [n for n in graph.nodes if n.op == "attention"]
    return {**attrs_with_defaults(node), "operands": len(node.operands)}


def _randn(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def test_bool_mask_gqa_and_softcap() -> None:
    mask = RNG.random((2, 1, 3, 7)) < 0.7
    mask[..., 0] = True
    feeds = {"Q": _randn(2, 4, 3, 16), "K": _randn(2, 2, 7, 16), "V": _randn(2, 2, 7, 16)}
    feeds["attn_mask"] = mask
    attrs = _check(_model(feeds, {"softcap": 2.0}, 23), feeds)
    assert attrs["masked"] and attrs["softcap"] == 2.0 and attrs["operands"] == 4


def test_is_causal_without_a_cache_aligns_top_left() -> None:
    feeds = {"Q": _randn(1, 2, 3, 8), "K": _randn(1, 2, 7, 8), "V": _randn(1, 2, 7, 8)}
    attrs = _check(_model(feeds, {"is_causal": 1, "scale": 0.2}, 23), feeds)
    assert (
        attrs["causal"]
        and attrs["causal_align"] == "top_left"
        and attrs["scale"] == pytest.approx(0.2)
    )


def test_past_key_value_with_a_short_float_mask() -> None:
    feeds = {"Q": _randn(1, 4, 2, 8), "K": _randn(1, 2, 2, 8), "V": _randn(1, 2, 2, 8)}
    feeds |= {"past_key": _randn(1, 2, 5, 8), "past_value": _randn(1, 2, 5, 8)}
    mask = _randn(2, 5)  # 5 of the 7 keys: ONNX pads it with -inf
    outputs = ("Y", "present_key", "present_value")
    model = _model(feeds, {"is_causal": 1}, 23, {"attn_mask": mask}, outputs)
    attrs = _check(model, feeds)
    assert attrs["causal"] and attrs["causal_align"] == "bottom_right" and attrs["masked"]


def test_three_d_inputs_and_nonpad_kv_seqlen() -> None:
    feeds = {"Q": _randn(2, 1, 4 * 8), "K": _randn(2, 9, 2 * 8), "V": _randn(2, 9, 2 * 8)}
    feeds["nonpad_kv_seqlen"] = np.array([4, 9], np.int64)
    heads = {"q_num_heads": 4, "kv_num_heads": 2, "is_causal": 1}
    attrs = _check(_model(feeds, heads, 24), feeds)
    assert attrs["causal"] and attrs["causal_align"] == "bottom_right" and attrs["operands"] == 4


def test_left_window_is_a_causal_window() -> None:
    feeds = {"Q": _randn(1, 2, 6, 8), "K": _randn(1, 2, 6, 8), "V": _randn(1, 2, 6, 8)}
    attrs = _check(_model(feeds, {"is_causal": 1, "left_window_size": 2}, 25), feeds)
    assert attrs["causal"] and attrs["window"] == 3
    attrs = _check(_model(feeds, {"left_window_size": 1, "right_window_size": 0}, 25), feeds)
    assert attrs["causal"] and attrs["window"] == 2


def test_constant_causal_mask_becomes_attributes() -> None:
    feeds = {"Q": _randn(1, 2, 5, 8), "K": _randn(1, 2, 5, 8), "V": _randn(1, 2, 5, 8)}
    i, j = np.arange(5)[:, None], np.arange(5)[None, :]
    mask = np.where((j <= i) & (j > i - 2), 0.0, -np.inf).astype(np.float32)
    attrs = _check(_model(feeds, {}, 23, {"attn_mask": mask}), feeds)
    assert attrs["causal"] and attrs["window"] == 2 and not attrs["masked"]
    assert attrs["operands"] == 3


def test_qk_matmul_output_and_open_windows_are_refused() -> None:
    feeds = {"Q": _randn(1, 1, 2, 8), "K": _randn(1, 1, 2, 8), "V": _randn(1, 1, 2, 8)}
    model = _model(feeds, {}, 23, outputs=("Y", "", "", "qk"))
    with pytest.raises(og.OptGraphError, match="qk_matmul_output output is not supported"):
        from_onnx(model)
    with pytest.raises(og.OptGraphError, match="only causal windows"):
        from_onnx(_model(feeds, {"left_window_size": 1}, 25))


def test_a_short_mask_input_is_padded_in_the_graph() -> None:
    feeds = {"Q": _randn(1, 2, 2, 8), "K": _randn(1, 2, 2, 8), "V": _randn(1, 2, 2, 8)}
    feeds |= {"attn_mask": _randn(1, 1, 2, 4)}
    feeds |= {"past_key": _randn(1, 2, 4, 8), "past_value": _randn(1, 2, 4, 8)}
    attrs = _check(_model(feeds, {"is_causal": 1}, 23), feeds)
    assert attrs["masked"] and attrs["causal"]


def test_a_full_float_mask_initializer_stays_a_weight() -> None:
    feeds = {"Q": _randn(1, 2, 3, 8), "K": _randn(1, 2, 7, 8), "V": _randn(1, 2, 7, 8)}
    model = _model(feeds, {}, 23, {"attn_mask": _randn(3, 7)})
    attrs = _check(model, feeds)
    assert attrs["masked"] and attrs["operands"] == 4
    graph, _ = from_onnx(model)
    assert "attn_mask" in [w.name for w in graph.weights]
