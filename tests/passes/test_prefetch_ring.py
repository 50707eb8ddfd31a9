"""plan-prefetch's ring: programs whose segments differ in size run at the planned offsets in random
stream interleavings bit-identical to the reference; every single inserted wait is needed (drop
any one and check-races names a race on a prefetch's bytes); the ring is traded for residents
only where the estimate gains, and never past the budget; the CUDA plan of a ring runs in the
CPU emulator equal to the reference; and all of it on random sizes, stream plans, options and
budgets (hypothesis)."""

from __future__ import annotations

import warnings

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optgraph.analysis.races import find_races
from optgraph.analysis.segments import device_memory
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline
from optgraph.passes.plan_prefetch import BudgetError
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.passes.test_prefetch import _chain
from tests.support import cuda_emulator
from tests.support.offload_models import assert_runs_equal_reference, llama
from tests.support.property_examples import examples

PLAN = "assign-streams{max-streams=2},insert-sync,analyze-lifetimes,plan-memory"
# FFN four times hidden: attention matrices are small segments, FFN ones large (as in a Llama).
SIZES = {"hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 128, "vocab": 64}


def _streamed(graph: Graph, fraction: float, options: str) -> tuple[Graph, int]:
    budget = int(device_memory(graph).peak * fraction)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return run_pipeline(graph, f"plan-prefetch{{budget={budget}{options}}}"), budget


def _mixed_sizes(graph: Graph) -> bool:
    sizes = {n.ann.size for n in graph.nodes if n.op == "prefetch"}
    return len(sizes) > 1


@pytest.mark.parametrize(
    "batch, seq, mode", [(1, 1, "decode"), (3, 1, "decode"), (2, 4, "prefill")]
)
@pytest.mark.parametrize(
    "options",
    ["", ",ring-bytes=0", ",segment-bytes=1KiB", ",depth=3,segment-bytes=1KiB", ",depth=1"],
)
def test_ring_programs_match_reference(batch: int, seq: int, mode: str, options: str) -> None:
    g = llama(layers=3, batch=batch, seq=seq, mode=mode, **SIZES)
    planned = run_pipeline(g, PLAN)
    streamed, budget = _streamed(planned, 0.45, options)
    memory = device_memory(streamed)
    assert memory.streamed_weights > 0 and memory.peak <= budget
    assert find_races(streamed) == []
    assert_runs_equal_reference(streamed, g, interleavings=4)


def test_small_segments_run_more_than_depth_ahead() -> None:
    """Several small segments are copied before the compute reads the first of them."""
    planned = run_pipeline(llama(layers=3, batch=2, **SIZES), PLAN)
    streamed, _ = _streamed(planned, 0.45, ",segment-bytes=1KiB,ring-bytes=0")
    assert _mixed_sizes(streamed)
    nodes = streamed.nodes
    first_read = min(i for i, n in enumerate(nodes) if any(o.endswith(".s") for o in n.operands))
    ahead = [n for n in nodes[:first_read] if n.op == "prefetch"]
    assert len({n.ann.segment for n in ahead}) > 2


@pytest.mark.parametrize("options", [",segment-bytes=1KiB", "", ",depth=1", ",ring-bytes=0"])
def test_dropping_any_one_inserted_wait_is_a_race(options: str) -> None:
    """Fault injection: each `^pf` wait alone, removed, leaves a prefetch's bytes unordered."""
    planned = run_pipeline(llama(layers=3, batch=2, **SIZES), PLAN)
    streamed, _ = _streamed(planned, 0.45, options)
    waits = [i for i, n in enumerate(streamed.nodes) if n.op == "wait" and n.name.startswith("pf")]
    assert waits
    for i in waits:
        broken = streamed.with_nodes(n for k, n in enumerate(streamed.nodes) if k != i)
        races = find_races(broken)
        assert any(
            "prefetch" in (broken.nodes[r.first.node].op, broken.nodes[r.second.node].op)
            for r in races
        ), streamed.nodes[i].name


def test_ring_traded_for_residents_only_when_the_copies_do_not_dominate() -> None:
    """24 equal weights, 16 of them over the budget. Copy-bound (100 MB/s), the most residents
    stay (the least ring); balanced (4 GB/s: a 16 KiB copy about a matmul), a resident becomes
    ring bytes; within the budget either way."""
    planned = _chain(24)
    budget = device_memory(planned).peak - 16 * 16 * 1024
    kept = {}
    for bandwidth in ("100MB", "4GB"):
        for ring in ("auto", "0"):
            options = f"segment-bytes=16KiB,host-bandwidth={bandwidth},ring-bytes={ring}"
            g = run_pipeline(planned, f"plan-prefetch{{budget={budget},{options}}}")
            assert device_memory(g).peak <= budget and find_races(g) == []
            kept[bandwidth, ring] = sum(w.ann.segment is None for w in g.weights)
    assert kept["100MB", "auto"] == kept["100MB", "0"]
    assert kept["4GB", "auto"] < kept["4GB", "0"]


@pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
def test_ring_program_runs_as_cuda_plan_in_the_emulator() -> None:
    """The CUDA plan of a mixed-size ring (kernels, cuBLAS products, copies from pinned host
    weights to the ring offsets) run in the CPU emulator equals the reference."""
    g = llama(layers=2, batch=2, **SIZES)
    planned = run_pipeline(g, PLAN)
    streamed, _ = _streamed(planned, 0.45, ",segment-bytes=1KiB")
    assert _mixed_sizes(streamed)
    inputs, weights = random_inputs(g), random_weights(g)
    got = cuda_emulator.run_plan(lower_cuda(streamed), inputs, weights)
    for name, value in run_reference(g, inputs, weights).items():
        assert nmse(got[name], value) < 1e-10, name


OPTIONS = [
    "",
    ",ring-bytes=0",
    ",depth=1",
    ",depth=3,segment-bytes=1KiB",
    ",segment-bytes=256",
    ",host-bandwidth=100MB,segment-bytes=512",
    ",ring-bytes=3KiB",
    ",sync=true",
]
STREAM_PLANS = [
    "assign-streams{max-streams=2},insert-sync,analyze-lifetimes,plan-memory",
    "assign-streams{max-streams=3},insert-sync,analyze-lifetimes,plan-memory",
    "analyze-lifetimes,plan-memory",
]


@settings(max_examples=examples(25))
@given(
    hidden=st.sampled_from([16, 32, 48]),
    heads=st.sampled_from([(2, 1), (4, 2), (4, 1)]),
    ffn=st.sampled_from([32, 64, 160]),
    shape=st.sampled_from([(1, 1, "decode"), (2, 1, "decode"), (1, 3, "prefill")]),
    plan=st.sampled_from(STREAM_PLANS),
    options=st.sampled_from(OPTIONS),
    fraction=st.floats(0.25, 0.9),
)
def test_random_rings_are_exact_race_free_and_need_every_wait(
    hidden: int,
    heads: tuple[int, int],
    ffn: int,
    shape: tuple[int, int, str],
    plan: str,
    options: str,
    fraction: float,
) -> None:
    """Random Llama sizes, stream plans, options and budgets: within the budget, race-free, equal
    to the reference in random interleavings, and fault injection: dropping any one inserted wait
    leaves a race on a prefetch's bytes (no wait is redundant either)."""
    batch, seq, mode = shape
    sizes = {"hidden": hidden, "heads": heads[0], "kv_heads": heads[1], "ffn": ffn, "vocab": 32}
    g = llama(layers=2, batch=batch, seq=seq, mode=mode, **sizes)
    planned = run_pipeline(g, plan)
    try:
        streamed, budget = _streamed(planned, fraction, options)
    except BudgetError:
        return
    assert device_memory(streamed).peak <= budget and find_races(streamed) == []
    assert_runs_equal_reference(streamed, g, interleavings=2)
    nodes = streamed.nodes
    for i in [k for k, n in enumerate(nodes) if n.op == "wait" and n.name.startswith("pf")]:
        broken = streamed.with_nodes(n for k, n in enumerate(nodes) if k != i)
        ops = [
            (broken.nodes[r.first.node].op, broken.nodes[r.second.node].op)
            for r in find_races(broken)
        ]
        assert any("prefetch" in pair for pair in ops), nodes[i].name
