"""The calling thread's schedule of a split program (codegen/plan/cpu_node_schedule.py): every step
kept once (events aside), every happens-before edge of the plan across the host/device
boundary kept (the host waits for a part that contains the GPU side, or the part containing the
GPU side is launched after the host side), on the MoE step, a split llama and random split
graphs; and the CUDA runtime on the fake CuPy runs the pieces in the plan's order in every
`cpu_nodes` way."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

import optgraph as og
from benchmarks.harness.moe_decode import MoeSizes, generate_moe_decode
from benchmarks.harness.split_plan import SPLIT
from optgraph.analysis.host_syncs import host_device_waits, min_host_device_syncs
from optgraph.codegen.cuda_source import CodegenError
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.codegen.lowering_options import CPU_NODE_MODES, LoweringOptions
from optgraph.codegen.plan.cpu_node_schedule import (
    GpuPart,
    HostPart,
    HostWait,
    Piece,
    boundary_syncs,
    calling_thread_schedule,
    cpu_segments,
    host_streams,
    host_waits,
)
from optgraph.codegen.plan.steps import CudaPlan, EventStep, HostStep, KernelStep
from optgraph.ir.graph import Graph
from optgraph.ir.layout import VIEW_OPS
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights
from tests.support.fake_cupy import fake_cupy
from tests.support.offload_models import llama
from tests.support.random_graphs import random_dag_graphs

SIZES = MoeSizes(
    layers=3, hidden=32, heads=4, kv_heads=2, experts=6, expert_ffn=16, shared_ffn=24, vocab=64,
    cache_len=8,
)  # fmt: skip
PLAN = "insert-sync,analyze-lifetimes,plan-memory"


def _moe() -> tuple[Graph, Graph]:
    source = og.parse(generate_moe_decode(SIZES))
    return source, run_pipeline(source, SPLIT)


def _happens_before(plan: CudaPlan) -> list[dict[int, int]]:
    """Each step's vector clock (stream -> tick) under the plan's streams and events."""
    clocks: dict[int, dict[int, int]] = {}
    events: dict[str, dict[int, int]] = {}
    out = []
    for step in plan.steps:
        s = getattr(step, "stream", 0)
        clock = clocks.setdefault(s, {})
        if isinstance(step, EventStep) and step.kind == "wait":
            for k, v in events.get(step.event, {}).items():
                clock[k] = max(clock.get(k, 0), v)
        clock[s] = clock.get(s, 0) + 1
        if isinstance(step, EventStep) and step.kind == "record":
            events[step.event] = dict(clock)
        out.append(dict(clock))
    return out


def _nodes_of(plan: CudaPlan, part: GpuPart) -> set[str]:
    """The nodes a part's steps compute (a merged launch: each of its members)."""
    names: set[str] = set()
    for i in part.steps:
        step = plan.steps[i]
        names |= set(step.members) if isinstance(step, KernelStep) else {getattr(step, "node", "")}
    return names


def check_schedule(plan: CudaPlan, pieces: list[Piece]) -> None:
    """Every non-event step once; every cross-boundary happens-before edge kept."""
    steps = plan.steps
    host = host_streams(steps)
    part_of: dict[int, int] = {}
    launched_at: dict[int, int] = {}
    host_at: dict[int, int] = {}
    waits: list[tuple[int, int]] = []  # (position, part)
    for pos, piece in enumerate(pieces):
        if isinstance(piece, GpuPart):
            launched_at[len(launched_at)] = pos
            for i in piece.steps:
                assert i not in part_of
                part_of[i] = len(launched_at) - 1
        elif isinstance(piece, HostPart):
            host_at[piece.step] = pos
        else:
            assert piece.part < len(launched_at), "a wait for a part not launched yet"
            waits.append((pos, piece.part))
    for i, step in enumerate(steps):
        if isinstance(step, HostStep):
            assert i in host_at
        elif not isinstance(step, EventStep):
            assert i in part_of and getattr(step, "stream", 0) not in host
    clocks = _happens_before(plan)
    stream = [getattr(s, "stream", 0) for s in steps]
    for c in range(len(steps)):
        for p in range(c):
            if clocks[c].get(stream[p], 0) < clocks[p][stream[p]]:
                continue  # p does not happen before c
            if p in part_of and c in host_at:  # the host waits for p's part before c
                assert any(pos < host_at[c] and k >= part_of[p] for pos, k in waits), (p, c)
            elif p in host_at and c in part_of:  # c's part is launched after p ran
                assert host_at[p] < launched_at[part_of[c]], (p, c)
            elif p in host_at and c in host_at:
                assert host_at[p] < host_at[c]
            elif p in part_of and c in part_of:
                assert part_of[p] <= part_of[c]


def test_the_moe_step_waits_once_per_boundary() -> None:
    _, split = _moe()
    plan = lower_cuda(split)
    pieces = calling_thread_schedule(plan.steps)
    check_schedule(plan, pieces)
    kinds = [type(p).__name__ for p in pieces]
    # Per layer: the GPU up to the router's ids and their copy; the shared expert, launched
    # before the host waits for the first part (it runs while the CPU computes the routed
    # experts); the six CPU nodes.
    layer = ["GpuPart", "GpuPart", "HostWait", *["HostPart"] * 6]
    assert kinds == layer * SIZES.layers + ["GpuPart"]
    assert host_waits(pieces) == SIZES.layers
    waits = [p.part for p in pieces if isinstance(p, HostWait)]
    assert waits == [2 * k for k in range(SIZES.layers)]
    shared = [p for p in pieces if isinstance(p, GpuPart)][1]
    assert _nodes_of(plan, shared) >= {"l0.s_up", "l0.s_act"}
    # The host waits for the router's ids; the GPU parts after the experts wait for the host.
    after = [p.after_host for p in pieces if isinstance(p, GpuPart)]
    assert after == [False, False] + [True, False] * (SIZES.layers - 1) + [True]
    assert boundary_syncs(pieces) == min_host_device_syncs(split) == 2 * SIZES.layers
    # The graph way: one host function per layer (its six CPU nodes in a row).
    assert [len(run) for run in cpu_segments(plan.steps)] == [6] * SIZES.layers


@pytest.mark.parametrize("batch", [1, 4])
def test_a_split_llama_keeps_every_edge(batch: int) -> None:
    g = llama(layers=2, batch=batch, dtype="f32", host_weights=("embed", "lm_head"))
    split = run_pipeline(g, "assign-streams{max-streams=2},split-backends," + PLAN)
    plan = lower_cuda(split)
    assert any(isinstance(s, HostStep) for s in plan.steps)
    check_schedule(plan, calling_thread_schedule(plan.steps))


@settings(max_examples=40, deadline=None)
@given(graph=random_dag_graphs(max_nodes=14), data=st.data())
def test_random_split_graphs_keep_every_edge(graph: Graph, data: Any) -> None:
    ops = sorted({n.op for n in graph.nodes if n.op not in VIEW_OPS})  # views: no step
    assume(ops)
    cpu = data.draw(st.lists(st.sampled_from(ops), min_size=1, max_size=3, unique=True))
    streams = data.draw(st.sampled_from(["", "assign-streams{max-streams=3},"]))
    split = run_pipeline(graph, f"{streams}split-backends{{cpu-ops={'+'.join(cpu)}}},{PLAN}")
    try:
        plan = lower_cuda(split)
    except CodegenError:
        assume(False)  # nothing planned (only views): lowering refuses CPU nodes unplanned
    pieces = calling_thread_schedule(plan.steps)
    check_schedule(plan, pieces)
    # At least the placement's minimum, at most the IR's own cross-boundary waits.
    assert min_host_device_syncs(split) <= boundary_syncs(pieces) <= host_device_waits(split)


def _trace(mode: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], list[str], Any]:
    """(what one replayed run executed, in order: kernels and CPU nodes; the plan's order of
    the same; the runtime counters)."""
    from optgraph.runtime.cuda.offload import HostFunction

    with fake_cupy(monkeypatch) as fake:
        from optgraph.api.programs import cuda_program

        original = HostFunction._call

        def traced(fn: HostFunction, arg: int | None) -> None:
            fake.launches.append(f"host {fn.node.name}")
            original(fn, arg)

        monkeypatch.setattr(HostFunction, "_call", traced)
        source, split = _moe()
        inputs = random_inputs(source, seed=1)
        inputs["pos"][:] = 3
        inputs["kv_len"][:] = 4
        options = LoweringOptions(cpu_nodes=mode)
        program = cuda_program(split, weights=random_weights(source, seed=2), options=options)
        program.run(inputs)
        program.run(inputs)  # captured now
        fake.launches.clear()
        program.run(inputs)  # replayed
        plan = program.plan()
        expected = [
            f"host {s.node}" if isinstance(s, HostStep) else s.kernel
            for s in plan.steps
            if isinstance(s, HostStep | KernelStep)
        ]
        assert program.debug_dot_str().count("digraph") == program.counters.captures
        return list(fake.launches), expected, program.counters


@pytest.mark.parametrize("mode", CPU_NODE_MODES)
def test_the_runtime_runs_kernels_and_cpu_nodes_in_plan_order(
    mode: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace, expected, counters = _trace(mode, monkeypatch)
    assert trace == expected
    parts = 2 * SIZES.layers + 1 if mode == "calling-thread" else 1
    assert counters.captures == parts  # every part captured once, on the second run
    assert counters.replays == 2 * parts


def test_a_replayed_run_launches_each_part_without_deciding_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Calling-thread runs: once every part's graph is captured and replayed, a part is one
    graph launch (`bound.PartLauncher`); a change of the graph cache (another part
    captured) sends the parts back through the full path once."""
    with fake_cupy(monkeypatch):
        from optgraph.api.programs import cuda_program

        source, split = _moe()
        inputs = random_inputs(source, seed=1)
        inputs["pos"][:] = 3
        inputs["kv_len"][:] = 4
        options = LoweringOptions(cpu_nodes="calling-thread")
        program = cuda_program(split, weights=random_weights(source, seed=2), options=options)
        parts = 2 * SIZES.layers + 1  # GPU parts around each layer's CPU experts
        decided: list[object] = []
        decide = program._cache.decide
        monkeypatch.setattr(program._cache, "decide", lambda *a: decided.append(a[0]) or decide(*a))
        program.run(inputs)  # every part captured (each capture changes the cache)
        program.run(inputs)  # parts go the full path once more, then are current
        assert program.counters.captures == parts and parts < len(decided) < 2 * parts
        decisions, replays = len(decided), program.counters.replays
        program.run(inputs)  # no decision: one launch a part
        assert len(decided) == decisions and program.counters.replays == replays + parts
        program._cache.generation += 1  # as another key's capture would
        program.run(inputs)
        assert len(decided) == decisions + parts
        assert program.counters.replays == replays + 2 * parts
