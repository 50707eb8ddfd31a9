"""The planned executor: bit-identical to the reference in random stream interleavings, guard
bytes intact, and planning mistakes (a shortened lifetime, a removed wait) caught."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import optgraph as og
from optgraph.analysis.arena_plan import apply_plan, check_plan, plan
from optgraph.analysis.happens_before import HappensBefore
from optgraph.analysis.lifetimes import compute_lifetimes
from optgraph.codegen.plan.arena_program import Program
from optgraph.codegen.plan.lower_arena import lower
from optgraph.errors import OptGraphError
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from optgraph.runtime.cpu.planned_executor import PlanViolation, execute
from tests.support.property_examples import examples
from tests.support.scheduled_graphs import drop_wait, random_memory_graph, random_streams

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
INTERLEAVINGS = 20
MEMORY = "analyze-lifetimes,plan-memory"  # keeps a test's own streams (the default reassigns them)


def _same(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and np.array_equal(a[k], b[k], equal_nan=True) for k in a
    )


def _data(graph: og.Graph, seed: int = 0) -> tuple[dict, dict, dict]:
    inputs, weights = random_inputs(graph, seed), random_weights(graph, seed)
    return inputs, weights, run_reference(graph, inputs, weights)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.ir")), ids=lambda p: p.stem)
def test_examples_bit_identical_in_every_interleaving(path: Path) -> None:
    graph = og.parse_file(path)
    inputs, weights, expected = _data(graph)
    for streams in (1, 4):
        compiled = og.compile(random_streams(graph, streams, seed=streams), MEMORY)
        for seed in range(INTERLEAVINGS if streams > 1 else 1):
            result = execute(compiled.program, inputs, weights, seed=seed)
            assert _same(result.outputs, expected), (streams, seed)


STREAMED = (
    "verify,dce,cse,fuse,assign-streams{{max-streams={n},policy=chains,min-branch-us=0}},"
    "insert-sync,analyze-lifetimes,plan-memory"
)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.ir")), ids=lambda p: p.stem)
def test_examples_with_the_streams_passes(path: Path) -> None:
    """The real pipeline: fusion, assign-streams (every chain forked), insert-sync."""
    graph = og.parse_file(path)
    inputs, weights, expected = _data(graph)
    for n in (2, 4):
        compiled = og.compile(graph, STREAMED.format(n=n))
        assert check_plan(compiled.graph) == [] and not _races(compiled.graph)
        for seed in range(INTERLEAVINGS):
            assert _same(execute(compiled.program, inputs, weights, seed=seed).outputs, expected)


@settings(max_examples=examples(15))
@given(seed=st.integers(0, 100_000), size=st.integers(2, 16), streams=st.integers(1, 8))
def test_random_graphs_through_the_streams_passes(seed: int, size: int, streams: int) -> None:
    graph = random_memory_graph(seed, size)
    inputs, weights, expected = _data(graph, seed)
    compiled = og.compile(graph, STREAMED.format(n=streams))
    assert check_plan(compiled.graph) == []
    for s in range(INTERLEAVINGS):
        assert _same(execute(compiled.program, inputs, weights, seed=s).outputs, expected), s


@settings(max_examples=examples(25))
@given(seed=st.integers(0, 100_000), size=st.integers(2, 16), streams=st.integers(1, 8))
def test_random_graphs_bit_identical(seed: int, size: int, streams: int) -> None:
    graph = random_memory_graph(seed, size)
    inputs, weights, expected = _data(graph, seed)
    compiled = og.compile(random_streams(graph, streams, seed), MEMORY)
    for s in range(INTERLEAVINGS):
        result = execute(compiled.program, inputs, weights, seed=s)  # strict: guards and reads
        assert _same(result.outputs, expected), s


def test_interleavings_differ_and_respect_events() -> None:
    graph = random_streams(random_memory_graph(7, 16), 4, 7)
    program = og.compile(graph, MEMORY).program
    inputs, weights, _ = _data(graph)
    orders = {
        tuple(s.node for _, s in execute(program, inputs, weights, seed=k).trace) for k in range(10)
    }
    assert len(orders) > 1
    for _, trace in ((0, execute(program, inputs, weights, seed=3).trace),):
        done: set[str] = set()
        for _, step in trace:
            if step.kind == "record":
                done.add(step.name)
            elif step.kind == "wait":
                assert step.name in done


RACE = """
graph race {
  input %x : f32[64]
  %a = exp(%x) : f32[64] !{stream = 1}
  %b = tanh(%a) : f32[64] !{stream = 1}
  record ^e0 !{stream = 1}
  wait ^e0 !{stream = 0}
  %c = neg(%b) : f32[64] !{stream = 0}
  output %c
}
"""


def test_ignoring_events_shows_the_race() -> None:
    graph = og.parse(RACE)
    program = og.compile(graph, MEMORY).program
    inputs, weights, expected = _data(graph)
    outcomes = []
    for seed in range(INTERLEAVINGS):
        run = execute(program, inputs, weights, seed=seed, ignore_events=True, strict=False)
        outcomes.append(_same(run.outputs, expected) and not run.violations)
        assert _same(execute(program, inputs, weights, seed=seed).outputs, expected)
    assert not all(outcomes) and any(outcomes)  # some interleavings read %b before it is written


SLACK = """
graph slack {
  input %x : f32[60]
  %a = softmax(%x) : f32[60]
  %b = exp(%x) : f32[60]
  %c = add(%a, %b) : f32[60]
  output %c
}
"""


def test_guard_bytes_catch_a_write_into_a_live_buffers_slack() -> None:
    graph = og.compile(og.parse(SLACK), MEMORY).graph
    program = lower(graph)
    a, b = program.buffers["a"], program.buffers["b"]
    assert a.size - a.nbytes == 16
    # %b starts in %a's 16 slack bytes: %a's own bytes are untouched, its guard is not.
    moved = dict(program.buffers)
    moved["b"] = replace(b, offset=a.offset + a.nbytes)
    broken = replace(program, buffers=moved, arena_bytes=program.arena_bytes + 256)
    inputs, weights, expected = _data(graph)
    with pytest.raises(PlanViolation, match="guard bytes after '%a'"):
        execute(broken, inputs, weights, seed=None)
    run = execute(broken, inputs, weights, seed=None, strict=False)
    assert run.violations and _same(run.outputs, expected)


def test_buffers_outside_the_arena_are_refused() -> None:
    program = og.compile(og.parse(SLACK), MEMORY).program
    moved = dict(program.buffers)
    moved["b"] = replace(moved["b"], offset=program.arena_bytes - 128)
    inputs, weights, _ = _data(program.graph)
    with pytest.raises(PlanViolation, match="outside the"):
        execute(replace(program, buffers=moved), inputs, weights)


def test_lower_refuses_an_unplanned_or_undersized_graph() -> None:
    graph = og.parse(RACE)
    with pytest.raises(OptGraphError, match="run plan-memory first"):
        lower(graph)
    planned = og.compile(graph, MEMORY).graph
    small = planned.with_nodes(n.with_ann(size=64) if n.name == "a" else n for n in planned.nodes)
    with pytest.raises(OptGraphError, match="needs 256 bytes"):
        lower(small)


def test_program_json_round_trip() -> None:
    compiled = og.compile(random_streams(og.parse_file(EXAMPLES / "llama_decode.ir"), 3, 1), MEMORY)
    text = compiled.program.to_json()
    again = Program.from_json(text)
    assert again == compiled.program
    assert again.to_json() == text
    inputs, weights, expected = _data(compiled.graph)
    assert _same(execute(again, inputs, weights, seed=5).outputs, expected)


def test_compile_api_runs_on_cpu_and_refuses_unknown_targets() -> None:
    graph = og.parse_file(EXAMPLES / "diamond.ir")
    inputs, weights, expected = _data(graph)
    assert _same(og.compile(graph).run(inputs, weights), expected)
    with pytest.raises(OptGraphError, match="unknown target"):
        og.compile(graph, target="tpu")


def test_compile_for_cuda_without_a_gpu_is_a_clear_error() -> None:
    cuda = pytest.importorskip("optgraph.runtime.cuda.runner")
    if cuda.is_available():
        pytest.skip("a GPU is usable here")
    with pytest.raises(OptGraphError, match="target 'cuda'"):
        og.compile(og.parse_file(EXAMPLES / "diamond.ir"), target="cuda")


# -- mutations: planning mistakes must not go unnoticed ---------------------------------------


def _shortened(graph: og.Graph, victim: str) -> og.Graph:
    """The graph planned as if `victim`'s last access did not exist."""
    hb = HappensBefore(graph)
    lifetimes = compute_lifetimes(graph, hb)
    lt = lifetimes[victim]
    accesses = lt.accesses[:-1]
    visible = tuple(hb.first_node_after(accesses, s) for s in range(len(lt.visible)))
    lifetimes[victim] = replace(lt, accesses=accesses, last=accesses[-1], visible=visible)
    memory = plan(graph, "best", 256, True, lifetimes, hb)
    return apply_plan(graph, memory)


def _races(graph: og.Graph) -> bool:
    """check-races' verdict (data edges, the end, overlapping arena bytes) where it exists."""
    try:
        from optgraph.analysis.races import find_races
    except ImportError:
        return False
    return bool(find_races(graph))


def _goes_wrong(graph: og.Graph, inputs: dict, weights: dict, expected: dict) -> bool:
    program = lower(graph)
    for seed in [None, *range(INTERLEAVINGS)]:
        try:
            run = execute(program, inputs, weights, seed=seed)
        except PlanViolation:
            return True
        if not _same(run.outputs, expected):
            return True
    return False


def test_shortening_a_lifetime_is_caught() -> None:
    statically, dynamically = 0, 0
    for seed in range(30):
        graph = random_streams(random_memory_graph(seed, 12), 1 + seed % 4, seed)
        inputs, weights, expected = _data(graph, seed)
        lifetimes = compute_lifetimes(graph)
        for name, lt in lifetimes.items():
            if lt.is_output or len(lt.accesses) < 2:
                continue
            mutated = _shortened(graph, name)
            problems = bool(check_plan(mutated))
            assert problems or not _races(mutated), (seed, name)  # no false alarm either way
            wrong = _goes_wrong(mutated, inputs, weights, expected)
            assert problems or not wrong, (seed, name)  # never silently wrong
            statically += problems
            dynamically += wrong
    # Measured: 52 of 163 plans overlap a still-live buffer; the executor catches all 52.
    assert statically > 20 and dynamically == statically, (statically, dynamically)


def test_removing_a_wait_is_caught() -> None:
    caught, wrong_runs, tried = 0, 0, 0
    for seed in range(30):
        graph = random_streams(random_memory_graph(seed, 12), 2 + seed % 3, seed)
        planned = run_pipeline(graph, MEMORY)
        assert not _races(planned)
        inputs, weights, expected = _data(graph, seed)
        waits = sum(1 for n in planned.nodes if n.op == "wait")
        for k in range(waits):
            mutated = drop_wait(planned, k)
            unordered = HappensBefore(mutated).unordered_data_edges()
            static = bool(unordered or check_plan(mutated) or _races(mutated))
            wrong = _goes_wrong(mutated, inputs, weights, expected)
            assert static or not wrong, (seed, k)  # a wait whose loss goes unreported is redundant
            tried += 1
            caught += static
            wrong_runs += wrong
    # Measured: 273 waits, 218 reported by check-races (the rest are redundant in these naive
    # schedules), 135 of them also give a wrong result or a read-check failure in 21 runs.
    assert tried > 100 and caught > tried // 2 and wrong_runs > caught // 2, (tried, caught)
