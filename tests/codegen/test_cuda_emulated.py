"""Generated kernels run on the CPU (tests/support/cuda_emulator.py) against the reference
interpreter, on graphs beyond the op cases (tests/codegen/test_op_kernels_emulated.py runs those).

Covers the kernels with warp shuffles, shared memory and cross-block workspaces, where an
indexing or ordering bug would otherwise only show on a GPU: the three attention kernels (split-KV
decode with one and several chunks and row tiles, the tiled prefill kernel, the row kernel for
wide heads, each also with masks, per-row kv_len, windows, softcap and top-left causal), the row kernels of softmax and the norms, the one-row product kernel (single pass and
split-K with its last-block reduction) and the cache copy of kv_cache_write. Bounds are the GPU tests' own
(tests/support/gpu_support.py). Skipped where g++ (C++20) is missing.
"""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.cuda_dispatch import node_code
from optgraph.codegen.cuda_source import Launch
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.support import cuda_emulator
from tests.support.op_cases import PRODUCT_PROLOGUES, SIBLINGS_DECODE, case_graph_text

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
BOUNDS = {"f32": 1e-7, "f16": 1e-6, "bf16": 1e-4}

WIDE_HEADS = """graph wide_heads {
  input %q : f32[1,2,3,288]
  input %k : f32[1,1,40,288]
  input %v : f32[1,1,40,288]
  input %pq : f32[1,1,9,192]
  %d = attention(%q, %k, %v) {causal = true} : f32[1,2,3,288]
  %p = attention(%pq, %pq, %pq) {causal = true} : f32[1,1,9,192]
  output %d, %p
}
"""
WIDE_HEADS_MASKED = """graph wide_heads_masked {
  input %q : {T}[1,2,3,288]
  input %k : {T}[1,1,40,288]
  input %len : i32[1]
  input %m : bool[1,2,3,40]
  input %bq : {T}[2,2,3,288]
  input %bk : {T}[2,1,40,288]
  input %blen : i32[2]
  input %bm : {T}[2,1,1,40]
  %d = attention(%q, %k, %k, %len, %m) {causal = true, causal_align = "top_left", masked = true, softcap = 1.0, window = 2} : {T}[1,2,3,288]
  %b = attention(%bq, %bk, %bk, %blen, %bm) {causal = true, masked = true, window = 5} : {T}[2,2,3,288]
  output %d, %b
}
"""
ROWS = """graph rows {
  input %x : f16[3,4096]
  input %r : f16[3,4096]
  weight %w : f16[4096]
  weight %b : f16[4096]
  input %y : f16[2,40000]
  weight %u : f16[40000]
  %n = fused(%x, %r, %w) : f16[3,4096] body(%p0, %p1, %p2) {
    %h = add(%p0, %p1) : f16[3,4096]
    %m = rms_norm(%h, %p2) {eps = 1e-05} : f16[3,4096]
    yield %m
  }
  %l = layer_norm(%x, %w, %b) : f16[3,4096]
  %s = softmax(%x) : f16[3,4096]
  %big = rms_norm(%y, %u) : f16[2,40000]
  %t = softmax(%y) : f16[2,40000]
  output %n, %l, %s, %big, %t
}
"""


PRODUCTS_AND_CACHES = """graph products_and_caches {
  input %x : f16[1,512]
  weight %w : f16[512,512]
  input %g : f16[1,1376]
  weight %d : f16[1376,512]
  input %r : f16[1,512]
  input %y : f32[1,4096]
  weight %big : f32[4096,256]
  weight %wk : f16[512,128]
  input %cache : f16[1,2,16,64]
  input %new : f16[1,2,3,64]
  input %pos : i32[1]
  %a = matmul(%x, %w) : f16[1,512]
  %b = fused(%g, %d, %r) : f16[1,512] body(%p0, %p1, %p2) {
    %m = matmul(%p0, %p1) : f16[1,512]
    %o = add(%p2, %m) : f16[1,512]
    yield %o
  }
  %c = matmul(%y, %big) : f32[1,256]
  %k = matmul(%x, %wk) : f16[1,128]
  %kv = kv_cache_write(%cache, %new, %pos) : f16[1,2,16,64]
  output %a, %b, %c, %k, %kv
}
"""


def _check(graph: og.Graph) -> None:
    inputs, weights = random_inputs(graph, 0), random_weights(graph, 0)
    want = run_reference(graph, inputs, weights)
    got = cuda_emulator.run_graph(graph, inputs, weights)
    types = graph.value_types()
    for name, value in got.items():
        err = nmse(np.asarray(value, np.float64), np.asarray(want[name], np.float64))
        bound = BOUNDS[types[name].dtype]
        assert err <= bound, f"%{name} ({types[name]}): nmse {err:.3e} > {bound:g}"


def test_attention_kernels_match_reference() -> None:
    _check(og.parse(case_graph_text("attention", "f32")))


def test_attention_row_kernel_for_wide_heads() -> None:
    _check(og.parse(WIDE_HEADS))


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_attention_row_kernel_with_masks_windows_and_softcap(dtype: str) -> None:
    _check(og.parse(WIDE_HEADS_MASKED.replace("{T}", dtype)))


def test_row_kernels_match_reference() -> None:
    _check(og.parse(ROWS))


def test_one_row_products_and_cache_copy_match_reference() -> None:
    """Single-pass and split-K one-row products; the 16-byte copy of kv_cache_write."""
    _check(og.parse(PRODUCTS_AND_CACHES))


def test_sibling_products_match_reference() -> None:
    """fuse-siblings regions: q/k/v-like concat with an epilogue, gate/up pairs, single pass (f16,
    K = 512) and split-K (f32, K = 4096); the slices alias the region's result."""
    graph = run_pipeline(og.parse(SIBLINGS_DECODE), "fuse{row-prologues=false},fuse-siblings")
    assert sum(1 for n in graph.nodes if n.op == "slice") == 5
    _check(graph)


def test_one_row_product_prologues_match_reference() -> None:
    """Norms recomputed inside each product that reads them (rms_norm of a residual sum shared by
    two products, single pass; layer_norm, split-K) and an elementwise prologue (SwiGLU's mul)."""
    graph = run_pipeline(og.parse(PRODUCT_PROLOGUES), "fuse{prologue-max-k=4096}")
    fused = {n.name: n for n in graph.nodes if n.op == "fused"}
    assert set(fused) == {"q", "k", "c", "o"}, sorted(fused)
    assert all(n.body is not None and n.body.nodes[-1].op == "matmul" for n in fused.values())
    assert not any(n.op in ("rms_norm", "layer_norm") for n in graph.nodes)
    _check(graph)


WIDE_SWIGLU = """graph wide_swiglu {
  input %x : f16[1,256]
  weight %wg : f16[256,8192]
  weight %wu : f16[256,8192]
  weight %wd : f16[8192,256]
  %a = matmul(%x, %wg) : f16[1,8192]
  %u = matmul(%x, %wu) : f16[1,8192]
  %s = silu(%a) : f16[1,8192]
  %m = mul(%s, %u) : f16[1,8192]
  %d = matmul(%m, %wd) : f16[1,256]
  %h = add(%x, %d) : f16[1,256]
  output %h
}
"""


def test_wide_elementwise_prologue_matches_reference() -> None:
    """SwiGLU's mul as the prologue of a split-K down product 8192 rows deep
    (`elementwise-prologue-max-k` above the norms' `prologue-max-k`), gate and up independent."""
    graph = run_pipeline(og.parse(WIDE_SWIGLU), "fuse{elementwise-prologue-max-k=16384}")
    fused = {n.name: n for n in graph.nodes if n.op == "fused"}
    assert set(fused) == {"s", "h"}, sorted(fused)
    assert [n.op for n in fused["h"].body.nodes][:2] == ["mul", "matmul"]
    _check(graph)


@pytest.mark.parametrize("warp_k", [4096, 512, 0])
def test_prologue_norm_statistics_by_warp_or_block_match_reference(
    warp_k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Norm statistics reduced by every warp alone (rows up to `WARP_STATISTICS_MAX_K`) or by
    the block: rms_norm of 512 (single pass), layer_norm of 4096 (split-K), SwiGLU's mul."""
    from optgraph.codegen.kernels.one_row import prologue

    monkeypatch.setattr(prologue, "WARP_STATISTICS_MAX_K", warp_k)
    graph = run_pipeline(og.parse(PRODUCT_PROLOGUES), "fuse{prologue-max-k=4096}")
    types = graph.value_types()
    sources = {
        node.name: "".join(
            work.kernel.source
            for work in node_code(node, [types[o] for o in node.operands])
            if isinstance(work, Launch)
        )
        for node in graph.nodes
    }
    assert ("og_warp_sum(" in sources["q"]) == (warp_k >= 512)  # the 512-wide rms_norm
    assert ("og_warp_sum(" in sources["c"]) == (warp_k >= 4096)  # the 4096-wide layer_norm
    _check(graph)
