"""The estimated schedule of a scheduled graph, from the op table's cost model.

Each node gets a duration from `ops.cost` and the roofline `estimate_seconds` of a device profile
(H100 or H200); aliasing views and events take no time. The host walks the nodes in issue order:

- a compute node on stream s starts when s is free, its data producers have finished (so an
  unsynchronized graph is never estimated faster than it can run); it occupies s until it ends;
- `record ^e` on s notes when s reaches it; `wait ^e` on s makes s idle until then, plus one
  launch overhead of the profile: the latency of a cross-stream dependency, so a fork and a join
  cost about two launches and a branch shorter than that gains nothing (assign-streams' fork
  cost model, `analysis/fork_cost.py`, weighs the same trade with measured latencies).

The host stream of split-backends is a stream like the others (its waits are its synchronization
with the GPU), so CPU nodes are estimated with the same cost model.

The critical path is the end of the last node (the longest path through data, stream order and
events), but never less than the device floor: all bytes at full memory bandwidth and all flops at
peak, since concurrent kernels share one memory system (a memory-bound decode step gains only the
launch overhead it hides). The estimated speedup is the one-stream time (sum of durations) over
it. `chrome_trace`
turns the schedule into a Chrome/Perfetto trace, one track per stream, events as flow arrows.
Launch overhead is counted per kernel on its own stream, which is optimistic for many streams.

Complexity O(V + E) after the per-node cost estimate.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate
from operator import attrgetter
from typing import Any

from optgraph.ir import ops
from optgraph.ir.graph import DATA_PREDECESSORS, EVENT_OPS, NODE_COSTS, Graph, Node, TensorType
from optgraph.ir.layout import ALIAS_OPS, is_alias
from optgraph.ir.ops import DEVICE_PROFILES, DeviceProfile

DEFAULT_DEVICE = "h100"


def profile_named(name: str) -> DeviceProfile:
    """The device profile called `name`, case-insensitive (`h100`, `H200`)."""
    for key, profile in DEVICE_PROFILES.items():
        if key.lower() == name.lower():
            return profile
    known = ", ".join(k.lower() for k in DEVICE_PROFILES)
    raise ValueError(f"unknown device '{name}' (known: {known})")


def data_predecessors(graph: Graph) -> list[list[int]]:
    """For each node index, the distinct indices of the nodes producing its operands. Computed
    once per graph object (kept in its `__dict__`, outside the fields, like its value types);
    each caller gets lists of its own."""
    return [list(p) for p in _data_predecessors(graph)]


def kept_data_predecessors(graph: Graph) -> Sequence[Sequence[int]]:
    """`data_predecessors` as kept on the graph, without copying them: for callers that only
    read them."""
    return _data_predecessors(graph)


def _data_predecessors(graph: Graph) -> list[list[int]]:
    """`data_predecessors` as kept on the graph: for callers that only read them."""
    preds: list[list[int]] | None = graph.__dict__.get(DATA_PREDECESSORS)
    if preds is None:
        producers = graph.producers()
        preds = []
        for node in graph.nodes:
            mine: list[int] = []
            for o in node.operands:
                p = producers.get(o)
                if p is not None and p not in mine:
                    mine.append(p)
            preds.append(mine)
        graph.__dict__[DATA_PREDECESSORS] = preds
    return preds


def node_costs(graph: Graph) -> list[ops.Cost | None]:
    """Bytes and flops of every node; None for events and aliasing views (no kernel). Computed
    once per graph object, like `data_predecessors`; each caller gets a list of its own."""
    known: list[ops.Cost | None] | None = graph.__dict__.get(NODE_COSTS)
    if known is None:
        known = graph.__dict__[NODE_COSTS] = _node_costs(graph)
    return list(known)


def _node_costs(graph: Graph) -> list[ops.Cost | None]:
    types = graph.value_types()
    alike: dict[tuple[object, ...], ops.Cost] = {}  # see `ops.cost`
    out: list[ops.Cost | None] = []
    append = out.append
    for node in graph.nodes:
        op = node.op
        if op in EVENT_OPS or node.type is None:
            append(None)
            continue
        operands = node.operands
        operand_types = [types[o] for o in operands if o in types]
        # `is_alias` only for the ops that may alias (its own first test)
        if op in ALIAS_OPS and operands and is_alias(node, operand_types[0]):
            append(None)
            continue
        append(_cost(node, operand_types, alike))
    return out


def _cost(
    node: Node,
    operand_types: list[TensorType],
    alike: dict[tuple[object, ...], ops.Cost] | None = None,
) -> ops.Cost:
    """`ops.cost` of `node`, remembered on the node for these operand types: the cost of a fused
    node infers its whole body, and assign-streams and the report ask for the same nodes' costs
    several times (`Node.with_ann` keeps the memo)."""
    assert node.type is not None
    key = tuple(operand_types)
    facts = node.type_facts()
    memo = facts.get("cost")
    if memo is not None and memo[0] == key:
        found: ops.Cost = memo[1]
        return found
    cost = ops.cost(node, operand_types, node.type, alike)
    facts["cost"] = (key, cost)
    return cost


def node_seconds(
    graph: Graph, profile: DeviceProfile, costs: Sequence[ops.Cost | None] | None = None
) -> list[float]:
    """Estimated run time of every node; events and aliasing views take none. `costs`: the
    graph's `node_costs`, where the caller has them. Nodes alike share one cost object
    (`node_costs`), so each object's time is estimated once per dtype."""
    known: dict[tuple[int, str], float] = {}
    out: list[float] = []
    for node, cost in zip(graph.nodes, node_costs(graph) if costs is None else costs):
        if cost is None:
            out.append(0.0)
            continue
        dtype = node.type.dtype  # type: ignore[union-attr]
        seconds = known.get((id(cost), dtype))
        if seconds is None:
            seconds = known[(id(cost), dtype)] = ops.estimate_seconds(cost, dtype, profile)
        out.append(seconds)
    return out


def device_floor(
    graph: Graph, profile: DeviceProfile, costs: Sequence[ops.Cost | None] | None = None
) -> float:
    """Seconds the whole graph needs at least on one device, however many streams run: all bytes
    at full memory bandwidth, all flops at peak (concurrent kernels share both)."""
    moved, compute = 0.0, 0.0
    for node, cost in zip(graph.nodes, node_costs(graph) if costs is None else costs):
        if cost is None or node.type is None:
            continue
        f16 = node.type.dtype in ("f16", "bf16")
        moved += cost.bytes / profile.memory_bandwidth
        compute += cost.flops / (profile.peak_flops_f16 if f16 else profile.peak_flops_f32)
    return max(moved, compute)


def asap(preds: Sequence[Sequence[int]], seconds: Sequence[float]) -> list[float]:
    """Earliest start of every node with unlimited streams (data edges only). O(V + E)."""
    start = [0.0] * len(preds)
    finish = [0.0] * len(preds)
    for v, ps in enumerate(preds):
        s = max((finish[p] for p in ps), default=0.0)
        start[v] = s
        finish[v] = s + seconds[v]
    return start


@dataclass(frozen=True)
class ScheduleEstimate:
    """Per-node start and end (seconds) of the estimated schedule; events get their time too."""

    start: list[float]
    end: list[float]
    serial_s: float
    floor_s: float = 0.0  # `device_floor`: the shared memory system and compute units

    @property
    def critical_path_s(self) -> float:
        """The list schedule's end, but never below the device floor."""
        return max(max(self.end, default=0.0), self.floor_s)

    @property
    def critical_path_us(self) -> float:
        return self.critical_path_s * 1e6

    @property
    def speedup(self) -> float:
        """One-stream time over the estimated critical path (1.0 for an empty graph)."""
        cp = self.critical_path_s
        return self.serial_s / cp if cp > 0 else 1.0


_OP = attrgetter("op")
_STREAM = attrgetter("ann.stream")


def estimate_schedule(
    graph: Graph,
    profile: DeviceProfile | str = DEFAULT_DEVICE,
    seconds: Sequence[float] | None = None,
) -> ScheduleEstimate:
    """List-schedule `graph` in issue order on its streams (see the module docstring)."""
    if isinstance(profile, str):
        profile = profile_named(profile)
    costs = node_costs(graph)
    durations = list(seconds) if seconds is not None else node_seconds(graph, profile, costs)
    nodes = graph.nodes
    if EVENT_OPS.isdisjoint(map(_OP, nodes)) and not any(map(_STREAM, nodes)):
        # One stream, no events: each node starts when the one before it ends, which is after
        # all its producers end (issued before it, on the same stream): the same sums.
        ends = list(accumulate(durations, initial=0.0))
        return ScheduleEstimate(
            ends[:-1], ends[1:], sum(durations), device_floor(graph, profile, costs)
        )
    preds = _data_predecessors(graph)
    free: dict[int, float] = {}
    recorded: dict[str, float] = {}
    start = [0.0] * len(graph.nodes)
    end = [0.0] * len(graph.nodes)
    launch = profile.launch_overhead
    for i, node in enumerate(graph.nodes):
        s = node.ann.stream or 0
        at = free.get(s, 0.0)
        op = node.op
        if op == "record":
            recorded[node.name] = at
            start[i] = end[i] = at
            continue
        if op == "wait":
            if node.name in recorded:
                at = max(at, recorded[node.name] + launch)
            free[s] = start[i] = end[i] = at
            continue
        for p in preds[i]:
            at = max(at, end[p])
        start[i], end[i] = at, at + durations[i]
        free[s] = end[i]
    return ScheduleEstimate(start, end, sum(durations), device_floor(graph, profile, costs))


def chrome_trace(graph: Graph, estimate: ScheduleEstimate) -> dict[str, Any]:
    """A Chrome/Perfetto trace (`chrome://tracing`, ui.perfetto.dev): one track per stream."""
    events: list[dict[str, Any]] = [
        {"ph": "M", "name": "process_name", "pid": 1, "args": {"name": f"optgraph {graph.name}"}}
    ]
    for s in sorted({n.stream for n in graph.nodes} | {0}):
        events.append(
            {"ph": "M", "name": "thread_name", "pid": 1, "tid": s, "args": {"name": f"stream {s}"}}
        )
    flow_ids: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        ts = estimate.start[i] * 1e6
        base = {"pid": 1, "tid": node.stream, "ts": ts}
        if node.is_event:
            events.append({**base, "ph": "i", "s": "t", "name": f"{node.op} ^{node.name}"})
            flow = flow_ids.setdefault(node.name, len(flow_ids))
            phase = {"ph": "s"} if node.op == "record" else {"ph": "f", "bp": "e"}
            events.append({**base, **phase, "id": flow, "name": f"^{node.name}", "cat": "event"})
            continue
        events.append(
            {
                **base,
                "ph": "X",
                "name": f"%{node.name}",
                "cat": node.op,
                "dur": (estimate.end[i] - estimate.start[i]) * 1e6,
                "args": {"op": node.op, "type": str(node.type), "stream": node.stream},
            }
        )
    return {"traceEvents": events, "displayTimeUnit": "ns"}


def list_schedule(
    preds: Sequence[Sequence[int]],
    seconds: Sequence[float],
    streams: Sequence[int],
    latency: float = 0.0,
) -> list[float]:
    """Start times when nodes run in index order on their streams, after their producers (plus
    `latency` for a producer on another stream). O(V + E)."""
    free: dict[int, float] = {}
    start = [0.0] * len(preds)
    finish = [0.0] * len(preds)
    for v, ps in enumerate(preds):
        s = streams[v]
        at = max(
            [free.get(s, 0.0)] + [finish[p] + (latency if streams[p] != s else 0.0) for p in ps]
        )
        start[v], finish[v] = at, at + seconds[v]
        free[s] = finish[v]
    return start


@dataclass(frozen=True)
class StreamFigures:
    """The concurrency figures of the compile report."""

    width: int  # maximum antichain of the data DAG: the most ops that may run at once
    critical_path_us: float
    estimated_speedup: float


def stream_figures(graph: Graph, profile: DeviceProfile | str = DEFAULT_DEVICE) -> StreamFigures:
    """Width, estimated critical path and speedup over one stream. O((V + E)·C) for the width."""
    from optgraph.analysis.chain_cover import width

    has_events = not EVENT_OPS.isdisjoint(map(_OP, graph.nodes))
    plain = (
        graph.with_nodes(n for n in graph.nodes if n.op not in EVENT_OPS) if has_events else graph
    )
    estimate = estimate_schedule(graph, profile)
    return StreamFigures(
        width(_data_predecessors(plain)), estimate.critical_path_us, estimate.speedup
    )
