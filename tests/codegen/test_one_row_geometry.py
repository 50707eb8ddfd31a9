"""Layouts of the one-row product kernels (`codegen.cuda_gemv_layout`) and every branch run on the
CPU emulator against the reference: the wide single pass (K > 2048, N giving one tile a
multiprocessor), split-K with 16 and with 32 column threads, a row-norm prologue, f16, bf16 and
f32, tiles and K slices with tails. The small single-pass layouts run in test_cuda_emulated.py.
"""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.cuda_dispatch import node_code
from optgraph.codegen.cuda_source import Launch
from optgraph.codegen.kernels.one_row.geometry import BOUNDS, SMS, THREADS, VECTOR, layout
from optgraph.codegen.lower_cuda import KernelStep, lower_cuda
from optgraph.codegen.plan.merged_kernel import merged_kernel
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.support.cuda_emulator import available, run_graph, run_plan

BOUNDS_NMSE = {"f32": 1e-7, "f16": 1e-6, "bf16": 1e-4}  # the GPU tests' bounds

LAYOUTS = """graph gemv_layouts {
  input %a : f16[1,2100]
  weight %wa : f16[2100,8456]
  input %b : f16[1,2100]
  weight %wb : f16[2100,2056]
  weight %g : f16[2100]
  input %r : f16[1,2056]
  input %c : f32[1,4100]
  weight %wc : f32[4100,260]
  input %d : bf16[1,2100]
  weight %wd : bf16[2100,2056]
  %ya = matmul(%a, %wa) : f16[1,8456]
  %nb = rms_norm(%b, %g) : f16[1,2100]
  %mb = matmul(%nb, %wb) : f16[1,2056]
  %yb = add(%mb, %r) : f16[1,2056]
  %yc = matmul(%c, %wc) : f32[1,260]
  %yd = matmul(%d, %wd) : bf16[1,2056]
  output %ya, %yb, %yc, %yd
}
"""


def test_layouts_of_llama_decode_products() -> None:
    """The measured choices (docs/benchmarks.md, 'One-row products'), f16: (column threads,
    tiles, splits, rows per split)."""
    assert layout(4096, 4096, 8) == (16, 32, 5, 820)  # wq, wo: split-K, ~1 block an SM
    assert layout(4096, 1024, 8) == (32, 4, 33, 125)  # wk, wv: narrow, 32 column threads
    assert layout(4096, 14336, 8) == (8, 224, 1, 4096)  # w_gate, w_up: single pass
    assert layout(14336, 4096, 8) == (16, 32, 5, 2868)  # w_down
    assert layout(4096, 32000, 8) == (16, 250, 1, 4096)  # lm_head: single pass
    # small matrices keep the single-pass layout of at most 4 (else 8) rows a thread
    assert layout(512, 512, 8) == (2, 32, 1, 512)
    assert layout(1376, 512, 8) == (1, 64, 1, 1376)
    # ... but 16-byte row segments only for matrices that fit in L2 (≤ 4 MiB): a tensor-parallel
    # rank's o-projection [2048, 4096] (16 MiB) takes split-K with whole 256-byte segments
    assert layout(2048, 4096, 8) == (16, 32, 5, 410)
    assert layout(2048, 1024, 8)[0] == 1  # 4 MiB: still the narrow single pass


@pytest.mark.parametrize("vec", sorted(set(VECTOR.values())))
@pytest.mark.parametrize("k", [1, 100, 2048, 2049, 4096, 14336, 100_000])
@pytest.mark.parametrize("n", [8, 1024, 4104, 32000, 128_256])
def test_every_row_and_column_once(k: int, n: int, vec: int) -> None:
    ct, tiles, splits, rows = layout(k, n, vec)
    assert 32 % ct == 0  # the block reduction's shuffles assume a column group within a warp
    assert (tiles - 1) * ct * vec < n <= tiles * ct * vec
    assert (splits - 1) * rows < k <= splits * rows
    if splits > 1:  # split-K only to reach about a block a multiprocessor
        assert tiles * (splits - 1) < SMS
    if splits == 1 and k > 8 * THREADS:
        assert tiles >= SMS  # a single pass of big K: only when N alone fills the GPU


def test_kernels_and_merged_kernels_carry_launch_bounds() -> None:
    """Without them ptxas budgets 32 registers and keeps one or two loads in flight."""
    graph = og.parse(LAYOUTS)
    types = graph.value_types()
    launches = [
        work
        for node in graph.nodes
        if node.op == "matmul"
        for work in node_code(node, [types[o] for o in node.operands])
        if isinstance(work, Launch)
    ]
    assert len(launches) == 4 and all(w.kernel.bounds == BOUNDS for w in launches)
    assert all("__launch_bounds__(256, 2)" in w.kernel.source for w in launches)
    merged = merged_kernel([(w.kernel, w.grid) for w in launches[1:]])
    assert merged.bounds == BOUNDS and "__launch_bounds__(256, 2)" in merged.source


@pytest.mark.skipif(not available(), reason="needs g++ (C++20)")
def test_every_layout_branch_matches_reference() -> None:
    graph = run_pipeline(og.parse(LAYOUTS), "fuse{prologue-max-k=8192}")
    types = graph.value_types()
    grids = {
        node.name: work.grid
        for node in graph.nodes
        for work in node_code(node, [types[o] for o in node.operands])
        if isinstance(work, Launch)
    }
    assert grids == {
        "ya": (133, 1, 1),  # single pass, 8 column threads, last tile 8 of 64 columns
        "yb": (17, 8, 1),  # rms_norm prologue, split-K, 16 column threads, 263-row slices
        "yc": (3, 44, 1),  # f32, split-K, 32 column threads (128 columns), last tile 4 wide
        "yd": (17, 8, 1),  # bf16, split-K
    }
    inputs, weights = random_inputs(graph, 0), random_weights(graph, 0)
    want = run_reference(graph, inputs, weights)
    got = run_graph(graph, inputs, weights)
    for name, value in got.items():
        err = nmse(np.asarray(value, np.float64), np.asarray(want[name], np.float64))
        bound = BOUNDS_NMSE[types[name].dtype]
        assert err <= bound, f"%{name} ({types[name]}): nmse {err:.3e} > {bound:g}"


@pytest.mark.skipif(not available(), reason="needs g++ (C++20)")
@pytest.mark.parametrize("merge", [False, True])
def test_weights_loaded_before_the_wait_give_the_same_bits(merge: bool) -> None:
    """`product_kernel.EARLY_WEIGHTS`: every layout branch (f16, f32, bf16, a norm prologue, split-K)
    loads its first weight rows before the PDL entry, in a plan (alone and merged), and gives
    the bits of the kernels that load them after it (`run_graph` passes no resident weights)."""
    graph = run_pipeline(
        og.parse(LAYOUTS), DEFAULT_PIPELINE.replace("fuse,", "fuse{prologue-max-k=8192},", 1)
    )
    plan = lower_cuda(graph, merge_launches=merge)
    launched = [plan.kernels[s.kernel] for s in plan.steps if isinstance(s, KernelStep)]
    assert all(k.self_wait for k in launched) and "og_wv0" in plan.source()
    inputs, weights = random_inputs(graph, 0), random_weights(graph, 0)
    got = run_plan(plan, inputs, weights)
    want = run_graph(graph, inputs, weights)
    for name in want:
        np.testing.assert_array_equal(got[name], want[name])


def test_small_products_take_the_widest_tile_that_keeps_the_rows_a_thread_takes() -> None:
    assert layout(512, 512, 8) == (2, 32, 1, 512)  # o-proj: 32 blocks
    assert layout(512, 512, 8, even=True) == (2, 32, 1, 512)  # a rope fold keeps pairs
    assert layout(512, 1376, 8) == (2, 86, 1, 512)
    assert layout(1376, 512, 8) == (1, 64, 1, 1376)  # the only single pass
    assert layout(4096, 4096, 8) == (16, 32, 5, 820)  # big products: split-K
