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
from operator import attrgetter

from optgraph.analysis.happens_before import happens_before
from optgraph.ir.graph import ANNOTATION_KEYS, EVENT_OPS, Annotations, Graph
from optgraph.ir.layout import alias_roots


@dataclass(frozen=True)
class Fact:
    name: str
    description: str  # what holds, as a message continues "insert-sync needs ..."
    holds: Callable[[Graph], bool]
    established_by: str  # the pass to run first
    annotations: str  # what carries it, as a message continues "cse invalidates ..."
    is_marked: Callable[[Graph], bool]  # whether any node carries those annotations


# The annotation keys the nodes of a graph carry, "no:" + key for those some node lacks
# (events counted apart, as "event:" + ...), and "events" where it has events: one walk per
# graph object, kept in its instance `__dict__` (graphs are immutable), so that the manager's
# contract checks before each pass cost O(1) on a graph already checked.
_MARKS = "_annotation_marks"
_MARK_NAMES = {
    is_event: [
        (key, prefix + key, prefix + "no:" + key)
        for key in ANNOTATION_KEYS
        for prefix in ["event:" if is_event else ""]
    ]
    for is_event in (False, True)
}


def _marks(graph: Graph) -> frozenset[str]:
    found: frozenset[str] | None = graph.__dict__.get(_MARKS)
    if found is None:
        distinct: dict[tuple[int, bool], Annotations] = {}
        for node in graph.nodes:
            distinct[id(node.ann), node.op in EVENT_OPS] = node.ann
        marks: set[str] = set()
        add = marks.add
        for (_, is_event), ann in distinct.items():
            fields = ann.__dict__  # read directly, as `Annotations.items` does
            for key, carried, lacked in _MARK_NAMES[is_event]:
                add(lacked if fields[key] is None else carried)
            if is_event:
                add("events")
        found = graph.__dict__[_MARKS] = frozenset(marks)
    return found


def _streams_assigned(graph: Graph) -> bool:
    marks = _marks(graph)
    return "no:stream" not in marks and "event:no:stream" not in marks


def _has_streams(graph: Graph) -> bool:
    marks = _marks(graph)
    return "stream" in marks or "event:stream" in marks


def _backends_assigned(graph: Graph) -> bool:
    return "no:backend" not in _marks(graph)


def _has_backends(graph: Graph) -> bool:
    return "backend" in _marks(graph)


def _buffers_have(graph: Graph, key: str) -> bool:
    """Whether every node that owns bytes carries annotation `key`. The nodes that own bytes
    are all but events and the views that alias their operand (`ir.layout.alias_roots`, the
    lowering's rule); a view that is materialized (a slice across rows, a transpose that moves
    elements) is a buffer like any other result. Only the nodes without `key` are tested."""
    read = attrgetter(f"ann.{key}")
    missing = [node for node in graph.nodes if read(node) is None]
    if not missing:
        return True
    aliases = alias_roots(graph)
    return all(node.op in EVENT_OPS or node.name in aliases for node in missing)


def _lifetimes_analyzed(graph: Graph) -> bool:
    return _buffers_have(graph, "live")


def _has_lifetimes(graph: Graph) -> bool:
    return not _marks(graph).isdisjoint(("live", "visible", "event:live", "event:visible"))


def _memory_planned(graph: Graph) -> bool:
    return _buffers_have(graph, "offset")


def _has_offsets(graph: Graph) -> bool:
    marks = _marks(graph)
    return "offset" in marks or "event:offset" in marks


def _synced(graph: Graph) -> bool:
    return not happens_before(graph).unordered_data_edges()


def _has_events(graph: Graph) -> bool:
    return "events" in _marks(graph)


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
