"""Lifetimes and arena plans over several devices: one arena per device, one offset per buffer valid
in each arena it lives in, bytes shared only by buffers that happens-before orders on that device.

The ground truth is the reachability of `test_devices_sync` (no vector clocks): two buffers whose
bytes overlap on a device must have every access of one (on that device) reach the other's write.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import optgraph as og
from optgraph.analysis.arena_packing import LaneArrays, StackedPermanents, is_permanent
from optgraph.analysis.arena_plan import build_slots, check_plan, plan
from optgraph.analysis.happens_before import HappensBefore, instance_reads
from optgraph.analysis.lifetimes import compute_lifetimes, stream_ids
from optgraph.analysis.memory_bounds import device_arena_bytes, device_weight_bytes
from optgraph.analysis.races import find_races
from optgraph.cli.report import compute_report
from optgraph.ir.graph import Graph
from optgraph.ir.layout import alias_roots
from optgraph.ir.ops import get_op
from optgraph.passes.manager import run_pipeline
from tests.passes.test_devices_sync import _after
from tests.support.device_graphs import random_device_graphs

PLAN = (
    "assign-streams{{policy={policy},max-streams=3,min-branch-us=0}},insert-sync,"
    "analyze-lifetimes,plan-memory{{inplace={inplace}}}"
)


def _accesses(graph: Graph) -> dict[tuple[str, int], list[int]]:
    """(root buffer, device) -> node indices of the instances touching it on that device."""
    roots = alias_roots(graph)
    out: dict[tuple[str, int], list[int]] = {}
    for i, node in graph.compute_nodes():
        for d in node.devices:
            if node.name not in roots:
                out.setdefault((node.name, d), []).append(i)
            elif node.op == "send":
                out.setdefault((roots[node.name][0], d), []).append(i)
            for _, operand in instance_reads(node, d):
                out.setdefault((roots.get(operand, (operand, 0))[0], d), []).append(i)
    return out


def overlapping_unordered(graph: Graph) -> list[tuple[str, str, int]]:
    """Pairs of buffers sharing bytes on a device without one entirely before the other."""
    after = _after(graph)
    accesses = _accesses(graph)
    outputs = set(graph.output_names())
    producers = graph.producers()
    buffers = [
        (n.name, d, n.ann.offset, n.ann.offset + n.ann.size)
        for n in graph.nodes
        if n.ann.offset is not None and n.ann.size
        for d in n.devices
    ]
    bad = []
    for a, d, lo, hi in buffers:
        for b, e, lo2, hi2 in buffers:
            if d != e or a >= b or hi <= lo2 or hi2 <= lo:
                continue
            first, second = sorted((a, b), key=lambda v: producers[v])
            write = (producers[second], d)
            unordered = [x for x in accesses[(first, d)] if write not in after[(x, d)]]
            if first in outputs or (unordered and not _in_place(graph, first, second, unordered)):
                bad.append((first, second, d))
    return bad


def _in_place(graph: Graph, first: str, second: str, unordered: list[int]) -> bool:
    """`second` overwrites `first` element for element, and is its only unordered access."""
    producers = graph.producers()
    roots = alias_roots(graph)
    node, other = graph.nodes[producers[second]], graph.nodes[producers[first]]
    op = get_op(node.op)
    elementwise = op is not None and op.category == "elementwise"
    return (
        elementwise
        and set(unordered) == {producers[second]}
        and node.type is not None
        and other.type is not None
        and node.type.nbytes == other.type.nbytes
        and any(roots.get(o, (o, 0)) == (first, 0) for o in node.operands)
        and node.ann.offset == other.ann.offset
    )


plans = st.tuples(st.sampled_from(("chains", "fanout")), st.sampled_from(("true", "false")))


@settings(deadline=None)
@given(random_device_graphs(), plans)
def test_device_plans_share_bytes_only_when_ordered(graph: Graph, how: tuple[str, str]) -> None:
    policy, inplace = how
    planned = run_pipeline(graph, PLAN.format(policy=policy, inplace=inplace))
    og.verify(planned)
    assert check_plan(planned) == []
    assert find_races(planned) == []
    assert overlapping_unordered(planned) == []
    assert og.parse(og.print_graph(planned)) == planned
    arenas = device_arena_bytes(planned)
    assert arenas is not None and len(arenas) == planned.device_count()
    for node in planned.nodes:
        if node.ann.offset is not None:
            for d in node.devices:  # one offset, inside each of its devices' arenas
                assert node.ann.offset + (node.ann.size or 0) <= arenas[d]


def test_each_device_has_its_own_arena() -> None:
    """Two pipeline stages: each device's arena holds only its stage's buffers."""
    text = """graph pp {
  input %x : f32[64,64]
  %a = exp(%x) : f32[64,64]
  %b = exp(%a) : f32[64,64]
  %t = send(%b) {to = 1} : f32[64,64]
  %r = recv(%t) {from = 0} : f32[64,64] !{device = 1}
  %c = exp(%r) : f32[64,64] !{device = 1}
  %d = exp(%c) : f32[64,64] !{device = 1}
  %y = exp(%d) : f32[64,64] !{device = 1}
  output %y
}
"""
    planned = run_pipeline(og.parse(text), "analyze-lifetimes,plan-memory{inplace=false}")
    memory = plan(planned, inplace=False)
    # device 0: %a and %b live together; device 1: %r/%d share bytes, %c, then %y over %c...
    assert memory.device_arena_bytes == {0: 2 * 16384, 1: 2 * 16384}
    assert device_arena_bytes(planned) == (2 * 16384, 2 * 16384)
    report = compute_report(planned)
    assert report.devices == 2
    assert report.arena_bytes_per_device == (32768, 32768)
    assert report.weight_bytes_per_device == (0, 0)
    assert report.peak_device_bytes == 32768 + 16384  # device 0: its arena and the input
    assert ("devices", "2") in report.rows()


def test_weight_bytes_per_device_count_replicas() -> None:
    graph = og.parse(
        "graph g {\n  input %x : f32[4] !{device = [0, 1]}\n"
        "  weight %w : f32[4] !{device = [0, 1]}\n  weight %v : f32[8] !{device = 1}\n"
        "  %y = add(%x, %w) : f32[4] !{device = [0, 1]}\n  output %y\n}\n"
    )
    assert device_weight_bytes(graph) == (16, 48)
    assert compute_report(graph).devices == 2
    assert (
        compute_report(og.parse("graph g {\n  input %x : f32[4]\n  output %x\n}\n")).rows()[-1][0]
        == "compile time (s)"
    )


@settings(deadline=None)
@given(random_device_graphs())
def test_check_plan_catches_buffers_moved_onto_each_other(graph: Graph) -> None:
    """Every buffer moved to offset 0: check_plan reports exactly when the ground truth does."""
    planned = run_pipeline(graph, PLAN.format(policy="fanout", inplace="true"))
    mutant = planned.with_nodes(
        n.with_ann(offset=0) if n.ann.offset is not None else n for n in planned.nodes
    )
    assert bool(check_plan(mutant)) == bool(overlapping_unordered(mutant))


@settings(deadline=None)
@given(random_device_graphs())
def test_stacked_floors_and_permanence_as_arrays(graph: Graph) -> None:
    """The array forms plan-memory uses (`LaneArrays.permanent`, `StackedPermanents.floors`)
    equal the per-slot definitions (`is_permanent`, `StackedPermanents.floor`) on every device's
    stack and lane."""
    scheduled = run_pipeline(graph, PLAN.format(policy="fanout", inplace="true"))
    hb = HappensBefore(scheduled)
    slots, _ = build_slots(scheduled, compute_lifetimes(scheduled, hb), 256, hb, True)
    if not slots:
        return
    arrays = LaneArrays.of(slots)
    kept = arrays.permanent()
    assert kept == [is_permanent(s) for s in slots]
    stacked = StackedPermanents(slots, [i for i, k in enumerate(kept) if k])
    assert stacked.floors(slots, arrays) == [stacked.floor(s) for s in slots]


@settings(deadline=None)
@given(random_device_graphs(), st.sampled_from(("chains", "fanout")))
def test_visible_per_lane_equals_a_brute_force(graph: Graph, policy: str) -> None:
    """visible[d·S + s]: the first compute node on lane (d, s) that every access of the buffer
    on device d happens-before, by pairwise queries; -1 where none or off the buffer's devices."""
    synced = run_pipeline(graph, PLAN.format(policy=policy, inplace="true"))
    hb = HappensBefore(synced)
    streams = len(stream_ids(synced))
    for lt in compute_lifetimes(synced, hb).values():
        assert len(lt.visible) == streams * synced.device_count()
        for d in range(synced.device_count()):
            on_d = [x for x in lt.accesses if hb.device_of[x] == d]
            for s in range(streams):
                want = -1
                if d in lt.devices and not lt.is_output:
                    lane = [
                        x for x in range(len(hb.node_of)) if hb.lane_col[x] == hb.column.get((d, s))
                    ]
                    lane = [x for x in lane if not synced.nodes[hb.node_of[x]].is_event]
                    want = next(
                        (
                            hb.node_of[y]
                            for y in lane
                            if all(hb.ordered_instances(x, y) for x in on_d)
                        ),
                        -1,
                    )
                assert lt.visible[d * streams + s] == want, (lt.name, d, s)
