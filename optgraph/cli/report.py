"""The figures `optgraph compile` reports, computed from what the compiled graph shows.

Every figure is read off the graph itself (annotations, event nodes, copy nodes), never from
pipeline history, so a report of a dumped and re-parsed graph is the same report. A figure whose
pass has not run is `None` (JSON `null`, shown as "-" in the table):

    before: %a = exp(%x) : f32[4]                     (no passes run)
    after:  Report(ops=1, streams=None, arena_bytes=None, ...)

    before: %a = exp(%x) : f32[4] !{stream = 1, offset = 0, size = 16}
    after:  Report(ops=1, streams=1, arena_bytes=16, no_reuse_bytes=16, ...)

To add a figure: add a field to `Report` (the JSON keys are the field names, in order), compute it
in `compute_report`, and give it a row label in `ROW_LABELS`. Figures that need analyses of their
own (memory lower bound) are left `None` here until their module exists. The concurrency figures
(width, critical path and speedup on the H100 cost model) come from `schedule_estimate`, races
from `analysis.races.find_races`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields

from optgraph.analysis.arena_packing import align_up
from optgraph.analysis.memory_bounds import device_arena_bytes, device_weight_bytes, memory_figures
from optgraph.analysis.races import find_races
from optgraph.analysis.schedule_estimate import stream_figures
from optgraph.analysis.segments import count_splits, device_memory
from optgraph.ir.graph import EVENT_OPS, Graph, Node
from optgraph.ir.layout import alias_roots


@dataclass(frozen=True)
class Report:
    """The compile report. Field order is the JSON key order."""

    ops: int
    fused_groups: int
    streams: int | None
    events: int
    waits: int
    width: int | None
    arena_bytes: int | None
    memory_lower_bound_bytes: int | None
    concurrency_bound_bytes: int | None
    no_reuse_bytes: int | None
    stream_extra_bytes: int | None
    splits: int | None
    cpu_ops: int | None
    copies: int | None
    streamed_bytes: int | None
    peak_device_bytes: int | None
    critical_path_us: float | None
    estimated_speedup: float | None
    races: int | None
    compile_seconds: float | None
    devices: int | None = None  # several devices only: then the two rows below, per device
    arena_bytes_per_device: tuple[int, ...] | None = None
    weight_bytes_per_device: tuple[int, ...] | None = None

    def to_dict(self) -> dict[str, float | tuple[int, ...] | None]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=2) + "\n"

    def rows(self) -> list[tuple[str, str]]:
        """(label, formatted value) for the report table, in field order."""
        shown = [f for f in fields(self) if f.name not in _DEVICE_ROWS or self.devices is not None]
        return [(ROW_LABELS[f.name], _format(f.name, getattr(self, f.name))) for f in shown]


_DEVICE_ROWS = ("devices", "arena_bytes_per_device", "weight_bytes_per_device")
ROW_LABELS: dict[str, str] = {
    "ops": "ops",
    "fused_groups": "fused groups",
    "streams": "streams",
    "events": "events (record)",
    "waits": "waits",
    "width": "width (max antichain)",
    "arena_bytes": "arena bytes",
    "memory_lower_bound_bytes": "memory lower bound",
    "concurrency_bound_bytes": "concurrency bound",
    "no_reuse_bytes": "bytes without reuse",
    "stream_extra_bytes": "extra bytes for streams",
    "splits": "splits (cpu/cuda runs)",
    "cpu_ops": "ops on cpu",
    "copies": "copies",
    "streamed_bytes": "streamed weight bytes",
    "peak_device_bytes": "peak device bytes",
    "critical_path_us": "critical path (us)",
    "estimated_speedup": "speedup over 1 stream (est.)",
    "races": "races",
    "compile_seconds": "compile time (s)",
    "devices": "devices",
    "arena_bytes_per_device": "arena bytes per device",
    "weight_bytes_per_device": "weight bytes per device",
}


def _format(name: str, value: float | tuple[int, ...] | None) -> str:
    if value is None:
        return "-"
    if isinstance(value, tuple):
        return " / ".join(f"{v:,}" for v in value)
    if isinstance(value, float):
        if name == "estimated_speedup":
            return f"{value:.2f}x"
        return f"{value:.3f}" if name == "compile_seconds" else f"{value:.1f}"
    if name.endswith("bytes"):
        return f"{value:,}"
    return str(value)


def _result_bytes(node: Node) -> int:
    """Bytes a node's result reserves: the planned size, else its type's size."""
    if node.ann.size is not None:
        return node.ann.size
    return node.type.nbytes if node.type is not None else 0


@dataclass
class _Counts:
    """What one walk over the nodes counts for the report."""

    ops: int = 0
    fused: int = 0
    events: int = 0
    waits: int = 0
    copies: int = 0
    cpu_ops: int = 0
    has_backends: bool = False
    planned: bool = False
    arena: int = 0
    no_reuse: int = 0
    streams: set[int] = field(default_factory=set)
    annotated_streams: bool = False


def _count(graph: Graph) -> _Counts:
    """The node counts, the streams used, the planned arena's top and the bytes of every buffer
    (a compute node's result that is no aliasing view) unshared, in one walk. O(V)."""
    c = _Counts()
    streams = c.streams
    aliases = alias_roots(graph)
    for n in graph.nodes:
        op, ann = n.op, n.ann
        stream = ann.stream
        if stream is not None:
            c.annotated_streams = True
        if op in EVENT_OPS:
            c.events += op == "record"
            c.waits += op == "wait"
            continue
        c.ops += 1
        streams.add(0 if stream is None else stream)
        if op == "fused":
            c.fused += 1
        elif op == "copy":
            c.copies += 1
        if ann.backend is not None:
            c.has_backends = True
            c.cpu_ops += ann.backend == "cpu"
        is_buffer = n.name not in aliases
        if is_buffer or ann.offset is not None:
            nbytes = _result_bytes(n)
            c.no_reuse += nbytes if is_buffer else 0
            if ann.offset is not None:
                c.planned = True
                c.arena = max(c.arena, ann.offset + nbytes)
    return c


def compute_report(graph: Graph, compile_seconds: float | None = None) -> Report:
    """The figures of `graph` (normally the result of the compile pipeline). O(V) plus the
    happens-before and width analyses (O((V + E)·k))."""
    c = _count(graph)
    planned = c.planned
    # L, the antichain bound and the one-stream plan: optgraph.analysis.memory_bounds.
    bounds = memory_figures(graph, antichain_limit=5_000) if planned else {}
    streamed = _streamed_weight_bytes(graph)
    concurrency = stream_figures(graph) if c.ops else None
    return Report(
        ops=c.ops,
        fused_groups=c.fused,
        streams=len(c.streams) if c.annotated_streams else None,
        events=c.events,
        waits=c.waits,
        width=concurrency.width if concurrency else None,
        arena_bytes=c.arena if planned else None,
        memory_lower_bound_bytes=bounds.get("memory_lower_bound_bytes"),
        concurrency_bound_bytes=bounds.get("concurrency_bound_bytes"),
        no_reuse_bytes=c.no_reuse if planned else None,
        stream_extra_bytes=bounds.get("stream_extra_bytes"),
        splits=count_splits(graph) if c.has_backends else None,
        cpu_ops=c.cpu_ops if c.has_backends else None,
        copies=c.copies if c.has_backends or c.copies else None,
        streamed_bytes=streamed,
        # arena (with prefetch slots) + device-resident weights + device inputs; with several
        # devices, the largest device's
        peak_device_bytes=_peak_device_bytes(graph) if planned else None,
        critical_path_us=concurrency.critical_path_us if concurrency else None,
        estimated_speedup=concurrency.estimated_speedup if concurrency else None,
        races=len(find_races(graph)),
        compile_seconds=compile_seconds,
        devices=graph.device_count() if graph.device_count() > 1 else None,
        **_device_figures(graph),
    )


def _peak_device_bytes(graph: Graph) -> int:
    """Arena, resident weights and inputs of the device that needs the most."""
    if graph.device_count() == 1:
        return device_memory(graph).peak
    arenas = device_arena_bytes(graph) or tuple(0 for _ in range(graph.device_count()))
    weights = device_weight_bytes(graph)
    inputs = [0] * graph.device_count()
    for i in graph.inputs:
        for d in i.ann.devices:
            inputs[d] += align_up(max(i.type.nbytes, 1))
    return max(a + w + x for a, w, x in zip(arenas, weights, inputs))


def _device_figures(graph: Graph) -> dict[str, tuple[int, ...] | None]:
    """Arena and weight bytes per device: only for a graph over several devices."""
    if graph.device_count() == 1:
        return {}
    return {
        "arena_bytes_per_device": device_arena_bytes(graph),
        "weight_bytes_per_device": device_weight_bytes(graph),
    }


def _streamed_weight_bytes(graph: Graph) -> int | None:
    """Bytes of weights streamed in from host memory: prefetched or assigned a segment."""
    prefetched = {n.operands[0] for n in graph.nodes if n.op == "prefetch" and n.operands}
    streamed = [w for w in graph.weights if w.name in prefetched or w.ann.segment is not None]
    if not streamed and not prefetched:
        return None
    return sum(w.type.nbytes for w in streamed)
