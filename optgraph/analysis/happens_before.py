"""Happens-before over a scheduled graph, with one vector clock per node instance.

A node runs once on each of its devices (`device` annotation; absent: device 0): each run is an
*instance*, on the *lane* (device, stream). A happens-before B when they are on the same lane and A
is issued first; or A precedes a `record ^e` on its lane and B follows a `wait ^e` on its own (an
event is recorded and waited per device: a replicated `record` records on each of its devices);
or a collective orders them: an `all_reduce`/`all_gather` joins the clocks of its participants
(everything before it on any participant's lane happens-before everything after it on every
participant), and a `recv` joins the clock of its `send` (the sender's work before the send
happens-before the receiver's work after the recv; not the converse: NCCL may finish a small send
before its recv runs). Graph start orders every input and weight before every node; the host
returning outputs is the end, after each device's stream 0. Nodes without a stream are on stream
0, so an unscheduled single-device graph is totally ordered.

Walking nodes in issue order, each lane keeps a clock vector (one entry per lane: how many
instances of that lane are known to have finished). An instance on lane c takes its lane's clock
with entry c advanced; `record` snapshots the clock into the event; `wait` joins the event's clock
into the waiting lane. Then A (lane c, sequence number q) happens-before B iff clock(B)[c] >= q.

Instances are numbered in issue order, a node's instances in the order of its device list. In a
graph where every node has one device (every single-device graph), instance i is node i.

Complexity: O(I·k) time and memory to build (I instances, k lanes; the clocks are Python tuples,
one per instance, and a node with one device outside events and collectives costs one tick), O(1)
per ordered() query, O(k·log V) for `first_node_after` (plus O(I) once per pair of lanes it reads).
`happens_before(graph)` builds them once per graph (and shares them with a graph scheduled alike).

    before: %a = exp(%x) !{stream = 1}   record ^e !{stream = 1}   wait ^e !{stream = 0}   %b = neg(%a)
    after:  ordered(%a, %b) is True; without the wait it is False.
"""

from __future__ import annotations

import atexit
import copy
from bisect import bisect_left
from collections.abc import Iterable, Iterator, Sequence
from operator import attrgetter
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

from optgraph.ir.graph import Graph, Node, differs_only_in_annotations
from optgraph.ir.verify import is_verified

GROUP_COLLECTIVES = frozenset({"all_reduce", "all_gather"})
EVENT_OPS = frozenset({"record", "wait"})
_JOINING_OPS = GROUP_COLLECTIVES | EVENT_OPS | {"recv", "send"}  # the walk's slow path
Lane = tuple[int, int]  # (device, stream)
_ANN = attrgetter("ann")
_OP = attrgetter("op")
_JOINING_COMPUTE_OPS = _JOINING_OPS - EVENT_OPS  # collectives, send and recv


def instance_reads(node: Node, device: int) -> Iterator[tuple[int, str]]:
    """(operand position, operand) that the node's instance on `device` reads on that device.

    A plain node reads every operand; a group collective on device group[k] reads operand k (the
    others arrive through the collective); a recv reads nothing of its own device (the send's
    instance reads the sent buffer).
    """
    if node.op == "recv":
        return
    if node.op in GROUP_COLLECTIVES:
        group = node.attrs.get("group")
        if isinstance(group, tuple) and device in group:
            k = group.index(device)
            if k < len(node.operands):
                yield k, node.operands[k]
        return
    yield from enumerate(node.operands)


def operands_read(node: Node, device: int) -> Sequence[str]:
    """The operands of `instance_reads(node, device)`, in order: a plain node's operands as they
    are (the races check asks for every node's, and most are plain)."""
    if node.op == "recv" or node.op in GROUP_COLLECTIVES:
        return [operand for _, operand in instance_reads(node, device)]
    return node.operands


class HappensBefore:
    """Vector clocks of a graph's node instances (see the module docstring).

    Lanes are numbered once (`lanes`, `column`); each instance's clock is a tuple with one entry
    per lane. Queries read these lists; `clocks`, `seq` and `lane_col` give the same as NumPy
    arrays, made on first use, for callers that work on many instances at once.
    """

    def __init__(self, graph: Graph):
        self.graph = graph
        nodes = graph.nodes
        self.first: list[int] = []  # node index -> its first instance; then len(instances)
        self.node_of: list[int] = []
        self.device_of: list[int] = []
        first, node_of, device_of = self.first, self.node_of, self.device_of
        for i, node in enumerate(nodes):
            first.append(len(node_of))
            node_devices = node.ann.devices
            if len(node_devices) == 1:
                node_of.append(i)
                device_of.append(node_devices[0])
            else:
                node_of.extend(i for _ in node_devices)
                device_of.extend(node_devices)
        first.append(len(node_of))
        # Devices and lanes read off each annotation object once: a scheduled graph's nodes
        # share a few (`Node.with_annotations`).
        every = list(map(_ANN, nodes))
        anns = dict(zip(map(id, every), every)).values()
        devices = sorted({d for a in anns for d in a.devices} | {0})
        self.devices = devices
        self.lanes: list[Lane] = sorted(
            {(d, a.stream or 0) for a in anns for d in a.devices} | {(d, 0) for d in devices}
        )
        self.column: dict[Lane, int] = {lane: c for c, lane in enumerate(self.lanes)}
        k = len(self.lanes)
        self.rows: list[tuple[int, ...]] = []  # instance -> its clock
        self.seqs: list[int] = []  # instance -> its sequence number on its lane
        self.lanes_of: list[int] = []  # instance -> its lane's column
        # Per lane: instance ids in issue order, for first_node_after().
        self.on_lane: list[list[int]] = [[] for _ in range(k)]
        self.missing_events: list[int] = []
        self.final: list[list[int]] = [[0] * k for _ in range(k)]
        self._walk()
        self._lane_columns: dict[tuple[int, int], list[int]] = {}
        self._arrays: dict[str, np.ndarray] = {}
        # What analyses derive from this schedule alone (lifetimes, arena plans), shared by every
        # graph `happens_before` finds scheduled alike: see `schedule_memo`.
        self.memo: dict[object, object] = {}

    def _walk(self) -> None:
        current = self.final  # each lane's clock so far; at the end, when the host reaches it
        rows, seqs, lanes_of, on_lane = self.rows, self.seqs, self.lanes_of, self.on_lane
        column = self.column
        events: dict[tuple[str, int], tuple[int, ...]] = {}
        sends: dict[str, int] = {}  # send result -> its instance
        for i, node in enumerate(self.graph.nodes):
            ann = node.ann  # `node.devices` and `node.stream`, read once
            devices = ann.devices
            stream = ann.stream or 0
            op = node.op
            if len(devices) == 1 and op not in _JOINING_OPS:  # the common case: one tick
                c = column[(devices[0], stream)]
                row = current[c]
                tick = row[c] + 1
                row[c] = tick
                on_lane[c].append(len(rows))
                rows.append(tuple(row))
                seqs.append(tick)
                lanes_of.append(c)
                continue
            first = len(rows)
            cols = [column[(d, stream)] for d in devices]
            if op in EVENT_OPS:
                for d, c in zip(devices, cols):
                    if op == "record":
                        events[(node.name, d)] = tuple(current[c])
                    elif (clock := events.get((node.name, d))) is not None:
                        current[c] = list(map(max, current[c], clock))
                    elif not self.missing_events or self.missing_events[-1] != i:
                        self.missing_events.append(i)
                    rows.append(tuple(current[c]))
                    seqs.append(current[c][c])
                    lanes_of.append(c)
                continue
            if op in GROUP_COLLECTIVES:
                joined = list(map(max, *(current[c] for c in cols))) if len(cols) > 1 else None
                for c in cols:
                    current[c] = list(joined) if joined is not None else current[c]
            elif op == "recv" and node.operands and node.operands[0] in sends:
                sender = rows[sends[node.operands[0]]]
                current[cols[0]] = list(map(max, current[cols[0]], sender))
            ticked = [current[c][c] + 1 for c in cols]
            for x, c in enumerate(cols):
                row = list(current[c])
                row[c] = ticked[x]
                rows.append(tuple(row))
                seqs.append(ticked[x])
                lanes_of.append(c)
                on_lane[c].append(first + x)
            # A collective orders every participant's earlier work (joined above) before every
            # participant's later work; its instances are not ordered with each other: one rank's
            # collective may still be reading or writing its buffers when another's completes.
            for x, c in enumerate(cols):
                current[c][c] = ticked[x]
            if op == "send":
                sends[node.name] = first

    # -- the clocks as arrays ----------------------------------------------------------------

    def _array(self, key: str, values: list[int] | list[tuple[int, ...]]) -> np.ndarray:
        import numpy as np

        array = self._arrays.get(key)
        if array is None:
            array = np.array(values, dtype=np.int64)
            if key == "clocks":
                array = array.reshape(len(values), len(self.lanes))
            self._arrays[key] = array
        return array

    @property
    def clocks(self) -> np.ndarray:
        """`rows` as an (instances, lanes) array."""
        return self._array("clocks", self.rows)

    @property
    def seq(self) -> np.ndarray:
        """`seqs` as an array."""
        return self._array("seq", self.seqs)

    @property
    def lane_col(self) -> np.ndarray:
        """`lanes_of` as an array."""
        return self._array("lane_col", self.lanes_of)

    # -- instances ---------------------------------------------------------------------------

    def instance(self, node: int, device: int) -> int:
        """The instance of node index `node` on `device` (which must be one of its devices)."""
        first = self.first[node]
        if self.first[node + 1] == first + 1 and self.device_of[first] == device:
            return first
        return first + self.graph.nodes[node].devices.index(device)

    def instances_of(self, node: int) -> range:
        return range(self.first[node], self.first[node + 1])

    def ordered_instances(self, x: int, y: int) -> bool:
        """Whether instance x happens-before instance y (False when x == y)."""
        if x == y:
            return False
        lane = self.lanes_of[x]
        return self.rows[y][lane] >= self.seqs[x] and (lane != self.lanes_of[y] or x < y)

    # -- nodes -------------------------------------------------------------------------------

    def ordered(self, a: int, b: int) -> bool:
        """Whether node a happens-before node b: on every device they share, a's instance before
        b's; sharing none, every instance of a before every instance of b. False when a == b."""
        if a == b:
            return False
        shared = [d for d in self.graph.nodes[b].devices if d in self.graph.nodes[a].devices]
        if shared:
            return all(
                self.ordered_instances(self.instance(a, d), self.instance(b, d)) for d in shared
            )
        return all(
            self.ordered_instances(x, y) for x in self.instances_of(a) for y in self.instances_of(b)
        )

    def concurrent(self, a: int, b: int) -> bool:
        """Neither orders the other."""
        return a != b and not self.ordered(a, b) and not self.ordered(b, a)

    def data_edges(self) -> Iterator[tuple[int, int]]:
        """(producer instance, consumer instance) of every read of a node result on a device,
        and (send instance, recv instance) of every transfer."""
        producers = self.graph.producers()
        nodes = self.graph.nodes
        first = self.first
        for i, node in self.graph.compute_nodes():
            devices = node.devices
            if len(devices) == 1 and node.op not in _JOINING_OPS:  # reads every operand there
                d = devices[0]
                for operand in node.operands:
                    p = producers.get(operand)
                    if p is not None and d in nodes[p].devices:
                        yield self.instance(p, d), first[i]
                continue
            for x, d in enumerate(devices):
                for _, operand in instance_reads(node, d):
                    p = producers.get(operand)
                    if p is not None and d in nodes[p].devices:
                        yield self.instance(p, d), self.first[i] + x
            if node.op == "recv" and node.operands and node.operands[0] in producers:
                sender = producers[node.operands[0]]
                yield self.first[sender], self.first[i]

    def unordered_instance_edges(self) -> list[tuple[int, int]]:
        """The `data_edges` (producer instance, consumer instance) whose producer does not
        happen-before the consumer, in the same order. Remembered in `memo` (the `synced`
        contract check and the race finder ask for them)."""
        found = self.memo.get("unordered_edges")
        if isinstance(found, list):
            return list(found)
        if self._is_one_lane():
            # A verified graph defines every operand before its reader: no edge runs backward.
            edges = [] if is_verified(self.graph) else self._backward_edges()
            self.memo["unordered_edges"] = edges
            return list(edges)
        rows, seqs, lanes = self.rows, self.seqs, self.lanes_of
        edges = []
        for x, y in self.data_edges():  # `ordered_instances(x, y)`, inlined
            lane = lanes[x]
            if x == y or rows[y][lane] < seqs[x] or (lane == lanes[y] and x > y):
                edges.append((x, y))
        self.memo["unordered_edges"] = edges
        return list(edges)

    def _is_one_lane(self) -> bool:
        """One lane, one instance per node, no collective, send or recv: instance i is node i,
        and instance x happens-before instance y exactly when x < y."""
        return (
            len(self.lanes) == 1
            and len(self.node_of) == len(self.graph.nodes)
            and _JOINING_COMPUTE_OPS.isdisjoint(map(_OP, self.graph.nodes))
        )

    def _backward_edges(self) -> list[tuple[int, int]]:
        """On one lane (`_is_one_lane`): the `data_edges` whose producer is not issued before
        its consumer, in `data_edges` order. Every data edge reads its operands on device 0."""
        producers = self.graph.producers()
        edges: list[tuple[int, int]] = []
        for i, node in enumerate(self.graph.nodes):
            if node.op in EVENT_OPS:
                continue
            for operand in node.operands:
                p = producers.get(operand)
                if p is not None and p >= i:
                    edges.append((p, i))
        return edges

    def unordered_data_edges(self) -> list[tuple[int, int]]:
        """(producer, consumer) node pairs of data edges that happens-before does not cover."""
        bad: list[tuple[int, int]] = []
        for x, y in self.unordered_instance_edges():
            pair = (self.node_of[x], self.node_of[y])
            if not bad or bad[-1] != pair:
                bad.append(pair)
        return bad

    def first_node_after(self, accesses: Iterable[int], stream: int, device: int = 0) -> int:
        """Index of the first compute node on lane (device, stream) that every access (instance)
        happens-before; -1 if none. Clocks along one lane only grow: a binary search each."""
        c = self.column.get((device, stream))
        if c is None:
            return -1
        indices = self.on_lane[c]
        position = 0
        for a in accesses:
            sa = self.lanes_of[a]
            if sa == c:
                pos = bisect_left(indices, a + 1)  # strictly later on the same lane
            else:
                pos = bisect_left(self._lane_column(c, sa), self.seqs[a])
            position = max(position, pos)
            if position >= len(indices):
                return -1
        return self.node_of[indices[position]] if position < len(indices) else -1

    def _lane_column(self, c: int, other: int) -> list[int]:
        """Entry `other` of the clocks of lane c's instances, in issue order (non-decreasing)."""
        values = self._lane_columns.get((c, other))
        if values is None:
            rows = self.rows
            values = self._lane_columns[(c, other)] = [rows[x][other] for x in self.on_lane[c]]
        return values

    def end_lane(self, device: int) -> int:
        """The column of the lane the host waits on at the end for `device`: its stream 0."""
        return self.column[(device, 0)]

    def unjoined_lanes(self) -> list[int]:
        """Columns of lanes whose last instance does not happen-before its device's end."""
        out = []
        for c, on_lane in enumerate(self.on_lane):
            device = self.lanes[c][0]
            end = self.end_lane(device)
            if c != end and on_lane and self.final[end][c] < self.seqs[on_lane[-1]]:
                out.append(c)
        return out

    def joined_at_end(self) -> bool:
        """Whether every instance happens-before the end of its device's stream 0."""
        return not self.unjoined_lanes()

    def width(self) -> int:
        """Number of lanes in use."""
        return sum(1 for idx in self.on_lane if idx)


# The clocks asked for last, most recent first: a compile asks for the clocks of one graph
# several times (a pass's contract, the pass, the report), and the graph a pass returns is often
# its input re-annotated. Kept here rather than on the graphs: no reference cycles, and graphs
# stay plain data.
_RECENT = 3
_recent: list[HappensBefore] = []
# Emptied at exit, while reference counts free the graphs it holds: left to the interpreter's
# finalization, its collections would walk every object of them.
atexit.register(_recent.clear)


def happens_before(graph: Graph) -> HappensBefore:
    """`HappensBefore(graph)`, remembered for the last few graphs asked for; a graph that differs
    from one of those only in annotations other than stream and device (and in spans) shares its
    clocks and their `memo`: a pass that annotates offsets or lifetimes keeps them. O(V) then."""
    hb = next((h for h in _recent if h.graph is graph), None)
    if hb is None:
        like = next((h for h in _recent if _same_schedule(h.graph, graph)), None)
        if like is not None:
            hb = copy.copy(like)
            hb.graph = graph
        else:
            hb = HappensBefore(graph)
    _recent[:] = [hb, *(h for h in _recent if h is not hb)][:_RECENT]
    return hb


def share_clocks(graph: Graph, hb: HappensBefore) -> HappensBefore:
    """Remember `hb`'s clocks (and their `memo`) as those of `graph`, which the caller made from
    `hb.graph` changing annotations other than stream and device only: what `happens_before`
    would find comparing the two graphs (O(V)), known to the caller for free. O(1)."""
    if hb.graph is graph:
        return hb
    mine = copy.copy(hb)
    mine.graph = graph
    _recent[:] = [mine, *(h for h in _recent if h.graph is not graph)][:_RECENT]
    return mine


def schedule_memo(graph: Graph, hb: HappensBefore) -> dict[object, object] | None:
    """Where an analysis of `graph` that reads only its schedule and values (names, ops,
    operands, attributes, types, bodies, streams, devices, inputs, weights, outputs: not offsets,
    lifetimes or spans) may remember its result: `hb.memo` when `hb` is `graph`'s own clocks,
    None for clocks given from elsewhere."""
    return hb.memo if hb.graph is graph else None


def _same_schedule(a: Graph, b: Graph) -> bool:
    """Whether `a` and `b` differ at most in annotations other than stream and device (and in
    spans): then their clocks, and all `schedule_memo` holds, are the same."""
    return differs_only_in_annotations(a, b, kept=("stream", "device"))
