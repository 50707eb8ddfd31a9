"""Facts a pass may require or provide, each checked on the graph itself.

A fact is a predicate over a `Graph` plus the pass that establishes it, so the manager can say
"run assign-streams first" when a pipeline asks for a pass too early, even for a graph loaded from a
dump. Complexity: each check is O(V) (O(V + E) for the happens-before based ones).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from optgraph.ir.graph import Graph
from optgraph.ir.ops import get_op


@dataclass(frozen=True)
class Fact:
    name: str
    description: str
    holds: Callable[[Graph], bool]
    established_by: str


def _is_buffer(graph: Graph, index: int) -> bool:
    node = graph.nodes[index]
    op = get_op(node.op)
    return not node.is_event and not (op is not None and op.is_view)


def _streams_assigned(graph: Graph) -> bool:
    return all(n.ann.stream is not None for n in graph.nodes)


def _backends_assigned(graph: Graph) -> bool:
    return all(n.ann.backend is not None for n in graph.nodes if not n.is_event)


def _lifetimes_analyzed(graph: Graph) -> bool:
    return all(
        graph.nodes[i].ann.live is not None
        for i, _ in graph.compute_nodes()
        if _is_buffer(graph, i)
    )


def _memory_planned(graph: Graph) -> bool:
    return all(
        graph.nodes[i].ann.offset is not None
        for i, _ in graph.compute_nodes()
        if _is_buffer(graph, i)
    )


def _synced(graph: Graph) -> bool:
    # Imported here: happens-before depends on the IR only, facts are loaded by every pass.
    from optgraph.analysis.happens_before import HappensBefore

    hb = HappensBefore(graph)
    return not hb.unordered_data_edges()


FACTS: dict[str, Fact] = {
    "backends-assigned": Fact(
        "backends-assigned", "every node has a backend", _backends_assigned, "split-backends"
    ),
    "lifetimes-analyzed": Fact(
        "lifetimes-analyzed",
        "every buffer has a live range",
        _lifetimes_analyzed,
        "analyze-lifetimes",
    ),
    "memory-planned": Fact(
        "memory-planned", "every buffer has an arena offset", _memory_planned, "plan-memory"
    ),
    "streams-assigned": Fact(
        "streams-assigned", "every node has a stream", _streams_assigned, "assign-streams"
    ),
    "synced": Fact(
        "synced", "every cross-stream data edge is ordered by events", _synced, "insert-sync"
    ),
}
