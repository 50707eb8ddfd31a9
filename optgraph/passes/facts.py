"""Facts a pass may require, provide or invalidate, each checked on the graph itself.

A fact is a predicate over a `Graph` plus the pass that establishes it, so the manager can say
"run assign-streams first" when a pipeline asks for a pass too early, even for a graph loaded from a
dump. Each fact also names the annotations that carry it (`is_marked`: does any node carry them?),
so the manager can refuse a pass that would leave them stale: `assign-streams` on a graph with
arena offsets ("run assign-streams before plan-memory"). Checking marks rather than the fact
itself matters for facts that hold vacuously: every one-stream graph is `synced`, but only a
graph with events has events a pass could break.

Complexity: each check is O(V) (O(V·k) for `synced`, which builds the vector clocks).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from optgraph.analysis.happens_before import HappensBefore
from optgraph.ir.graph import Graph
from optgraph.ir.ops import get_op


@dataclass(frozen=True)
class Fact:
    name: str
    description: str  # what holds, as a message continues "insert-sync needs ..."
    holds: Callable[[Graph], bool]
    established_by: str  # the pass to run first
    annotations: str  # what carries it, as a message continues "cse invalidates ..."
    is_marked: Callable[[Graph], bool]  # whether any node carries those annotations


def _is_buffer(graph: Graph, index: int) -> bool:
    node = graph.nodes[index]
    op = get_op(node.op)
    return not node.is_event and not (op is not None and op.is_view)


def _streams_assigned(graph: Graph) -> bool:
    return all(n.ann.stream is not None for n in graph.nodes)


def _has_streams(graph: Graph) -> bool:
    return any(n.ann.stream is not None for n in graph.nodes)


def _backends_assigned(graph: Graph) -> bool:
    return all(n.ann.backend is not None for n in graph.nodes if not n.is_event)


def _has_backends(graph: Graph) -> bool:
    return any(n.ann.backend is not None for n in graph.nodes if not n.is_event)


def _lifetimes_analyzed(graph: Graph) -> bool:
    return all(
        graph.nodes[i].ann.live is not None
        for i, _ in graph.compute_nodes()
        if _is_buffer(graph, i)
    )


def _has_lifetimes(graph: Graph) -> bool:
    return any(n.ann.live is not None or n.ann.visible is not None for n in graph.nodes)


def _memory_planned(graph: Graph) -> bool:
    return all(
        graph.nodes[i].ann.offset is not None
        for i, _ in graph.compute_nodes()
        if _is_buffer(graph, i)
    )


def _has_offsets(graph: Graph) -> bool:
    return any(n.ann.offset is not None for n in graph.nodes)


def _synced(graph: Graph) -> bool:
    return not HappensBefore(graph).unordered_data_edges()


def _has_events(graph: Graph) -> bool:
    return any(n.is_event for n in graph.nodes)


# In pipeline order: a pass invalidating several facts is told to run before the earliest pass
# that established one of them, which puts it before the others too.
FACTS: dict[str, Fact] = {
    "streams-assigned": Fact(
        "streams-assigned",
        "every node has a stream",
        _streams_assigned,
        "assign-streams",
        "the stream assignment",
        _has_streams,
    ),
    "backends-assigned": Fact(
        "backends-assigned",
        "every node has a backend",
        _backends_assigned,
        "split-backends",
        "the backend placement",
        _has_backends,
    ),
    "synced": Fact(
        "synced",
        "every cross-stream data edge is ordered by events",
        _synced,
        "insert-sync",
        "the record/wait events",
        _has_events,
    ),
    "lifetimes-analyzed": Fact(
        "lifetimes-analyzed",
        "every buffer has a live range",
        _lifetimes_analyzed,
        "analyze-lifetimes",
        "the live ranges",
        _has_lifetimes,
    ),
    "memory-planned": Fact(
        "memory-planned",
        "every buffer has an arena offset",
        _memory_planned,
        "plan-memory",
        "the arena offsets",
        _has_offsets,
    ),
}
