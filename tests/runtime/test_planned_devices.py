"""The planned executor over several emulated devices: one arena per device at the planned offsets,
lanes (device, stream) in seeded random interleavings, collectives computed in NumPy at a
rendezvous. Random graphs over 2-3 devices equal the reference interpreter bit for bit in every
interleaving; a removed collective wait, a buffer moved onto a live one and a send/recv ordered
against a collective (a deadlock) are caught; a compiled placed graph runs on emulated devices."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import optgraph as og
from optgraph.analysis.deadlocks import find_deadlocks
from optgraph.codegen.plan.arena_program import Program
from optgraph.codegen.plan.lower_arena import lower
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from optgraph.runtime.cpu.planned_executor import PlanViolation, execute
from tests.support.device_graphs import random_device_graphs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
PLAN = (
    "assign-streams{{policy={policy},max-streams=3,min-branch-us=0}},insert-sync,"
    "analyze-lifetimes,plan-memory"
)


def fixture_source(path: Path) -> str:
    return path.read_text().split("# EXPECT")[0]


def assert_matches_reference(graph: Graph, planned: Graph, seeds: range) -> None:
    inputs, weights = random_inputs(graph, 1), random_weights(graph, 1)
    want = run_reference(graph, inputs, weights)
    program = lower(planned)
    for seed in seeds:
        got = execute(program, inputs, weights, seed=seed).outputs
        for name in graph.output_names():
            np.testing.assert_array_equal(got[name], want[name], err_msg=f"{name}, seed {seed}")


@settings(deadline=None)
@given(random_device_graphs(), st.sampled_from(("chains", "fanout")))
def test_device_graphs_equal_the_reference_in_every_interleaving(graph: Graph, policy: str) -> None:
    planned = run_pipeline(graph, PLAN.format(policy=policy))
    assert_matches_reference(graph, planned, range(3))


@settings(deadline=None, max_examples=20)
@given(random_device_graphs())
def test_default_pipeline_on_device_graphs(graph: Graph) -> None:
    program = og.compile(graph, "default", target="cpu")
    inputs, weights = random_inputs(graph, 2), random_weights(graph, 2)
    want = run_reference(graph, inputs, weights)
    got = program.run(inputs, weights, seed=5)
    for name in graph.output_names():
        np.testing.assert_array_equal(got[name], want[name])


def test_program_json_round_trip_keeps_devices() -> None:
    graph = og.parse(fixture_source(FIXTURES / "insert-sync" / "devices_collective_side_stream.ir"))
    program = lower(run_pipeline(graph, "insert-sync,analyze-lifetimes,plan-memory"))
    assert program.device_arena_bytes == (2048, 3072)
    assert program.buffers["s"].devices == (0, 1)
    assert {(s.device, s.name) for s in program.streams[1] if s.kind == "launch"} == {
        (0, "s"),
        (1, "s"),
        (1, "z"),
    }
    assert Program.from_json(program.to_json()) == program


def test_single_device_program_json_has_no_device_fields() -> None:
    graph = og.parse("graph g {\n  input %x : f32[4]\n  %y = neg(%x) : f32[4]\n  output %y\n}\n")
    text = lower(run_pipeline(graph, "analyze-lifetimes,plan-memory")).to_json()
    assert "device" not in text


def test_a_removed_collective_wait_gives_a_wrong_result_in_some_interleaving() -> None:
    path = FIXTURES / "insert-sync" / "devices_collective_side_stream.ir"
    graph = og.parse(fixture_source(path))
    planned = run_pipeline(graph, "insert-sync,analyze-lifetimes,plan-memory")
    assert_matches_reference(graph, planned, range(20))
    # The wait of the all_reduce's instance on device 1 for %a.d1 (device 1, stream 0) removed:
    racy = planned.with_nodes(
        n for n in planned.nodes if not (n.op == "wait" and n.devices == (1,) and n.stream == 1)
    )
    assert len(racy.nodes) == len(planned.nodes) - 1
    inputs, weights = random_inputs(graph, 1), random_weights(graph, 1)
    want = run_reference(graph, inputs, weights)
    program = lower(racy)
    wrong = 0
    for seed in range(20):
        run = execute(program, inputs, weights, seed=seed, strict=False)
        wrong += run.violations != [] or any(
            not np.array_equal(run.outputs[n], want[n]) for n in graph.output_names()
        )
    assert wrong > 0  # the all_reduce on device 1 can read %a.d1 before it is written


def test_a_buffer_moved_onto_a_live_one_of_its_device_is_caught() -> None:
    path = FIXTURES / "plan-memory" / "devices_send_recv_arenas.ir"
    planned = run_pipeline(og.parse(fixture_source(path)), "analyze-lifetimes,plan-memory")
    # %y (device 1) onto %r, which it reads: a result written over an operand, not in place.
    moved = planned.with_nodes(n.with_ann(offset=0) if n.name == "y" else n for n in planned.nodes)
    inputs, weights = random_inputs(planned, 0), random_weights(planned, 0)
    with pytest.raises(PlanViolation, match="'%y' is written over its operand '%r'"):
        execute(lower(moved), inputs, weights)
    # The same offset in the other device's arena is no conflict.
    assert_matches_reference(planned, planned, range(3))


DEADLOCK = """graph g {
  input %x : f32[4] !{device = [0, 1]}
  %t = send(%x) {to = 1} : f32[4] !{device = 0}
  %s = all_reduce(%x, %x) {group = [0, 1]} : f32[4] !{device = [0, 1]}
  %r = recv(%t) {from = 0} : f32[4] !{device = 1}
  output %s, %r
}
"""


def test_a_send_behind_a_collective_on_the_receiver_deadlocks_by_name() -> None:
    graph = og.parse(DEADLOCK)
    og.verify(graph)
    program = lower(run_pipeline(graph, "analyze-lifetimes,plan-memory"))
    inputs = random_inputs(graph, 0)
    assert find_deadlocks(graph) != []  # check-races finds it without running
    with pytest.raises(PlanViolation) as info:
        execute(program, inputs, {}, seed=0)
    assert str(info.value) == (
        "deadlock: send '%t' on device 0 waits for device 1 (its stream 0 is at '%s'); "
        "all_reduce '%s' on device 1 waits for device 0 (its stream 0 is at '%t')"
    )


def test_compiled_placed_graph_runs_on_emulated_devices() -> None:
    """`og.compile(placed, target="cpu")` runs on the emulated devices (what `optgraph run --device
    cpu --devices N --check` does with a placed graph), bit-identical to the reference."""
    graph = og.parse(fixture_source(FIXTURES / "verify" / "devices_all_reduce.ir"))
    program = og.compile(graph, "default", target="cpu")
    assert program.program.device_arena_bytes != ()
    inputs, weights = random_inputs(graph, 4), random_weights(graph, 4)
    want = run_reference(graph, inputs, weights)
    for seed in (None, 0, 1, 2):
        np.testing.assert_array_equal(program.run(inputs, weights, seed=seed)["y"], want["y"])
