"""plan-prefetch: streamed programs run in the planned executor (random stream interleavings)
bit-identical to the reference at batch 1 and batch > 1; peak device memory <= budget; slot reuse
is ordered by events (dropping one is a race the checker and the executor both see); the
synchronous fallback; combined with split-backends."""

from __future__ import annotations

import itertools
import warnings

import numpy as np
import pytest

import optgraph as og
from optgraph.analysis.prefetch_copies import insert_prefetches, strip_prefetch
from optgraph.analysis.races import find_races
from optgraph.analysis.schedule_estimate import estimate_schedule
from optgraph.analysis.segments import (
    Layout,
    Segment,
    device_memory,
    parse_size,
    spread,
    weight_accesses,
)
from optgraph.codegen.plan.lower_arena import lower
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline
from optgraph.passes.plan_prefetch import BudgetError
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from optgraph.runtime.cpu.planned_executor import PlanViolation, execute
from tests.support.offload_models import llama, run_planned

PLAN = "assign-streams{max-streams=2},insert-sync,analyze-lifetimes,plan-memory"
SPLIT_PLAN = (
    "assign-streams{max-streams=2},split-backends,insert-sync,analyze-lifetimes,plan-memory"
)


def _prefetched(graph: Graph, fraction: float, options: str = "") -> tuple[Graph, int]:
    budget = int(device_memory(graph).peak * fraction)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return run_pipeline(graph, f"plan-prefetch{{budget={budget}{options}}}"), budget


def _check_matches(planned: Graph, source: Graph, seeds: range) -> None:
    inputs, weights = random_inputs(source), random_weights(source)
    expected = run_reference(source, inputs, weights)
    for seed in seeds:
        got = run_planned(planned, inputs, weights, seed)
        for name, value in expected.items():
            assert np.array_equal(got[name], value), (seed, name)


@pytest.mark.parametrize(
    "batch, seq, mode", [(1, 1, "decode"), (4, 1, "decode"), (2, 3, "prefill")]
)
@pytest.mark.parametrize("options", [",depth=1", "", ",depth=3", ",sync=true"])
def test_streamed_programs_match_reference(batch: int, seq: int, mode: str, options: str) -> None:
    g = llama(layers=3, batch=batch, seq=seq, mode=mode)
    planned = run_pipeline(g, PLAN)
    streamed, budget = _prefetched(planned, 0.4, options)
    memory = device_memory(streamed)
    assert memory.streamed_weights > 0 and memory.peak <= budget
    assert find_races(streamed) == []
    _check_matches(streamed, g, range(5))


@pytest.mark.parametrize("options", ["", ",ring-bytes=0", ",depth=3"])
def test_peak_within_budget_for_every_budget(options: str) -> None:
    """Peak <= budget for every budget, ring grown or not. (Streamed bytes need not grow as the
    budget shrinks: each segment counts its overhead, and the ring may take a resident's room.)"""
    planned = run_pipeline(llama(layers=4, batch=2), PLAN)
    full = device_memory(planned).peak
    for fraction in (1.0, 0.9, 0.7, 0.5, 0.35, 0.25):
        try:
            streamed, budget = _prefetched(planned, fraction, options)
        except BudgetError:
            assert fraction < 0.3
            continue
        memory = device_memory(streamed)
        assert memory.peak <= budget
        assert (memory.streamed_weights == 0) == (full <= budget)
        assert find_races(streamed) == []


def test_slot_reuse_without_its_event_is_caught() -> None:
    """Drop the waits that make slot reuse safe: check-races and the executor both notice."""
    g = llama(layers=3, batch=2)
    streamed, _ = _prefetched(run_pipeline(g, PLAN), 0.4)
    free = [n for n in streamed.nodes if n.op == "wait" and ".free." in n.name]
    assert free
    broken = streamed.with_nodes(n for n in streamed.nodes if n not in free)
    assert any(
        streamed.nodes[r.first.node].op == "prefetch"
        or streamed.nodes[r.second.node].op == "prefetch"
        for r in find_races(broken)
    )
    inputs, weights = random_inputs(g), random_weights(g)
    expected = run_reference(g, inputs, weights)
    program = lower(broken)
    caught = 0
    for seed in range(30):
        try:
            out = execute(program, inputs, weights, seed=seed).outputs
        except PlanViolation:
            caught += 1
            continue
        caught += any(not np.array_equal(out[k], v) for k, v in expected.items())
    assert caught > 0


def test_fallback_to_synchronous_copies() -> None:
    """A budget holding one slot but not two: a warning, one slot, no copy stream, same results."""
    g = llama(layers=3)
    planned = run_pipeline(g, PLAN)
    low, high = 1, device_memory(planned).peak  # the least budget one slot fits
    while low < high:
        mid = (low + high) // 2
        try:
            run_pipeline(planned, f"plan-prefetch{{budget={mid},sync=true}}")
            high = mid
        except BudgetError:
            low = mid + 1
    budget = low
    with pytest.warns(RuntimeWarning, match="synchronous"):
        streamed = run_pipeline(planned, f"plan-prefetch{{budget={budget},depth=2}}")
    slots = {n.ann.slot for n in streamed.nodes if n.op == "prefetch"}
    assert slots == {0}
    assert device_memory(streamed).peak <= budget
    gpu_streams = {n.stream for n in planned.nodes}
    assert {n.stream for n in streamed.nodes} <= gpu_streams  # no copy stream was added
    _check_matches(streamed, g, range(4))


def test_budget_too_small_is_an_error() -> None:
    planned = run_pipeline(llama(layers=2), PLAN)
    with pytest.raises(BudgetError, match="too small"):
        run_pipeline(planned, "plan-prefetch{budget=1KiB}")


def test_strip_and_replan_round_trip() -> None:
    planned = run_pipeline(llama(layers=3, batch=2), PLAN)
    streamed, budget = _prefetched(planned, 0.5)
    assert og.parse(og.print_graph(streamed)) == streamed
    stripped = strip_prefetch(streamed)
    assert not any(n.op == "prefetch" for n in stripped.nodes)
    assert not any(w.ann.segment is not None for w in stripped.weights)
    again = run_pipeline(streamed, f"plan-prefetch{{budget={budget}}}")
    assert again == streamed
    sync = run_pipeline(streamed, f"plan-prefetch{{budget={budget},sync=true}}")
    assert {n.ann.slot for n in sync.nodes if n.op == "prefetch"} == {0}


@pytest.mark.parametrize("batch", [1, 3])
def test_split_and_streamed_together(batch: int) -> None:
    """Host embedding and lm_head on the CPU, the layers streamed: still bit-identical."""
    g = llama(layers=3, batch=batch, host_weights=("embed", "lm_head"))
    planned = run_pipeline(g, SPLIT_PLAN)
    streamed, budget = _prefetched(planned, 0.5)
    memory = device_memory(streamed)
    assert memory.streamed_weights > 0 and memory.peak <= budget
    assert any(n.ann.backend == "cpu" for n in streamed.nodes)
    assert find_races(streamed) == []
    _check_matches(streamed, g, range(5))


def test_parse_size() -> None:
    assert parse_size("2GiB") == 2 << 30
    assert parse_size("1.5GB") == 1_500_000_000
    assert parse_size("512MiB") == 512 << 20
    assert parse_size("64K") == 64 << 10
    assert parse_size("4096") == 4096
    with pytest.raises(ValueError, match="cannot read the size"):
        parse_size("2 lightyears")


def test_a_big_last_weight_enlarges_the_ring_by_its_own_size_only() -> None:
    """The least ring holds any two consecutive segments: 1 KiB + the 16 KiB head, not 2 x 16."""
    text = "graph g {\n  input %x : f32[1,16]\n"
    text += "".join(f"  weight %w{i} : f32[16,16]\n" for i in range(5))
    text += "  weight %head : f32[16,256]\n  %h0 = matmul(%x, %w0) : f32[1,16]\n"
    text += "".join(f"  %h{i} = matmul(%h{i - 1}, %w{i}) : f32[1,16]\n" for i in range(1, 5))
    text += "  %y = matmul(%h4, %head) : f32[1,256]\n  output %y\n}\n"
    planned = run_pipeline(og.parse(text), "analyze-lifetimes,plan-memory")
    streamed, _ = _prefetched(planned, 0.9, ",segment-bytes=1KiB,ring-bytes=0")
    copies = [n for n in streamed.nodes if n.op == "prefetch"]
    lo = min(n.ann.offset for n in copies)
    hi = max(n.ann.offset + n.ann.size for n in copies)
    assert hi - lo == device_memory(streamed).slots <= 1024 + 16 * 256 * 4
    head = next(n for n in copies if n.operands == ("head",))
    assert head.ann.offset == lo  # it does not fit after the small ones: it starts the ring over
    _check_matches(streamed, og.parse(text), range(3))


def test_spread_keeps_the_first_and_spaces_the_rest() -> None:
    assert spread(8, 0) == frozenset()
    assert spread(8, 2) == {0, 4}
    assert spread(9, 3) == {0, 3, 6}
    assert spread(5, 5) == set(range(5))
    for n in range(1, 30):
        for k in range(n + 1):
            kept = sorted(spread(n, k))
            assert len(kept) == k and all(0 <= i < n for i in kept)
            gaps = [b - a for a, b in itertools.pairwise(kept)]
            assert not gaps or max(gaps) - min(gaps) <= 1


def _chain(layers: int) -> Graph:
    """`layers` matmuls in a chain, each reading its own 64x64 f32 weight (16 KiB)."""
    text = "graph g {\n  input %x : f32[64,64]\n"
    text += "".join(f"  weight %w{i} : f32[64,64]\n" for i in range(layers))
    text += "  %h0 = matmul(%x, %w0) : f32[64,64]\n"
    text += "".join(f"  %h{i} = matmul(%h{i - 1}, %w{i}) : f32[64,64]\n" for i in range(1, layers))
    text += f"  output %h{layers - 1}\n}}\n"
    return run_pipeline(og.parse(text), "analyze-lifetimes,plan-memory")


def _estimated_step(graph: Graph, copy_s: float, matmul_s: float) -> tuple[float, float, float]:
    """(step, copy alone, compute alone) of the list schedule with the given durations."""
    seconds = [
        copy_s if n.op == "prefetch" else matmul_s if n.op == "matmul" else 0.0 for n in graph.nodes
    ]
    end = max(estimate_schedule(graph, "h100", seconds).end)
    copies = sum(s for s, n in zip(seconds, graph.nodes) if n.op == "prefetch")
    return end, copies, sum(s for s, n in zip(seconds, graph.nodes) if n.op == "matmul")


def test_resident_segments_are_spread_so_copies_overlap_compute() -> None:
    """Compute and copying about equal: leading residents left the copy stream idle while they
    computed (the copy stream may run only `depth` segments ahead); spread ones keep it busy."""
    planned = _chain(24)
    budget = device_memory(planned).peak - 16 * 16 * 1024  # 16 of 24 weights must stream
    streamed = run_pipeline(planned, f"plan-prefetch{{budget={budget},segment-bytes=16KiB}}")
    kept = [w.name for w in streamed.weights if w.ann.segment is None]
    assert kept and kept[0] == "w0" and len(kept) < 24
    numbers = sorted(w.ann.segment for w in streamed.weights if w.ann.segment is not None)
    assert numbers[-1] > len(numbers)  # kept segments are spread, not all leading
    # One weight's compute equals its copy's time x (streamed / all weights): balanced overall.
    step, copies, compute = _estimated_step(streamed, 1.0, len(numbers) / 24)
    # The same number kept, leading (the layout plan-prefetch chose before).
    segments = [Segment((f"w{i}",), 16384, 0, 0) for i in range(24)]
    leading = Layout(segments, frozenset(range(24 - len(numbers))), 2 * 16384, 2)
    accesses = weight_accesses(planned)
    old = insert_prefetches(planned, leading, accesses, device_memory(planned).arena, False)
    old_step, old_copies, _ = _estimated_step(old, 1.0, len(numbers) / 24)
    assert old_copies == copies
    # Exactly balanced, filling and draining the pipeline costs about one segment either way.
    assert step <= 1.06 * max(copies, compute) and 1.05 * step < old_step, (step, old_step)
    _check_matches(streamed, strip_prefetch(streamed), range(2))
