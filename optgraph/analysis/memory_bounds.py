"""Lower bounds for an arena plan, and the memory figures `optgraph compile` reports.

- `issue_order_bound` (L): the largest total size of buffers live together in issue order, each
  live on `[first, last]`. With one stream no plan without in-place reuse can go below it.
- `concurrency_bound`: with several streams, buffers that happens-before does not order may be live
  together even when their issue-order ranges are disjoint. Buffers ordered "entirely before" (every
  access of A happens-before B's first write) form a partial order, and pairwise unordered buffers
  must all get disjoint bytes, so the maximum-weight antichain is a lower bound for any plan. It is
  computed exactly as a min-flow (weighted Dilworth): cover each buffer v by w(v) chains; the
  minimum flow equals W - maxflow of the network
  `S -> out_v (w(v))`, `in_v -> T (w(v))`, `in_v -> out_v (inf)`, and the order itself as inf arcs
  `out_A -> time point (s, visible_A[s])`, `time point -> next time point on s`,
  `time point (s, producer B) -> in_B`: a path out_A ~> in_B exists iff A is entirely before B, so
  the network has O(n·k) arcs instead of the O(n²) of the transitive closure.
  Both bounds count bytes after alignment and ignore in-place reuse (which can beat them).

Complexity: L is O(n log n); the antichain is one max-flow on O(n·k) nodes and arcs (networkx
preflow-push, O(V²·√E) worst case; seconds for a few thousand buffers), skipped above `limit`.
"""

from __future__ import annotations

import itertools
import math
from operator import attrgetter

import numpy as np

from optgraph.analysis.arena_packing import align_up
from optgraph.analysis.arena_plan import plan
from optgraph.analysis.happens_before import happens_before
from optgraph.analysis.lifetimes import Lifetime, compute_lifetimes
from optgraph.ir.graph import EVENT_OPS, Graph


def issue_order_bound(lifetimes: dict[str, Lifetime], alignment: int, length: int) -> int:
    """L: max over issue positions of the total (aligned) size of buffers live there."""
    if not lifetimes:
        return 0
    values = lifetimes.values()
    delta = np.zeros(length + 2, dtype=np.int64)
    sizes = np.array([-(-lt.nbytes // alignment) * alignment for lt in values], dtype=np.int64)
    np.add.at(delta, np.array([lt.first for lt in values], dtype=np.int64), sizes)
    np.subtract.at(delta, np.array([lt.last + 1 for lt in values], dtype=np.int64), sizes)
    return int(np.cumsum(delta).max())


def concurrency_bound(
    graph: Graph, lifetimes: dict[str, Lifetime], alignment: int, limit: int | None = 20_000
) -> int | None:
    """Maximum-weight antichain of the "entirely before" order; None above `limit` buffers."""
    if limit is not None and len(lifetimes) > limit:
        return None
    # Imported here: importing networkx takes a noticeable part of a compile's start-up, and
    # only this bound needs it (the report skips it above its limit of buffers).
    import networkx as nx

    net = nx.DiGraph()
    total = 0
    points: dict[int, set[int]] = {}  # stream -> node indices used as time points
    for lt in lifetimes.values():
        w = align_up(lt.nbytes, alignment)
        total += w
        net.add_edge("S", ("out", lt.name), capacity=w)
        net.add_edge(("in", lt.name), "T", capacity=w)
        net.add_edge(("in", lt.name), ("out", lt.name))
        s = graph.nodes[lt.producer].stream
        points.setdefault(s, set()).add(lt.producer)
        net.add_edge(("tp", s, lt.producer), ("in", lt.name))
        for stream, v in enumerate(lt.visible):
            if v >= 0:
                points.setdefault(stream, set()).add(v)
                net.add_edge(("out", lt.name), ("tp", stream, v))
    for stream, idx in points.items():
        chain = sorted(idx)
        for a, b in itertools.pairwise(chain):
            net.add_edge(("tp", stream, a), ("tp", stream, b))
    if total == 0:
        return 0
    flow = nx.maximum_flow_value(net, "S", "T")
    return int(total - flow)


def without_streams(graph: Graph) -> Graph:
    """The same issue order on one stream: events dropped, stream annotations cleared."""
    return graph.with_nodes(
        n.with_ann(stream=None) if n.ann.stream is not None else n
        for n in graph.nodes
        if not n.is_event
    )


def arena_of(graph: Graph) -> int | None:
    """Arena bytes a planned graph uses (max offset + size), None when it is not planned. With
    several devices, the largest device's arena."""
    ends = [n.ann.offset + (n.ann.size or 0) for n in graph.nodes if n.ann.offset is not None]
    if not ends and any(not n.is_event for n in graph.nodes):
        return None
    return max(ends, default=0)


def planned_alignment(graph: Graph, default: int = 256) -> int:
    """The alignment a planned graph was planned with: the gcd of its reserved sizes."""
    sizes = [n.ann.size for n in graph.nodes if n.ann.size]
    return math.gcd(*sizes) if sizes else default


def memory_figures(
    graph: Graph,
    alignment: int | None = None,
    algo: str = "best",
    antichain_limit: int | None = 20_000,
) -> dict[str, int | None]:
    """Arena bytes (planned now if the graph is not), both lower bounds, no-reuse bytes, and
    the extra bytes the stream assignment costs against a one-stream plan of the same order.
    `alignment` defaults to the one the graph's plan used."""
    alignment = alignment or planned_alignment(graph)
    hb = happens_before(graph)
    lifetimes = compute_lifetimes(graph, hb)
    arena = arena_of(graph)
    if arena is None:
        arena = plan(graph, algo, alignment, True, lifetimes, hb).arena_bytes
    # Without events and streams other than 0, dropping the streams changes no index, no clock
    # and no plan: the one-stream order is the graph's own (and so are its lifetimes and plan).
    is_one_stream = not any(map(_STREAM, graph.nodes)) and EVENT_OPS.isdisjoint(
        map(_OP, graph.nodes)
    )
    one = graph if is_one_stream else without_streams(graph)
    one_lifetimes = lifetimes if is_one_stream else compute_lifetimes(one)
    one_hb = hb if is_one_stream else None
    one_arena = plan(one, algo, alignment, True, one_lifetimes, one_hb).arena_bytes
    if graph.device_count() > 1:
        # Each device has its own arena: the bounds are the largest device's; the antichain
        # bound's flow network is built per stream and is not extended to lanes.
        return {
            "arena_bytes": arena,
            "memory_lower_bound_bytes": _largest_device_bound(graph, lifetimes, alignment),
            "concurrency_bound_bytes": None,
            "no_reuse_bytes": sum(align_up(lt.nbytes, alignment) for lt in lifetimes.values()),
            "one_stream_arena_bytes": one_arena,
            "stream_extra_bytes": arena - one_arena,
            "one_stream_lower_bound_bytes": _largest_device_bound(one, one_lifetimes, alignment),
        }
    lower = issue_order_bound(lifetimes, alignment, len(graph.nodes))
    one_lower = (
        lower if is_one_stream else issue_order_bound(one_lifetimes, alignment, len(one.nodes))
    )
    return {
        "arena_bytes": arena,
        "memory_lower_bound_bytes": lower,
        "concurrency_bound_bytes": concurrency_bound(graph, lifetimes, alignment, antichain_limit),
        "no_reuse_bytes": sum(align_up(lt.nbytes, alignment) for lt in lifetimes.values()),
        "one_stream_arena_bytes": one_arena,
        "stream_extra_bytes": arena - one_arena,
        "one_stream_lower_bound_bytes": one_lower,
    }


_STREAM = attrgetter("ann.stream")
_OP = attrgetter("op")


def _largest_device_bound(graph: Graph, lifetimes: dict[str, Lifetime], alignment: int) -> int:
    """The issue-order bound of the device whose buffers need the most bytes at once."""
    return max(
        issue_order_bound(
            {k: lt for k, lt in lifetimes.items() if d in lt.devices}, alignment, len(graph.nodes)
        )
        for d in range(graph.device_count())
    )


def device_arena_bytes(graph: Graph) -> tuple[int, ...] | None:
    """Per device 0..n-1: its arena's bytes (the top of its planned buffers); None unplanned."""
    tops = [0] * graph.device_count()
    planned = False
    for n in graph.nodes:
        if n.ann.offset is not None and not n.is_event:
            planned = True
            for d in n.devices:
                tops[d] = max(tops[d], n.ann.offset + (n.ann.size or 0))
    return tuple(tops) if planned else None


def device_weight_bytes(graph: Graph) -> tuple[int, ...]:
    """Per device 0..n-1: the bytes of the weights stored on it (a replicated weight on each)."""
    totals = [0] * graph.device_count()
    for w in graph.weights:
        for d in w.ann.devices:
            totals[d] += w.type.nbytes
    return tuple(totals)


__all__ = [
    "arena_of",
    "concurrency_bound",
    "device_arena_bytes",
    "device_weight_bytes",
    "issue_order_bound",
    "memory_figures",
    "planned_alignment",
    "without_streams",
]
