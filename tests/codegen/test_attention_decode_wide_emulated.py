"""The wide decode attention kernel (`codegen/kernels/attention/decode_wide.py`) in the CPU emulator
against the reference, in f32, f16 and bf16: GQA groups, kv_len below the cache (one and one per
batch row), caches that are no multiple of a slot or a chunk, one chunk and several, several
passes a chunk (a last pass only partly inside the chunk), causal Sq > 1 (both alignments),
window, softcap, bool and float masks, one row a block and row tiles of several, stale NaN rows
past kv_len, K/V views that are not 16-byte aligned (scalar loads) and a row that sees no key.
Each case also checks that its node takes the wide kernel with the layout it is meant to cover,
so a change of the chunk rule cannot leave a path untested. Skipped where g++ (C++20) is missing.
"""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.kernels.attention import decode_wide_layout, variants
from optgraph.codegen.kernels.attention.head_rows import attention_shape
from optgraph.reference.interpreter import nmse, random_inputs, run_reference
from tests.support import cuda_emulator

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
BOUNDS = {"f32": 1e-7, "f16": 1e-6, "bf16": 1e-4}
DTYPES = ["f32", "f16", "bf16"]

# 8 q heads over 2 KV heads, D 64, 100 keys of which 77 visible: f16 one chunk (4 slots of 32
# keys, the last partly past the cache), f32 two chunks (7 slots of 16 keys)
GQA_LEN = """graph gqa_len {
  input %q : {T}[1,8,1,64]
  input %k : {T}[1,2,100,64]
  input %v : {T}[1,2,100,64]
  input %len : i32[1]
  %o = attention(%q, %k, %v, %len) : {T}[1,8,1,64]
  output %o
}
"""
# batch 2, a kv_len per row, causal Sq 2 with a window, softcap and a bool mask per (b, h, i, j)
MASKED = """graph masked {
  input %q : {T}[2,4,2,32]
  input %k : {T}[2,2,300,32]
  input %v : {T}[2,2,300,32]
  input %len : i32[2]
  input %m : bool[2,4,2,300]
  %o = attention(%q, %k, %v, %len, %m) {causal = true, masked = true, softcap = 2.0, window = 45} : {T}[2,4,2,32]
  output %o
}
"""
# a float mask broadcast over heads, top-left causal alignment, group 6 x Sq 2: 12 rows in two
# row tiles of 8; D 128, a custom scale
FLOAT_MASK = """graph float_mask {
  input %q : {T}[1,6,2,128]
  input %k : {T}[1,1,150,128]
  input %v : {T}[1,1,150,128]
  input %fm : {T}[1,1,2,150]
  %o = attention(%q, %k, %v, %fm) {causal = true, causal_align = "top_left", masked = true, scale = 0.05} : {T}[1,6,2,128]
  output %o
}
"""
# a long cache: several chunks, each walked in several passes (MAX_CHUNKS lowered to 2)
LONG = """graph long_cache {
  input %q : {T}[1,4,1,64]
  input %k : {T}[1,2,1100,64]
  input %v : {T}[1,2,1100,64]
  input %len : i32[1]
  %o = attention(%q, %k, %v, %len) : {T}[1,4,1,64]
  output %o
}
"""


def _layout(graph: og.Graph) -> decode_wide_layout.WideLayout:
    types = graph.value_types()
    node = next(n for n in graph.nodes if n.op == "attention")
    shape = attention_shape(node, tuple(types[o] for o in node.operands))
    assert decode_wide_layout.fits(shape)
    kernel = variants.attention_launch(node, tuple(types[o] for o in node.operands)).kernel
    assert kernel.name.startswith("og_attention_decode_wide_")
    return decode_wide_layout.wide_layout(shape)


def _check(
    graph: og.Graph, inputs: dict[str, np.ndarray], run: dict[str, np.ndarray] | None = None
) -> None:
    """The kernel on `run` (default: `inputs`) against the reference on `inputs`."""
    want = run_reference(graph, inputs, {})
    got = cuda_emulator.run_graph(graph, inputs if run is None else run, {})
    types = graph.value_types()
    for name, value in got.items():
        err = nmse(np.asarray(value, np.float64), np.asarray(want[name], np.float64))
        bound = BOUNDS[types[name].dtype]
        assert err <= bound, f"%{name} ({types[name]}): nmse {err:.3e} > {bound:g}"
        assert np.abs(np.asarray(value, np.float64)).max() > 0.0  # not all zeros


@pytest.mark.parametrize("dtype", DTYPES)
def test_gqa_with_kv_len_below_the_cache(dtype: str) -> None:
    graph = og.parse(GQA_LEN.replace("{T}", dtype))
    lay = _layout(graph)
    assert lay.chunks == (2 if dtype == "f32" else 1) and 100 % lay.kps != 0
    inputs = random_inputs(graph, 1)
    inputs["len"] = np.array([77], np.int32)
    # stale cache rows past kv_len must not leak into the result, not even as NaN (the reference,
    # 0 x NaN, would: it runs on zeros there)
    stale = {**inputs, "v": inputs["v"].copy()}
    stale["v"][:, :, 77:, :] = np.nan
    inputs["v"][:, :, 77:, :] = 0.0
    _check(graph, inputs, stale)


@pytest.mark.parametrize("dtype", DTYPES)
def test_batch_rows_with_window_softcap_and_bool_mask(dtype: str) -> None:
    graph = og.parse(MASKED.replace("{T}", dtype))
    lay = _layout(graph)
    assert lay.chunks > 1
    inputs = random_inputs(graph, 2)
    inputs["len"] = np.array([300, 131], np.int32)
    rng = np.random.default_rng(3)
    inputs["m"] = rng.random((2, 4, 2, 300)) < 0.8
    _check(graph, inputs)


@pytest.mark.parametrize("shared", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_float_mask_top_left_and_row_tiles(
    dtype: str, shared: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`shared`: K/V over `L2_REREAD_BYTES`, so a block takes 8 of the 12 rows (two row tiles);
    else one row a block (12 row tiles)."""
    if shared:
        monkeypatch.setattr(decode_wide_layout, "L2_REREAD_BYTES", 0)
    graph = og.parse(FLOAT_MASK.replace("{T}", dtype))
    lay = _layout(graph)
    assert (lay.rb, lay.rt) == ((8, 2) if shared else (1, 12))
    inputs = random_inputs(graph, 4)
    rng = np.random.default_rng(5)
    fm = rng.normal(size=(1, 1, 2, 150)).astype(np.float32)
    fm[..., ::7] = -np.inf  # keys a float mask removes
    inputs["fm"] = fm.astype(inputs["fm"].dtype)
    _check(graph, inputs)


@pytest.mark.parametrize("length", [1037, 300])
@pytest.mark.parametrize("dtype", DTYPES)
def test_several_chunks_of_several_passes(
    dtype: str, length: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """kv_len 1037: the last chunk's last pass lies past it (not walked); 300: a whole chunk."""
    monkeypatch.setattr(decode_wide_layout, "MAX_CHUNKS", 2)
    graph = og.parse(LONG.replace("{T}", dtype))
    lay = _layout(graph)
    assert lay.chunks == 2 and lay.passes > 1
    # the last pass of the last chunk reaches past the cache
    assert lay.chunks * lay.passes * lay.slots * lay.kps > 1100
    inputs = random_inputs(graph, 6)
    inputs["len"] = np.array([length], np.int32)
    _check(graph, inputs)


def test_a_row_that_sees_no_key_yields_zeros() -> None:
    graph = og.parse(GQA_LEN.replace("{T}", "f16"))
    inputs = random_inputs(graph, 7)
    inputs["len"] = np.array([0], np.int32)
    got = cuda_emulator.run_graph(graph, inputs, {})["o"]
    assert not np.any(np.asarray(got, np.float64))


def test_the_old_kernel_stays_selectable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(variants, "WIDE_DECODE", False)
    graph = og.parse(GQA_LEN.replace("{T}", "f16"))
    types = graph.value_types()
    node = next(n for n in graph.nodes if n.op == "attention")
    kernel = variants.attention_launch(node, tuple(types[o] for o in node.operands)).kernel
    assert kernel.name.startswith("og_attention_decode_") and "wide" not in kernel.name


# K and V as views 3 elements into their buffers: not 16-byte aligned, so the scalar loads
UNALIGNED = """graph unaligned {
  input %q : {T}[1,8,1,64]
  input %kb : {T}[12803]
  input %vb : {T}[12803]
  input %len : i32[1]
  %ks = slice(%kb) {axis = 0, start = 3, end = 12803} : {T}[12800]
  %vs = slice(%vb) {axis = 0, start = 3, end = 12803} : {T}[12800]
  %k = reshape(%ks) {shape = [1,2,100,64]} : {T}[1,2,100,64]
  %v = reshape(%vs) {shape = [1,2,100,64]} : {T}[1,2,100,64]
  %o = attention(%q, %k, %v, %len) : {T}[1,8,1,64]
  output %o
}
"""


@pytest.mark.parametrize("dtype", DTYPES)
def test_unaligned_views_take_scalar_loads(dtype: str) -> None:
    graph = og.parse(UNALIGNED.replace("{T}", dtype))
    _layout(graph)
    inputs = random_inputs(graph, 8)
    inputs["len"] = np.array([90], np.int32)
    _check(graph, inputs)
