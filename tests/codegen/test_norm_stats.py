"""Norm statistics handed from the product storing the row (codegen/norm_stats.py,
cuda_norm_stats.py): which steps write and read the partials, which norms keep their per-block
reduction, and in the CPU emulator decode steps shaped like the realistic one (f16, f32; single-pass
and split-K producers; planned and unplanned storage) against the reference, the same bits on
every run; layer_norm of a row far from zero as precise as the readers' own reduction."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen import cuda_row_prologue
from optgraph.codegen.cuda_plan import CudaPlan, KernelStep, lower_cuda
from optgraph.codegen.cuda_steps import Extent
from optgraph.codegen.in_place_outputs import in_place_candidates
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.runtime.reference import nmse, random_inputs, random_weights, run_reference
from tests.support import cuda_emulator

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from gen_llama import generate_llama

NEEDS_GXX = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
STATS_PIPELINE = DEFAULT_PIPELINE.replace("fuse,", "fuse{stats-prologue-max-k=16384},", 1)
BOUNDS = {"f32": 1e-7, "f16": 1e-6}


@pytest.fixture
def handed(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_row_prologue, "NORM_STATS", True)


def _llama(dt: str, layers: int, hidden: int, ffn: int, pipeline: str = STATS_PIPELINE) -> og.Graph:
    text = generate_llama(
        layers=layers, hidden=hidden, heads=hidden // 64, kv_heads=2, ffn=ffn, vocab=128,
        dtype=dt, cache_len=16,
    )  # fmt: skip
    return run_pipeline(og.parse(text), pipeline)


def _reduces_its_row(source: str) -> bool:
    """The kernel reduces a norm's row itself: by block, or by warp (rows up to
    `cuda_row_prologue.WARP_STATISTICS_MAX_K`)."""
    return "og_row_scratch" in source or "og_warp_sum(" in source


def _step(plan: CudaPlan, node: str) -> KernelStep:
    found = [s for s in plan.steps if isinstance(s, KernelStep) and node in s.members]
    assert len(found) == 1, node
    return found[0]


def _stats_extents(plan: CudaPlan) -> set[Extent]:
    """The extents of the partials: past the planned values, the only arena bytes no value has."""
    values = {
        Extent(loc.space, loc.key, loc.offset, plan.types[name].nbytes)
        for name, loc in plan.locations.items()
    }
    found = set()
    for step in plan.steps:
        if isinstance(step, KernelStep):
            for e in (step.reads or ()) + (step.writes or ()):
                if not any(e.overlaps(v) for v in values):
                    found.add(e)
    return found


def test_the_producer_writes_and_its_readers_read_the_partials(handed: None) -> None:
    graph = _llama("f16", layers=2, hidden=512, ffn=1024)
    plan = lower_cuda(graph, in_place=in_place_candidates(graph))
    stats = _stats_extents(plan)
    # o-projection + residual (l*.h_attn), down product + residual (l*.out): one region each
    assert len(stats) == 4, stats
    for producer, readers in (
        ("l0.h_attn", ("l0.up", "l0.gate_act")),
        ("l0.out", ("l1.q", "l1.k", "l1.v")),
        ("l1.out", ("logits",)),
    ):
        step = _step(plan, producer)
        assert step.writes is not None
        (mine,) = [e for e in step.writes if e in stats]
        assert mine.size == 4 * step.grid[0]  # one float per (row, tile); m = 1
        assert "stats_out" in plan.kernels[step.kernel].source
        for reader in readers:
            read = _step(plan, reader)
            assert read.reads is not None and mine in read.reads, reader
            assert read is not step  # never merged with its producer
    # layer 0's norm reads the embedding row (get_rows): the per-block reduction stays
    first = _step(plan, "l0.q")
    assert first.reads is not None and not any(e in stats for e in first.reads)
    source = plan.kernels[first.kernel].source
    assert _reduces_its_row(source) and "stats_in" not in source
    assert not _reduces_its_row(plan.kernels[_step(plan, "l1.q").kernel].source)


def test_off_by_default_nothing_changes() -> None:
    assert cuda_row_prologue.NORM_STATS is False
    graph = _llama("f16", layers=1, hidden=512, ffn=1024)
    plan = lower_cuda(graph, in_place=in_place_candidates(graph))
    assert not _stats_extents(plan)
    assert not any("stats_" in k.source for k in plan.kernels.values())


def _same_as_reference_every_run(graph: og.Graph, pairs: dict[str, str] | None = None) -> None:
    inputs, weights = random_inputs(graph, 0), random_weights(graph, 0)
    want = run_reference(graph, inputs, weights)
    plan = lower_cuda(graph, in_place=pairs or {})
    stats = _stats_extents(plan)
    readers = [s for s in plan.steps if isinstance(s, KernelStep) and set(s.reads or ()) & stats]
    assert readers
    for step in readers:  # each adds the partials instead of reducing its row
        source = plan.kernels[step.kernel].source
        assert "stats_in[" in source and not _reduces_its_row(source), step.members
    runs = [cuda_emulator.run_plan(plan, inputs, weights, graph) for _ in range(2)]
    types = graph.value_types()
    for name, value in runs[0].items():
        err = nmse(np.asarray(value, np.float64), np.asarray(want[name], np.float64))
        assert err <= BOUNDS[types[name].dtype], f"%{name}: nmse {err:.3e}"
        assert np.array_equal(value.view(np.uint8), runs[1][name].view(np.uint8)), name


@NEEDS_GXX
@pytest.mark.parametrize("dt", ["f16", "f32"])
def test_decode_step_matches_reference(handed: None, dt: str) -> None:
    """Two layers, hidden 512: single-pass producers (K = 512, 1024), folded q/k/v readers."""
    graph = _llama(dt, layers=2, hidden=512, ffn=1024)
    _same_as_reference_every_run(graph, in_place_candidates(graph))


@NEEDS_GXX
def test_wide_decode_step_with_split_k_producers(handed: None) -> None:
    """One layer, hidden 4096 (the realistic row): both producers split K; the norms are
    prologues only through stats-prologue-max-k."""
    graph = _llama("f16", layers=1, hidden=4096, ffn=1024)
    assert sum(n.op == "rms_norm" for n in graph.nodes) == 1  # layer 0's, of the embedding row
    plan = lower_cuda(graph, in_place=in_place_candidates(graph))
    assert _step(plan, "l0.h_attn").grid[1] > 1 and _step(plan, "l0.out").grid[1] > 1
    _same_as_reference_every_run(graph, in_place_candidates(graph))


@NEEDS_GXX
def test_unplanned_graph_keeps_the_partials_in_value_buffers(handed: None) -> None:
    graph = _llama("f32", layers=1, hidden=512, ffn=1024, pipeline="fuse")
    plan = lower_cuda(graph)
    keys = [k for k in plan.value_bytes if k.endswith("#norm_stats")]
    assert keys == ["l0.h_attn#norm_stats", "l0.out#norm_stats"]
    _same_as_reference_every_run(graph)


LN_DECODE = """graph ln_decode {{
  input %x : f32[1,{k}]
  input %r : f32[1,1024]
  weight %wo : f32[{k},1024]
  weight %g : f32[1024]
  weight %b : f32[1024]
  weight %wq : f32[1024,64]
  weight %wk : f32[1024,64]
  weight %g2 : f32[1024]
  weight %wu : f32[1024,128]
  %o = matmul(%x, %wo) : f32[1,1024]
  %h = add(%r, %o) : f32[1,1024]
  %ln = layer_norm(%h, %g, %b) : f32[1,1024]
  %q = matmul(%ln, %wq) : f32[1,64]
  %k = matmul(%ln, %wk) : f32[1,64]
  %rn = rms_norm(%h, %g2) : f32[1,1024]
  %u = matmul(%rn, %wu) : f32[1,128]
  output %q, %k, %u
}}
"""


@NEEDS_GXX
@pytest.mark.parametrize("k", [512, 4096])
def test_layer_norm_of_a_row_far_from_zero(monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    """layer_norm's partials (count, sum, squares about the tile's mean) keep a row of 1000 ± 1
    as precise as the readers' own shifted reduction (a naive Σx²/K − mean² would lose about
    5e-2 of its variance in float32); single-pass (K = 512) and split-K (K = 4096) producers.
    The rms_norm reader of the same row, of the other kind, keeps its block reduction."""
    graph = run_pipeline(og.parse(LN_DECODE.format(k=k)), "fuse,analyze-lifetimes,plan-memory")
    rng = np.random.default_rng(k)
    inputs = {
        "x": rng.standard_normal((1, k)).astype(np.float32),
        "r": (1000.0 + rng.uniform(-1.0, 1.0, (1, 1024))).astype(np.float32),
    }
    weights = random_weights(graph, 0)
    reduced = cuda_emulator.run_plan(lower_cuda(graph), inputs, weights, graph)
    monkeypatch.setattr(cuda_row_prologue, "NORM_STATS", True)
    plan = lower_cuda(graph)
    assert (_step(plan, "h").grid[1] > 1) == (k == 4096)
    for name in ("q", "k"):
        assert "stats_in[" in plan.kernels[_step(plan, name).kernel].source
    assert _reduces_its_row(plan.kernels[_step(plan, "u").kernel].source)
    got = cuda_emulator.run_plan(plan, inputs, weights, graph)
    for name in ("q", "k"):
        error = float(np.abs(got[name] - reduced[name]).max() / np.abs(reduced[name]).max())
        assert error < 1e-5, (name, error)
    assert np.array_equal(got["u"], reduced["u"])


VIEW_READER = """graph view_reader {
  input %x : f16[1,512]
  input %r : f16[1,512]
  weight %wo : f16[512,512]
  weight %g : f16[512]
  weight %wq : f16[512,128]
  %o = matmul(%x, %wo) : f16[1,512]
  %h = add(%r, %o) : f16[1,512]
  %hv = reshape(%h) {shape = [1, 1, 512]} : f16[1,1,512]
  %n = rms_norm(%hv, %g) : f16[1,1,512]
  %q = matmul(%n, %wq) : f16[1,1,128]
  output %q
}
"""


@NEEDS_GXX
def test_a_norm_of_a_view_of_the_row_takes_the_partials(handed: None) -> None:
    graph = run_pipeline(og.parse(VIEW_READER), "fuse,analyze-lifetimes,plan-memory")
    plan = lower_cuda(graph)
    (mine,) = _stats_extents(plan)
    step = _step(plan, "q")
    assert step.reads is not None and mine in step.reads
    _same_as_reference_every_run(graph)


@pytest.fixture
def scaled(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cuda_row_prologue, "NORM_STATS", True)
    monkeypatch.setattr(cuda_row_prologue, "SCALE_IN_EPILOGUE", True)


def _scaled_readers(plan: CudaPlan) -> list[str]:
    """The sources of the kernels dividing their sums by a handed r (no staged row)."""
    sources = [plan.kernels[s.kernel].source for s in plan.steps if isinstance(s, KernelStep)]
    found = [src for src in sources if "val /= og_r[i];" in src]
    for src in found:
        assert "og_sp_scratch" in src and "stats_in[" in src
    return found


@NEEDS_GXX
@pytest.mark.parametrize("dt", ["f16", "f32"])
def test_norms_scaled_in_the_epilogue_match_reference(scaled: None, dt: str) -> None:
    """`SCALE_IN_EPILOGUE`: the products read x·w and divide their sums by r (q/k/v folds with
    rope divide the partner's sum too); single-pass producers and readers."""
    graph = _llama(dt, layers=2, hidden=512, ffn=1024)
    plan = lower_cuda(graph, in_place=in_place_candidates(graph))
    readers = _scaled_readers(plan)
    assert len(readers) >= 3 and all("og_xs" not in src for src in readers)
    assert any("pval /= og_r[i];" in src for src in readers)  # a rope fold's partner
    _same_as_reference_every_run(graph, in_place_candidates(graph))


@NEEDS_GXX
def test_wide_norms_scaled_in_the_epilogue_with_split_k(scaled: None) -> None:
    """Hidden 4096: split-K producers and readers; the division comes after the split sums."""
    graph = _llama("f16", layers=1, hidden=4096, ffn=1024)
    plan = lower_cuda(graph, in_place=in_place_candidates(graph))
    assert _scaled_readers(plan)
    _same_as_reference_every_run(graph, in_place_candidates(graph))
