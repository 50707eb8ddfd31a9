"""`insert-sync`: `record`/`wait` events for the cross-stream dependencies happens-before lacks.

    before: %a = exp(%x) !{stream = 1}    %b = neg(%x) !{stream = 0}    %y = add(%a, %b) !{stream = 0}
    after:  %a = exp(%x) !{stream = 1}    record ^e0 !{stream = 1}    %b = neg(%x) !{stream = 0}
            wait ^e0 !{stream = 0}    %y = add(%a, %b) !{stream = 0}

Nodes are walked in issue order with one vector clock per stream, exactly as `HappensBefore`
computes them (graph start orders inputs before everything; the host stream of split-backends is a
stream whose events are its synchronization). For a node on stream s, every producer on another stream that the
clock of s does not already cover is a candidate; per source stream only the latest candidate is
kept (a wait on it covers the earlier ones), and a candidate covered by another candidate's clock is
dropped. Each remaining candidate gets one `wait` right before the node, on a `record` placed right
after the producer (one record serves every wait on it). So a wait exists only for a cross-stream
edge of the transitive reduction of (data edges ∪ same-stream order): the fewest waits for the given
assignment and issue order; for assign-streams' assignments (streams holding whole chains, or a
fanout drawing checked against it) never more than Nimble's |reduced edges| - |matching|, which
an arbitrary assignment can exceed (`analysis/stream_waits.py` counts these waits). Finally stream 0
waits for the last node of every other stream the end does not already cover, so all streams join
before the outputs are returned. Events already in the graph are kept and count.

New events shift the issue index of every node after them, so the contract refuses a graph that
carries live ranges (run insert-sync before analyze-lifetimes); arena offsets stay sound (events
only add ordering).

Several devices: the clocks are per lane (device, stream), as `HappensBefore` keeps them, and a
node runs once per device, so its waits are decided per device: a replicated node waiting for
the same producer on several devices gets one replicated `wait ^e !{device = [0, 1], stream = s}`
on a replicated `record` (recorded on every device any wait needs it). A collective's instance on
device group[k] waits only for operand k's producer; the collective itself (and a send for its
recv) orders the devices, so no event ever crosses devices. The end joins every lane into its
own device's stream 0.

A graph on one lane (one device, one stream: what assign-streams leaves where no fork pays) is
returned as it is, without the walk: every instance waits for nothing.

Does not handle: moving nodes to save waits (the order is assign-streams' decision), events across
graph replays (every replay starts from the host, which orders it after the previous end).

Complexity: O((I + E)·k) for I node instances and k lanes, plus O(c²·k) per instance for its c
candidate lanes.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from operator import attrgetter

from optgraph.analysis.happens_before import GROUP_COLLECTIVES, instance_reads
from optgraph.ir.graph import Annotations, Graph, Node
from optgraph.passes.base import Pass


def _event_names(graph: Graph) -> Iterator[str]:
    taken = {n.name for n in graph.nodes if n.is_event}
    i = 0
    while True:
        name = f"e{i}"
        i += 1
        if name not in taken:
            yield name


_ANN = attrgetter("ann")


class _LaneClocks:
    """Issue-order walk with one clock per lane, deciding which waits each instance needs."""

    def __init__(self, graph: Graph):
        self.nodes = graph.nodes
        # Read off each annotation object once: a scheduled graph's nodes share a few.
        every = list(map(_ANN, graph.nodes))
        anns = dict(zip(map(id, every), every)).values()
        lanes = {(d, a.stream or 0) for a in anns for d in a.devices}
        lanes |= {(d, 0) for a in anns for d in a.devices} | {(0, 0)}
        self.col = {lane: c for c, lane in enumerate(sorted(lanes))}
        k = len(self.col)
        self.cur = [[0] * k for _ in range(k)]  # each lane's clock
        self.clock: dict[tuple[int, int], list[int]] = {}  # (node, device) -> its clock
        self.seq: dict[tuple[int, int], int] = {}
        self.lane_of: dict[tuple[int, int], int] = {}
        self.recorded: dict[tuple[str, int], list[int]] = {}
        self.record_after: dict[int, set[int]] = {}  # producer -> devices of its new record
        self.waits_before: dict[int, dict[int, set[int]]] = {}  # node -> producer -> devices
        self.last_on: dict[int, tuple[int, int]] = {}  # lane column -> last instance
        producers = graph.producers()
        self.producer_of = producers

    def sync(self, c: int, needed: list[tuple[int, int]]) -> list[tuple[int, int]]:
        """Waits that make lane column `c` cover every instance in `needed`."""
        mine = self.cur[c]
        latest: dict[int, tuple[int, int]] = {}
        for p in needed:
            pc = self.lane_of[p]
            if pc == c or mine[pc] >= self.seq[p]:
                continue
            if pc not in latest or self.seq[p] > self.seq[latest[pc]]:
                latest[pc] = p
        chosen = [
            p
            for pc, p in latest.items()
            if not any(self.clock[q][pc] >= self.seq[p] for d, q in latest.items() if d != pc)
        ]
        for p in chosen:
            self.record_after.setdefault(p[0], set()).add(p[1])
            mine[:] = [max(a, b) for a, b in zip(mine, self.clock[p])]
        return sorted(chosen)

    def event(self, node: Node) -> None:
        for d in node.devices:
            c = self.col[(d, node.stream)]
            if node.op == "record":
                self.recorded[(node.name, d)] = list(self.cur[c])
            elif (node.name, d) in self.recorded:
                self.cur[c][:] = [
                    max(a, b) for a, b in zip(self.cur[c], self.recorded[(node.name, d)])
                ]

    def compute(self, i: int, node: Node) -> None:
        cols = [self.col[(d, node.stream)] for d in node.devices]
        for d, c in zip(node.devices, cols):
            needed = []
            for _, operand in instance_reads(node, d):
                p = self.producer_of.get(operand)
                if p is not None and d in self.nodes[p].devices:
                    needed.append((p, d))
            for p, _ in self.sync(c, needed):
                self.waits_before.setdefault(i, {}).setdefault(p, set()).add(d)
        if node.op in GROUP_COLLECTIVES:
            joined = [max(column) for column in zip(*(self.cur[c] for c in cols))]
            for c in cols:
                self.cur[c][:] = joined
        elif node.op == "recv" and node.operands and node.operands[0] in self.producer_of:
            sender = self.producer_of[node.operands[0]]
            if (sender, self.nodes[sender].devices[0]) in self.clock:
                sent = self.clock[(sender, self.nodes[sender].devices[0])]
                self.cur[cols[0]][:] = [max(a, b) for a, b in zip(self.cur[cols[0]], sent)]
        ticked = [self.cur[c][c] + 1 for c in cols]
        for d, c, t in zip(node.devices, cols, ticked):
            row = list(self.cur[c])
            row[c] = t
            self.clock[(i, d)], self.seq[(i, d)], self.lane_of[(i, d)] = row, t, c
            self.last_on[c] = (i, d)
        # As in analysis/happens_before: a collective's own instances are not ordered with the
        # other participants' later work, so each lane learns only its own tick.
        for c, t in zip(cols, ticked):
            self.cur[c][c] = t

    def final_waits(self) -> dict[int, list[tuple[int, int]]]:
        """Per device: the instances its stream 0 waits for at the end."""
        out: dict[int, list[tuple[int, int]]] = {}
        for (d, s), c in self.col.items():
            if s != 0:
                continue
            others = [p for oc, p in self.last_on.items() if p[1] == d and oc != c]
            out[d] = self.sync(c, others)
        return out


def _event_ann(node: Node, devices: set[int], annotated: bool) -> Annotations:
    """An event runs on its node's stream (and backend, for split graphs) on the given devices."""
    device = tuple(sorted(devices)) if annotated else None
    return Annotations(device=device, stream=node.stream, backend=node.ann.backend)


@dataclass(frozen=True)
class InsertSyncPass(Pass):
    name = "insert-sync"
    summary = "add record/wait events for cross-stream dependencies not already ordered"
    requires = ("streams-assigned",)
    provides = ("synced",)
    invalidates = ("lifetimes-analyzed",)  # new events shift every issue index after them

    def run(self, graph: Graph) -> Graph:
        nodes = graph.nodes
        walk = _LaneClocks(graph)
        if len(walk.col) == 1:  # one lane: happens-before is issue order, nothing to wait for
            return graph
        for i, node in enumerate(nodes):
            if node.is_event:
                walk.event(node)
            else:
                walk.compute(i, node)
        final = walk.final_waits()
        annotated = any(n.ann.device is not None for n in nodes)
        names = _event_names(graph)
        out: list[Node] = []
        event_of: dict[int, str] = {}  # named in issue order of the records
        for i, node in enumerate(nodes):
            for p, devices in sorted(walk.waits_before.get(i, {}).items()):
                ann = _event_ann(node, devices, annotated)
                out.append(Node(event_of[p], "wait", ann=ann, span=node.span))
            out.append(node)
            if i in walk.record_after:
                event_of[i] = next(names)
                ann = _event_ann(node, walk.record_after[i], annotated)
                out.append(Node(event_of[i], "record", ann=ann, span=node.span))
        for d, waits in sorted(final.items()):
            device = (d,) if annotated else None
            end = Annotations(device=device, stream=0)
            out.extend(Node(event_of[p], "wait", ann=end) for p, _ in waits)
        return graph.with_nodes(out)
