"""Row norms folded into the product that produced their row (`codegen/norm_folds.py`), on the CPU.

Plans lowered with `norm_folds.NORM_FOLDS` on run in the emulator (tests/support/cuda_emulator.py)
at their planned offsets: a 2-layer Llama decode (f32, f16, bf16; single-pass products) and a
split-K product followed by its norm agree with the reference interpreter within
`optgraph run --check`'s bounds and with the unfolded plan within the same bounds; the folded
norms issue no kernel; the product's step lists the norm's bytes among its writes and its
weight among its reads; illegal placements are refused.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen import norm_folds
from optgraph.codegen.cuda_plan import CudaPlan, KernelStep, lower_cuda
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.runtime.cuda import CHECK_BOUNDS
from optgraph.runtime.reference import nmse, random_inputs, random_weights, run_reference
from optgraph.runtime.reference_kernels import ir_dtype
from tests.support import cuda_emulator

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from gen_llama import generate_llama

# Norms kept as nodes of their own (hidden 64 is under fuse's prologue-max-k, as 4096 is over it).
ONE_STREAM = DEFAULT_PIPELINE.replace("assign-streams", "assign-streams{max-streams=1}").replace(
    "fuse,", "fuse{row-prologues=false},", 1
)

SPLIT_PIPELINE = (
    "verify,dce,fuse{prologue-max-k=128},assign-streams{max-streams=1},insert-sync,"
    "analyze-lifetimes,plan-memory"
)
SPLIT_K_NORM = """graph split_k_norm {
  input %x : DT[1,2560]
  input %r : DT[1,256]
  weight %w : DT[2560,256]
  weight %g : DT[256]
  weight %w2 : DT[256,64]
  %p = matmul(%x, %w) : DT[1,256]
  %h = add(%p, %r) : DT[1,256]
  %n = rms_norm(%h, %g) : DT[1,256]
  %y = matmul(%n, %w2) : DT[1,64]
  output %y, %h
}
"""


@contextmanager
def folding(on: bool = True) -> Iterator[None]:
    old = norm_folds.NORM_FOLDS
    norm_folds.NORM_FOLDS = on
    try:
        yield
    finally:
        norm_folds.NORM_FOLDS = old


def _assert_close(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    for name, w in want.items():
        g = got[name]
        assert g.shape == w.shape and g.dtype == w.dtype, name
        bound = CHECK_BOUNDS.get(ir_dtype(w.dtype))
        if bound is None:
            assert np.array_equal(g, w), f"%{name} differs"
        else:
            err = nmse(g.astype(np.float64), w.astype(np.float64))
            assert err <= bound, f"%{name}: nmse {err:.3e} > {bound:g}"


def _kernel_nodes(plan: CudaPlan) -> set[str]:
    return {n for s in plan.steps if isinstance(s, KernelStep) for n in (s.nodes or (s.node,))}


def _check(source: og.Graph, pipeline: str, folded_norms: set[str]) -> None:
    graph = run_pipeline(source, pipeline)
    inputs, weights = random_inputs(source, seed=0), random_weights(source, seed=0)
    want = run_reference(source, inputs, weights)
    with folding(False):
        plain = lower_cuda(graph)
    with folding():
        folded = lower_cuda(graph)
    assert folded_norms <= _kernel_nodes(plain)
    assert not folded_norms & _kernel_nodes(folded), "a folded norm still issues a kernel"
    assert folded.count(KernelStep) == plain.count(KernelStep) - len(folded_norms)
    got_plain = cuda_emulator.run_plan(plain, inputs, weights)
    got = cuda_emulator.run_plan(folded, inputs, weights)
    _assert_close(got, want)
    _assert_close(got, got_plain)


pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_llama_decode_norms_folded(dtype: str) -> None:
    source = og.parse(generate_llama(layers=2, dtype=dtype))
    # l0.attn_in follows get_rows: one gather-and-norm block.
    graph = run_pipeline(source, ONE_STREAM)
    with folding():
        folds = norm_folds.norm_folds(graph, lower_cuda(graph).locations)
    names = {f.norm.name for f in folds.values()}
    assert {"l0.attn_in", "l0.mlp_in", "l1.attn_in", "l1.mlp_in"} <= names
    _check(source, ONE_STREAM, names)


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_split_k_product_norm_folded(dtype: str) -> None:
    source = og.parse(SPLIT_K_NORM.replace("DT", dtype))
    graph = run_pipeline(source, SPLIT_PIPELINE)
    plan = lower_cuda(graph)
    assert any(s.grid[1] > 1 for s in plan.steps if isinstance(s, KernelStep)), "not split-K"
    _check(source, SPLIT_PIPELINE, {"n"})


def test_folded_step_lists_the_norm_bytes() -> None:
    source = og.parse(SPLIT_K_NORM.replace("DT", "f16"))
    graph = run_pipeline(source, SPLIT_PIPELINE)
    with folding():
        plan = lower_cuda(graph, merge_launches=False)
    (step,) = [s for s in plan.steps if isinstance(s, KernelStep) and s.node == "h"]
    assert step.reads is not None and step.writes is not None
    n, g = plan.locations["n"], plan.locations["g"]
    assert any(e.key == n.key and e.offset == n.offset and e.size == 512 for e in step.writes)
    assert any(e.space == g.space and e.offset == g.offset for e in step.reads)
    kernel = plan.kernels[step.kernel]
    assert "og_ncnt_" in kernel.source and "[0] = 0u;" in kernel.source  # reset for replays


def test_norm_over_its_row_is_not_folded() -> None:
    source = og.parse(SPLIT_K_NORM.replace("DT", "f16"))
    graph = run_pipeline(source, SPLIT_PIPELINE)
    locations = dict(lower_cuda(graph).locations)
    with folding(False):
        assert norm_folds.norm_folds(graph, locations) == {}
    with folding():
        assert set(norm_folds.norm_folds(graph, locations)) == {"h"}
        locations["n"] = locations["r"]  # the product's operand: read before the norm's store
        assert set(norm_folds.norm_folds(graph, locations)) == {"h"}
        locations["n"] = locations["h"]  # the row itself: the tail reads it
        assert norm_folds.norm_folds(graph, locations) == {}
