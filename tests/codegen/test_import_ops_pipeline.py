"""The ops added for the importers (comparisons, not, where, clip, log_softmax, ...) through the
whole pipeline: parse/print round trip, located verify errors, `fuse` taking them into regions,
the planned executor and the CUDA kernels of the fused graph in the CPU emulator, all against the
reference interpreter."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.passes.fuse import FusePass
from optgraph.reference.interpreter import random_inputs, run_reference
from tests.support import cuda_emulator

# A per-row kv_len mask with a softcap-like clip: the shape attention masks import as.
MASKED_SOFTMAX = """graph masked {
  input %s : f32[2,4,8]
  input %pos : i32[8]
  input %len : i32[2,1,1]
  input %fill : f32[]
  %valid = less(%pos, %len) : bool[2,1,8]
  %capped = clip(%s) {max = 2.0, min = -2.0} : f32[2,4,8]
  %m = where(%valid, %capped, %fill) : f32[2,4,8]
  %p = softmax(%m) : f32[2,4,8]
  %hidden = not(%valid) : bool[2,1,8]
  %same = equal(%hidden, %valid) : bool[2,1,8]
  %big = greater(%s, %fill) : bool[2,4,8]
  output %p, %hidden, %same, %big
}
"""


def _inputs(graph: og.Graph) -> dict[str, np.ndarray]:
    inputs = random_inputs(graph, 3)
    inputs["len"] = np.array([3, 8], np.int32).reshape(2, 1, 1)
    inputs["pos"] = np.arange(8, dtype=np.int32)
    inputs["fill"] = np.array(-1e4, np.float32)
    return inputs


def test_round_trip_prints_the_same_text() -> None:
    graph = og.parse(MASKED_SOFTMAX)
    og.verify(graph)
    printed = og.print_graph(graph)
    assert "%valid = less(%pos, %len) : bool[2,1,8]" in printed
    assert "not(%valid)" in printed
    assert og.print_graph(og.parse(printed)) == printed


def test_a_bad_declared_type_is_located() -> None:
    text = MASKED_SOFTMAX.replace(
        "%hidden = not(%valid) : bool[2,1,8]", "%hidden = not(%s) : f32[2,4,8]"
    )
    with pytest.raises(og.OptGraphError) as err:
        og.verify(og.parse(text, "masked.ir"))
    rendered = str(err.value)
    assert (
        "masked.ir:10:" in rendered and "not: expected a bool operand, got f32[2,4,8]" in rendered
    )


def test_reference_masks_rows_past_their_length() -> None:
    graph = og.parse(MASKED_SOFTMAX)
    out = run_reference(graph, _inputs(graph), {})
    assert out["hidden"][:, 0].tolist() == [[False] * 3 + [True] * 5, [False] * 8]
    assert not out["same"].any()
    np.testing.assert_allclose(out["p"][0, :, 3:], 0.0, atol=1e-30)
    np.testing.assert_allclose(out["p"].sum(-1), 1.0, rtol=1e-6)


def test_fuse_takes_the_mask_ops_into_regions_and_keeps_results() -> None:
    graph = og.parse(MASKED_SOFTMAX)
    fused = FusePass().run(graph)
    og.verify(fused)
    inner = [n.op for n in fused.nodes if n.body for n in n.body.nodes]
    assert {"where", "clip"} <= set(inner), inner  # less has two users: not absorbed
    inputs = _inputs(graph)
    want = run_reference(graph, inputs, {})
    got = run_reference(fused, inputs, {})
    planned = og.compile(graph, target="cpu").run(inputs, {})
    for name, value in want.items():
        np.testing.assert_array_equal(got[name], value)
        assert planned[name].dtype == value.dtype
        np.testing.assert_allclose(planned[name], value, rtol=1e-6, atol=1e-30)


@pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
def test_fused_cuda_kernels_match_reference_in_the_emulator() -> None:
    graph = og.parse(MASKED_SOFTMAX)
    fused = FusePass().run(graph)
    inputs = _inputs(graph)
    want = run_reference(graph, inputs, {})
    got = cuda_emulator.run_graph(fused, inputs, {})
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        np.testing.assert_allclose(got[name], value, rtol=1e-5, atol=1e-30)


# A residual add before log_softmax and a scale after it: one fused row kernel.
LOG_SOFTMAX_REGION = """graph lsm {
  input %x : f32[3,50]
  input %r : f32[3,50]
  %h = add(%x, %r) : f32[3,50]
  %l = log_softmax(%h) : f32[3,50]
  %o = scale(%l) {factor = -1.0} : f32[3,50]
  output %o
}
"""


def test_log_softmax_anchors_a_fused_row_region() -> None:
    graph = og.parse(LOG_SOFTMAX_REGION)
    fused = FusePass().run(graph)
    assert [n.op for n in fused.nodes] == ["fused"]
    assert fused.nodes[0].body is not None
    assert [n.op for n in fused.nodes[0].body.nodes] == ["add", "log_softmax", "scale"]
    inputs = random_inputs(graph, 5)
    want = run_reference(graph, inputs, {})["o"]
    np.testing.assert_allclose(run_reference(fused, inputs, {})["o"], want, rtol=1e-6)
    np.testing.assert_allclose(og.compile(graph).run(inputs, {})["o"], want, rtol=1e-6)
    if cuda_emulator.available():
        got = cuda_emulator.run_graph(fused, inputs, {})["o"]
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


# Greedy decoding and position bookkeeping: argmax of logits, cumsum of a mask, expand, tile, pad.
INDEXING = """graph indexing {
  input %logits : f32[2,50]
  input %mask : i32[2,6]
  input %bias : f32[6]
  input %slope : f32[]
  %next = argmax(%logits) : i64[2]
  %pos = cumsum(%mask) {axis = 1} : i32[2,6]
  %b = expand(%bias) {shape = [2, 6]} : f32[2,6]
  %t = tile(%b) {repeats = [1, 2]} : f32[2,12]
  %p = pad(%t) {pads = [0, 1, 0, 3], value = -1.0} : f32[2,16]
  %q = prelu(%p, %slope) : f32[2,16]
  output %next, %pos, %q
}
"""


def test_indexing_ops_round_trip_and_run_planned_and_emulated() -> None:
    graph = og.parse(INDEXING)
    og.verify(graph)
    printed = og.print_graph(graph)
    assert og.print_graph(og.parse(printed)) == printed
    inputs = random_inputs(graph, 7)
    want = run_reference(graph, inputs, {})
    planned = og.compile(graph, target="cpu").run(inputs, {})
    fused = FusePass().run(graph)
    og.verify(fused)
    for name, value in want.items():
        assert planned[name].dtype == value.dtype
        np.testing.assert_array_equal(planned[name], value)
    if cuda_emulator.available():
        got = cuda_emulator.run_graph(fused, inputs, {})
        for name, value in want.items():
            np.testing.assert_array_equal(got[name], value)
