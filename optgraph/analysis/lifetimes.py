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

Several devices: a buffer exists on each device of its producer, and each copy is accessed by the
instances on that device only (`happens_before.instance_reads`: a collective's instance reads its
own operand, a send's instance the sent buffer, a recv none of its own device). `visible` then has
one entry per lane, device-major: entry d·S + s for stream s of device d (S = 1 + the largest
stream id), computed from the accesses on device d; `-1` on devices the buffer does not live on.
With one device this is the per-stream tuple above.

Complexity: O(V·k) for the clocks plus O(A·k·log V) for the visible points (A = accesses,
k = streams).
"""

from __future__ import annotations

import operator
from bisect import bisect_left
from dataclasses import dataclass

from optgraph.analysis.happens_before import (
    GROUP_COLLECTIVES,
    HappensBefore,
    happens_before,
    instance_reads,
    schedule_memo,
)
from optgraph.ir.graph import EVENT_OPS, Graph
from optgraph.ir.layout import alias_roots


@dataclass(frozen=True)
class Lifetime:
    """One arena buffer: the node producing it and every node touching its bytes."""

    name: str
    producer: int
    accesses: tuple[int, ...]  # sorted instance ids (node indices with one device per node)
    nbytes: int
    is_output: bool
    first: int
    last: int  # len(nodes) for outputs: they live until the graph returns
    visible: tuple[int, ...]  # per lane d·S + s: first node on it after every access; -1 never
    devices: tuple[int, ...] = (0,)  # the devices the buffer lives on


def buffer_accesses(
    graph: Graph, hb: HappensBefore | None = None
) -> tuple[dict[str, list[int]], set[str]]:
    """Accesses of every arena buffer (by root name), as instance ids of `hb` (node indices in a
    graph whose nodes each run on one device), and the set of buffers outputs keep alive.

    Aliasing views are accesses of their root (as are their readers); inputs and weights are not
    arena buffers and are left out.
    """
    hb = hb or happens_before(graph)
    roots = alias_roots(graph)
    root_of = {view: root for view, (root, _) in roots.items()}
    accesses: dict[str, list[int]] = {}
    first = hb.first
    is_general = False  # whether some node took the general path (which may repeat an instance)
    for i, node in enumerate(graph.nodes):  # one pass: issue order defines before use
        op = node.op
        if op in EVENT_OPS:
            continue
        x = first[i]
        if first[i + 1] == x + 1 and op not in _OWN_READS:  # one instance: reads all
            name = node.name
            if name in root_of:
                found = accesses.get(root_of[name])
                if found is not None and found[-1] != x:
                    found.append(x)
            else:
                accesses[name] = [x]
            for operand in node.operands:
                found = accesses.get(root_of.get(operand, operand))
                if found is not None and found[-1] != x:
                    found.append(x)
            continue
        is_general = True
        for x, d in zip(hb.instances_of(i), node.devices):
            if node.name in roots:
                root = roots[node.name][0]
                if root in accesses:
                    accesses[root].append(x)
            elif x == hb.first[i]:
                accesses[node.name] = list(hb.instances_of(i))
            for _, operand in instance_reads(node, d):
                root = roots[operand][0] if operand in roots else operand
                if root in accesses:
                    accesses[root].append(x)
    kept: set[str] = set()
    for name in graph.output_names():
        root = roots[name][0] if name in roots else name
        if root in accesses:
            kept.add(root)
    # Instances are visited in increasing order, so each list is sorted; the fast path above
    # already skips a repeated instance, the general one may repeat one.
    for name, acc in accesses.items() if is_general else ():
        if len(acc) > 1 and not all(map(operator.lt, acc, acc[1:])):
            accesses[name] = sorted(set(acc))
    return accesses, kept


# Ops whose instances read other than every operand (`happens_before.instance_reads`).
_OWN_READS = GROUP_COLLECTIVES | {"recv"}


def stream_ids(graph: Graph) -> range:
    """Streams 0..max stream id used in the graph (per device: `visible` has one entry per
    device and stream id)."""
    # `Node.stream` of every node: its annotation, 0 where none (the distinct ones, in C)
    used = set(map(_STREAM, graph.nodes))
    return range(max((s or 0 for s in used), default=0) + 1)


_STREAM = operator.attrgetter("ann.stream")


def lane_index(graph_streams: int, device: int, stream: int) -> int:
    """The position of lane (device, stream) in a `visible` tuple: device-major."""
    return device * graph_streams + stream


def compute_lifetimes(graph: Graph, hb: HappensBefore | None = None) -> dict[str, Lifetime]:
    """Lifetime of every arena buffer, keyed by the producing value's name, in issue order.
    Computed once per schedule (`schedule_memo`: analyze-lifetimes, plan-memory and the report
    ask for the same ones); each caller gets a dict of its own."""
    hb = hb or happens_before(graph)
    memo = schedule_memo(graph, hb)
    found = memo.get("lifetimes") if memo is not None else None
    if not isinstance(found, dict):
        found = _compute_lifetimes(graph, hb)
        if memo is not None:
            memo["lifetimes"] = found
    return dict(found)


def _compute_lifetimes(graph: Graph, hb: HappensBefore) -> dict[str, Lifetime]:
    accesses, kept = buffer_accesses(graph, hb)
    streams = stream_ids(graph)
    devices = range(graph.device_count())
    nodes = graph.nodes
    end = len(nodes)
    node_of = hb.node_of
    # One lane (one device, one stream): the first node after every access is the one after the
    # last access on that lane (`first_node_after`, read off directly).
    is_one_lane = len(hb.lanes) == 1 and len(streams) == 1 and len(devices) == 1
    lane = hb.on_lane[0] if is_one_lane else None
    never = tuple(-1 for _ in devices for _ in streams)
    out: dict[str, Lifetime] = {}
    for name, acc in accesses.items():
        is_output = name in kept
        producer = node_of[acc[0]]
        node = nodes[producer]
        home = node.ann.devices
        if is_output:
            visible = never
        elif lane is not None:
            after = bisect_left(lane, acc[-1] + 1)
            visible = (node_of[lane[after]] if after < len(lane) else -1,)
        elif len(devices) == 1:
            visible = tuple(hb.first_node_after(acc, s) for s in streams)
        else:
            on = {d: [x for x in acc if hb.device_of[x] == d] for d in home}
            visible = tuple(
                hb.first_node_after(on[d], s, d) if d in on else -1
                for d in devices
                for s in streams
            )
        # Made field by field: a frozen dataclass's __init__ costs several times more, and
        # there is one lifetime per buffer.
        lt = object.__new__(Lifetime)
        lt.__dict__.update(
            name=name,
            producer=producer,
            accesses=tuple(acc),
            nbytes=node.type.nbytes,  # type: ignore[union-attr]
            is_output=is_output,
            first=producer,
            last=end if is_output else node_of[acc[-1]],
            visible=visible,
            devices=home,
        )
        out[name] = lt
    return out


def annotate_lifetimes(graph: Graph, lifetimes: dict[str, Lifetime]) -> Graph:
    """Set `live`/`visible` on every buffer's producer; clear stale ones elsewhere. A node
    already annotated so is kept as it is (plan-memory annotates the lifetimes analyze-lifetimes
    set)."""
    wanted = {lt.producer: ((lt.first, lt.last), lt.visible) for lt in lifetimes.values()}
    nodes = list(graph.nodes)
    for i, n in enumerate(nodes):
        want = wanted.get(i)
        if want is None:
            if n.ann.live is not None or n.ann.visible:
                nodes[i] = n.with_ann(live=None, visible=None)
        elif (n.ann.live, n.ann.visible) != want:
            nodes[i] = n.with_ann(live=want[0], visible=want[1])
    return graph.with_nodes(nodes)
