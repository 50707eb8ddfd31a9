"""Property tests of assign-streams + insert-sync + check-races on random DAGs.

For every policy and 1..8 streams (and for `chains`, the plain threshold and the fork cost model
with several wait costs): the result verifies, every data edge is ordered by happens-before,
every stream joins stream 0 before the end, check-races finds nothing, every emitted wait is
necessary (dropping it makes check-races report a race) and, for `chains` and `single`, the waits
never exceed Nimble's count (|reduced edges| - |matching|, end included). A cost-model schedule
on one stream keeps the given order. After the memory planner, the arena plan of such schedules
has no race either.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from optgraph.analysis.happens_before import HappensBefore
from optgraph.analysis.races import find_races
from optgraph.ir.graph import Graph
from optgraph.ir.verify import verify
from optgraph.passes.assign_streams import AssignStreamsPass, nimble_syncs
from optgraph.passes.insert_sync import InsertSyncPass
from optgraph.passes.manager import run_pipeline
from tests.support.property_examples import examples
from tests.support.random_graphs import random_dag_graphs

POLICIES = ("chains", "fanout", "single")


def _without(graph: Graph, index: int) -> Graph:
    return graph.with_nodes(n for i, n in enumerate(graph.nodes) if i != index)


def _check(
    graph: Graph, policy: str, streams: int, min_branch_us: float, **options: float | bool
) -> None:
    assigned = AssignStreamsPass(streams, policy, min_branch_us, **options).run(graph)  # type: ignore[arg-type]
    verify(assigned)
    assert sorted(n.name for n in assigned.nodes) == sorted(
        n.name for n in graph.nodes if not n.is_event
    )
    used = {n.stream for n in assigned.nodes}
    assert used <= set(range(streams)) and (not used or 0 in used)
    synced = InsertSyncPass().run(assigned)
    verify(synced)
    hb = HappensBefore(synced)
    assert hb.unordered_data_edges() == []
    assert hb.joined_at_end()
    assert find_races(synced) == []
    waits = [i for i, n in enumerate(synced.nodes) if n.op == "wait"]
    for i in waits:
        assert find_races(_without(synced, i)), f"wait ^{synced.nodes[i].name} is not needed"
    assert len(waits) <= nimble_syncs(graph), (len(waits), nimble_syncs(graph))
    if policy == "single":
        assert waits == [] and used <= {0}


@settings(max_examples=examples(120))
@given(
    graph=random_dag_graphs(max_nodes=24, max_outputs=4, events=False),
    policy=st.sampled_from(POLICIES),
    streams=st.integers(1, 8),
    min_branch_us=st.sampled_from([0.0, 5.0]),
)
def test_random_schedules_are_race_free_and_minimal(
    graph: Graph, policy: str, streams: int, min_branch_us: float
) -> None:
    _check(graph, policy, streams, min_branch_us)


@settings(max_examples=examples(80))
@given(
    graph=random_dag_graphs(max_nodes=24, max_outputs=4, events=False),
    streams=st.integers(1, 8),
    wait_us=st.sampled_from([-1.0, 0.0, 1.0]),
    merged=st.booleans(),
)
def test_cost_model_schedules_are_race_free_and_minimal(
    graph: Graph, streams: int, wait_us: float, merged: bool
) -> None:
    _check(graph, "chains", streams, -1.0, wait_us=wait_us, merged_launches=merged)
    assigned = AssignStreamsPass(streams, wait_us=wait_us, merged_launches=merged).run(graph)
    if {n.stream for n in assigned.nodes} == {0}:
        assert [n.name for n in assigned.nodes] == [n.name for n in graph.nodes]


@settings(max_examples=examples(30))
@given(graph=random_dag_graphs(max_nodes=16, events=True), streams=st.integers(2, 4))
def test_graphs_with_old_events_are_rescheduled(graph: Graph, streams: int) -> None:
    _check(graph, "chains", streams, 0.0)


@settings(max_examples=examples(40))
@given(
    graph=random_dag_graphs(max_nodes=20, max_outputs=3),
    policy=st.sampled_from(("chains", "fanout")),
    streams=st.integers(2, 6),
)
def test_memory_plans_of_scheduled_graphs_are_race_free(
    graph: Graph, policy: str, streams: int
) -> None:
    pipeline = (
        f"assign-streams{{max-streams={streams},policy={policy},min-branch-us=0}},"
        "insert-sync,analyze-lifetimes,plan-memory"
    )
    planned = run_pipeline(graph, pipeline)
    assert find_races(planned) == []
