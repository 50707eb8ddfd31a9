"""Buffer lifetimes: when each arena buffer is written, last read, and free as seen from each stream.

What `analyze-lifetimes` annotates, `plan-memory` places, `plan-prefetch` refreshes and the memory
bounds count. A *buffer* is the result of a compute node that is not an aliasing view
(`optgraph.ir.layout`): aliasing views own no bytes, and every access through a view counts as an
access of its root. Inputs and weights are not arena buffers.

- `live = [first, last]`: the producer's index and the last access's index in issue order (events
  counted); a graph output, or a buffer an output aliases, lives to the end (`last = len(nodes)`).
- `visible[s]`: the first node on stream s that every access happens-before
  (`HappensBefore.first_node_after`): from there on, work issued on s may reuse the bytes; `-1`
  where no such node exists (and always for outputs).

Complexity: O(V·k) for the clocks plus O(A·k·log V) for the visible points (A = accesses,
k = streams).
"""

from __future__ import annotations

from dataclasses import dataclass

from optgraph.analysis.happens_before import HappensBefore
from optgraph.ir.gc_pause import gc_paused
from optgraph.ir.graph import EVENT_OPS, Graph
from optgraph.ir.layout import alias_roots


@dataclass(frozen=True)
class Lifetime:
    """One arena buffer: the node producing it and every node touching its bytes."""

    name: str
    producer: int
    accesses: tuple[int, ...]  # sorted node indices: producer, readers, views and their readers
    nbytes: int
    is_output: bool
    first: int
    last: int  # len(nodes) for outputs: they live until the graph returns
    visible: tuple[int, ...]  # per stream id 0..max: first node on it after every access; -1 never


def buffer_accesses(graph: Graph) -> tuple[dict[str, list[int]], set[str]]:
    """Accesses of every arena buffer (by root name) and the set of buffers outputs keep alive.

    Aliasing views are accesses of their root (as are their readers); inputs and weights are not
    arena buffers and are left out.
    """
    roots = alias_roots(graph)
    accesses: dict[str, list[int]] = {}
    for i, node in enumerate(graph.nodes):  # one pass: issue order defines before use
        if node.op in EVENT_OPS:
            continue
        if node.name in roots:
            root = roots[node.name][0]
            if root in accesses:
                accesses[root].append(i)
        else:
            accesses[node.name] = [i]
        for operand in node.operands:
            root = roots[operand][0] if operand in roots else operand
            if root in accesses:
                accesses[root].append(i)
    kept: set[str] = set()
    for name in graph.output_names():
        root = roots[name][0] if name in roots else name
        if root in accesses:
            kept.add(root)
    for name, acc in accesses.items():
        if len(acc) > 1:
            accesses[name] = sorted(set(acc))
    return accesses, kept


def stream_ids(graph: Graph) -> range:
    """Streams 0..max stream id used in the graph (the length of every `visible` tuple)."""
    return range(max((n.stream for n in graph.nodes), default=0) + 1)


def compute_lifetimes(graph: Graph, hb: HappensBefore | None = None) -> dict[str, Lifetime]:
    """Lifetime of every arena buffer, keyed by the producing value's name, in issue order."""
    hb = hb or HappensBefore(graph)
    accesses, kept = buffer_accesses(graph)
    streams = stream_ids(graph)
    nodes = graph.nodes
    end = len(nodes)
    out: dict[str, Lifetime] = {}
    for name, acc in accesses.items():
        is_output = name in kept
        if is_output:
            visible = tuple(-1 for _ in streams)
        else:
            visible = tuple(hb.first_node_after(acc, s) for s in streams)
        out[name] = Lifetime(
            name=name,
            producer=acc[0],
            accesses=tuple(acc),
            nbytes=nodes[acc[0]].type.nbytes,  # type: ignore[union-attr]
            is_output=is_output,
            first=acc[0],
            last=end if is_output else acc[-1],
            visible=visible,
        )
    return out


def annotate_lifetimes(graph: Graph, lifetimes: dict[str, Lifetime]) -> Graph:
    """Set `live`/`visible` on every buffer's producer; clear stale ones elsewhere."""
    nodes = [
        n.with_ann(live=None, visible=None) if n.ann.live is not None or n.ann.visible else n
        for n in graph.nodes
    ]
    for lt in lifetimes.values():
        nodes[lt.producer] = nodes[lt.producer].with_ann(
            live=(lt.first, lt.last), visible=lt.visible
        )
    return graph.with_nodes(nodes)


__all__ = ["annotate_lifetimes", "buffer_accesses", "compute_lifetimes", "gc_paused", "stream_ids"]
