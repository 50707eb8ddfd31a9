"""Happens-before, insert-sync and check-races across devices (docs/ir.md, "Devices").

Random graphs over 2-3 devices (`tests/support/device_graphs.py`) scheduled by assign-streams and
synced by insert-sync are race-free by check-races and by an independent ground truth; every wait
removed that the ground truth finds racy is reported (fault injection). The ground truth is this
file's own: reachability over node instances (lane order, record -> wait on each device, a
collective ordering each participant's earlier work before every participant's later work, a
send before its recv), with no vector clocks.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import optgraph as og
from optgraph.analysis.deadlocks import find_deadlocks
from optgraph.analysis.happens_before import GROUP_COLLECTIVES, HappensBefore, instance_reads
from optgraph.analysis.races import find_races
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline
from tests.support.device_graphs import random_device_graphs

SYNC = "assign-streams{{policy={policy},max-streams={streams},min-branch-us=0}},insert-sync"
Instance = tuple[int, int]


def _successors(graph: Graph) -> dict[Instance, set[Instance]]:
    succ: dict[Instance, set[Instance]] = {}
    last_on: dict[tuple[int, int], Instance] = {}
    records: dict[tuple[str, int], Instance] = {}
    sends: dict[str, Instance] = {}
    for i, node in enumerate(graph.nodes):
        mine = [(i, d) for d in node.devices]
        before = [last_on.get((d, node.stream)) for d in node.devices]
        for inst, prev in zip(mine, before):
            succ.setdefault(inst, set())
            if node.op in GROUP_COLLECTIVES:  # earlier work on any participant lane
                for p in before:
                    if p is not None:
                        succ[p].add(inst)
            elif prev is not None:
                succ[prev].add(inst)
            if node.op == "wait" and (node.name, inst[1]) in records:
                succ[records[(node.name, inst[1])]].add(inst)
        for inst in mine:
            last_on[(inst[1], node.stream)] = inst
            if node.op == "record":
                records[(node.name, inst[1])] = inst
        if node.op == "send":
            sends[node.name] = mine[0]
        if node.op == "recv" and node.operands[0] in sends:
            succ[sends[node.operands[0]]].add(mine[0])
    return succ


def _after(graph: Graph) -> dict[Instance, set[Instance]]:
    succ = _successors(graph)
    after: dict[Instance, set[Instance]] = {}
    for inst in sorted(succ, reverse=True):
        reach: set[Instance] = set()
        for nxt in succ[inst]:
            reach |= {nxt} | after.get(nxt, set())
        after[inst] = reach
    return after


def ground_truth_racy(graph: Graph) -> bool:
    """An unordered data edge on some device, a send not before its recv, or a lane whose last
    instance is not before its device's stream 0 end."""
    after = _after(graph)
    producers = graph.producers()
    for i, node in graph.compute_nodes():
        for d in node.devices:
            for _, operand in instance_reads(node, d):
                p = producers.get(operand)
                if p is not None and (i, d) not in after[(p, d)]:
                    return True
    last_on: dict[tuple[int, int], Instance] = {}
    for i, node in enumerate(graph.nodes):
        for d in node.devices:
            last_on[(d, node.stream)] = (i, d)
    for (d, s), inst in last_on.items():
        end = last_on.get((d, 0))
        if s != 0 and (end is None or end not in after[inst]):
            return True
    return False


schedules = st.tuples(st.sampled_from(("chains", "fanout")), st.sampled_from((2, 3)))


@settings(deadline=None)
@given(random_device_graphs(), schedules)
def test_synced_device_graphs_are_race_free(graph: Graph, schedule: tuple[str, int]) -> None:
    policy, streams = schedule
    synced = run_pipeline(graph, SYNC.format(policy=policy, streams=streams))
    og.verify(synced)
    hb = HappensBefore(synced)
    assert hb.unordered_data_edges() == []
    assert hb.joined_at_end()
    assert find_races(synced) == []
    assert find_deadlocks(synced) == []
    assert not ground_truth_racy(synced)
    assert og.parse(og.print_graph(synced)) == synced


@settings(deadline=None)
@given(random_device_graphs(), schedules)
def test_every_racy_wait_removal_is_caught(graph: Graph, schedule: tuple[str, int]) -> None:
    policy, streams = schedule
    synced = run_pipeline(graph, SYNC.format(policy=policy, streams=streams))
    for k, node in enumerate(synced.nodes):
        if node.op != "wait":
            continue
        mutant = synced.with_nodes(synced.nodes[:k] + synced.nodes[k + 1 :])
        assert bool(find_races(mutant)) == ground_truth_racy(mutant), og.print_graph(mutant)
