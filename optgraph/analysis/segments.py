"""Weight segments, sizes and device-memory accounting shared by split-backends and plan-prefetch.

Nothing here is a pass. It answers the questions both offload passes, the report and the runtimes
ask of a printed graph:

- where each value lives (`value_backends`): a node's result lives on its `backend`, except that a
  `copy` puts its result on its `to` backend; inputs and weights are host arrays the runtime also
  stages on the device, so they live on both (a weight placed on the `host` lives only there);
  and how many splits (runs of one backend in issue order) a graph has (`count_splits`);
- which weights may be streamed and in which order (`weight_accesses`, `group_weights`,
  `pack_segments`): segments are runs of weights in first-use order whose readers lie in disjoint
  ranges of the issue order, so ring bytes a segment was copied to can be rewritten right after
  its last read;
- how much device memory a planned program needs (`device_memory`): arena (which holds the
  prefetch ring) + device-resident weights + device inputs;
- sizes as users write them (`parse_size("2GiB")`).

Complexity: O(V + E) for the analyses, O(W log W) to group W weights.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from optgraph.analysis.arena_packing import ALIGNMENT, align_up
from optgraph.analysis.prefetch_ring import ring_window
from optgraph.ir.graph import EVENT_OPS, Graph
from optgraph.ir.layout import alias_roots

SLOT_ALIGNMENT = ALIGNMENT  # bytes: every streamed weight starts on this boundary in the ring

_UNITS: Mapping[str, int] = {
    "": 1,
    "b": 1,
    "k": 1 << 10,
    "kib": 1 << 10,
    "kb": 10**3,
    "m": 1 << 20,
    "mib": 1 << 20,
    "mb": 10**6,
    "g": 1 << 30,
    "gib": 1 << 30,
    "gb": 10**9,
    "t": 1 << 40,
    "tib": 1 << 40,
    "tb": 10**12,
}
_SIZE_RE = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*$")


def parse_size(text: str) -> int:
    """Bytes from `"2GiB"`, `"512MiB"`, `"1.5GB"`, `"64K"` (K, M, G, T alone: binary), `"4096"`."""
    match = _SIZE_RE.match(str(text))
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _UNITS:
        raise ValueError(f"cannot read the size '{text}' (write e.g. 2GiB, 512MiB, 1.5GB or 4096)")
    return int(float(match.group(1)) * _UNITS[unit])


def format_size(nbytes: int) -> str:
    """`1.50 GiB`, `12.0 MiB`, `300 B`: for messages."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if nbytes >= scale:
            return f"{nbytes / scale:.2f} {unit}"
    return f"{nbytes} B"


# -- where values live --------------------------------------------------------------------------


def value_backends(graph: Graph) -> dict[str, frozenset[str]]:
    """Backends holding each value: {"cpu"}, {"cuda"} or both (inputs, device weights)."""
    both = frozenset({"cpu", "cuda"})
    homes: dict[str, frozenset[str]] = {i.name: both for i in graph.inputs}
    for w in graph.weights:
        homes[w.name] = frozenset({"cpu"}) if w.placement == "host" else both
    for node in graph.nodes:
        if node.is_event:
            continue
        if node.op == "copy":
            homes[node.name] = frozenset({str(node.attrs.get("to", "cuda"))})
        else:
            homes[node.name] = frozenset({node.ann.backend or "cuda"})
    return homes


def count_splits(graph: Graph) -> int:
    """Maximal runs of consecutive nodes (issue order) on one backend; copies and events join
    the run they sit in. An unsplit graph is one split."""
    splits, current = 0, None
    for node in graph.nodes:
        if node.is_event or node.op == "copy":
            continue
        backend = node.ann.backend or "cuda"
        if backend != current:
            splits, current = splits + 1, backend
    return splits


# -- weight accesses and segments ---------------------------------------------------------------


def weight_accesses(graph: Graph) -> dict[str, list[int]]:
    """For every weight, the sorted issue indices of the nodes reading it (also through views)."""
    roots = alias_roots(graph)
    weights = graph.weight_names()
    accesses: dict[str, list[int]] = {w: [] for w in weights}
    for i, node in graph.compute_nodes():
        for name in (node.name, *node.operands):
            root = roots[name][0] if name in roots else name
            if root in weights and (name != node.name or name in roots):
                accesses[root].append(i)
    return {w: sorted(set(a)) for w, a in accesses.items()}


@dataclass(frozen=True)
class Segment:
    """Weights streamed together, one after another in the ring, and their readers' issue range."""

    weights: tuple[str, ...]
    nbytes: int  # packed size in the ring (every weight aligned to SLOT_ALIGNMENT)
    first: int
    last: int


def group_weights(
    order: Iterable[str], accesses: Mapping[str, list[int]], sizes: Mapping[str, int]
) -> tuple[list[Segment], list[str]]:
    """Weights (in first-use order) merged into groups whose reader ranges do not overlap.

    Returns (groups, pinned). A weight read over a range that overlaps other weights' ranges (a
    tied embedding read at the start and the end) would chain every weight in between into one
    group; while the largest group holds more than half the bytes and several weights, the weight
    with the widest range is pinned (kept resident) instead, and the groups are formed again.
    """
    names = [w for w in order if accesses.get(w)]
    pinned: list[str] = []
    while True:
        groups = _merge_ranges([w for w in names if w not in pinned], accesses, sizes)
        total = sum(g.nbytes for g in groups)
        big = max(groups, key=lambda g: g.nbytes, default=None)
        if big is None or len(big.weights) < 2 or 2 * big.nbytes <= total:
            return groups, pinned
        widest = max(big.weights, key=lambda w: accesses[w][-1] - accesses[w][0])
        if accesses[widest][-1] - accesses[widest][0] == 0:
            return groups, pinned
        pinned.append(widest)


def _merge_ranges(
    names: list[str], accesses: Mapping[str, list[int]], sizes: Mapping[str, int]
) -> list[Segment]:
    ordered = sorted(names, key=lambda w: (accesses[w][0], accesses[w][-1]))
    runs: list[tuple[list[str], int, int, int]] = []  # (weights, bytes, first, last)
    for w in ordered:
        first, last = accesses[w][0], accesses[w][-1]
        if runs and first <= runs[-1][3]:
            ws, nbytes, start, end = runs[-1]
            ws.append(w)
            runs[-1] = (ws, nbytes + align_up(sizes[w]), start, max(end, last))
        else:
            runs.append(([w], align_up(sizes[w]), first, last))
    return [Segment(tuple(ws), n, a, b) for ws, n, a, b in runs]


def pack_segments(groups: list[Segment], target: int) -> list[Segment]:
    """Consecutive groups packed into segments of at most `target` bytes (a bigger group alone)."""
    runs: list[list[Segment]] = []
    size = 0
    for g in groups:
        if runs and size + g.nbytes <= target:
            runs[-1].append(g)
            size += g.nbytes
        else:
            runs.append([g])
            size = g.nbytes
    return [
        Segment(
            tuple(w for g in run for w in g.weights),
            sum(g.nbytes for g in run),
            run[0].first,
            run[-1].last,
        )
        for run in runs
    ]


SEGMENT_OVERHEAD_BYTES = 256 << 10  # ~5 us of PCIe per streamed segment: its events and launches


@dataclass(frozen=True)
class Layout:
    """The chosen split: segments, which of them stay resident, and the prefetch ring's bytes."""

    segments: list[Segment]
    kept: frozenset[int]  # indices (in `segments`) of the segments kept resident
    ring: int  # bytes of the prefetch ring the streamed segments are copied into, in turn
    depth: int  # the ring holds at least this many consecutive streamed segments

    @property
    def numbered(self) -> list[tuple[int, Segment]]:
        """The streamed segments in issue order, each with its number (index in `segments`)."""
        return [(i, s) for i, s in enumerate(self.segments) if i not in self.kept]

    @property
    def streamed(self) -> list[Segment]:
        return [s for _, s in self.numbered]


def choose_layout(
    groups: list[Segment], fits: Callable[[int, int], bool], depth: int, target: int | None
) -> Layout | None:
    """The layout for which `fits(resident bytes, ring bytes)` that streams the fewest bytes,
    counting `SEGMENT_OVERHEAD_BYTES` per streamed segment and the largest segment once more."""
    total = sum(g.nbytes for g in groups)
    if target is not None:
        targets = [target]
    else:
        biggest = max((g.nbytes for g in groups), default=0)
        targets, t = [], biggest
        while t < total:
            targets.append(t)
            t = max(t + SLOT_ALIGNMENT, int(t * 1.1))
        targets.append(total)
    best: tuple[int, int, Layout] | None = None
    for t in targets:
        segments = pack_segments(groups, t)
        layout = _fit(segments, fits, depth)
        if layout is None:
            continue
        streamed = [s.nbytes for s in layout.streamed]
        # The pipeline fills and drains by about one segment (the first copy nothing hides,
        # the last segment's compute after every copy): count the largest once.
        score = sum(streamed) + SEGMENT_OVERHEAD_BYTES * len(streamed) + max(streamed, default=0)
        if best is None or (score, -t) < best[:2]:
            best = (score, -t, layout)
    return None if best is None else best[2]


def spread(n: int, k: int) -> frozenset[int]:
    """`k` of `n` segment indices spread evenly, the first one included: which to keep resident.

    Why not the leading ones: the copy stream runs at most a ring ahead of the compute, so while a
    run of resident segments computes the ring soon has no free bytes and the copies idle; spread
    among the streamed ones, residents compute while the copy stream refills the ring bytes the
    streamed segments before them freed. Keeping the first lets compute start while the first
    copy runs.
    """
    return frozenset((j * n) // k for j in range(k)) if k else frozenset()


def _fit(segments: list[Segment], fits: Callable[[int, int], bool], depth: int) -> Layout | None:
    """The most segments kept resident (`spread`) such that `fits(resident, ring)`, the ring
    holding any `depth` consecutive streamed segments (`ring_window`: a big lm_head enlarges it by
    its own size only). Resident bytes grow with the count (not strictly), so a binary search
    finds it. O(n log n)."""
    n = len(segments)

    def layout(k: int) -> Layout | None:
        kept = spread(n, k)
        ring = ring_window([s.nbytes for i, s in enumerate(segments) if i not in kept], depth)
        resident = sum(segments[i].nbytes for i in kept)
        return Layout(segments, kept, ring, depth) if fits(resident, ring) else None

    if layout(0) is None:
        # The ring for streaming everything does not fit: keeping some segments may shrink them
        # (rare: the budget is nearly too small), so try every count. O(n^2).
        return next((f for k in range(1, n + 1) if (f := layout(k)) is not None), None)
    lo, hi = 0, n  # layout(lo) fits; find the largest k that does
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if layout(mid) is not None:
            lo = mid
        else:
            hi = mid - 1
    return layout(lo)


# -- device memory ------------------------------------------------------------------------------


BUFFER_ROUNDING = 512  # CuPy's pool rounds every device allocation up to this


@dataclass(frozen=True)
class DeviceMemory:
    """Device bytes a planned program needs. `arena` includes the prefetch ring; resident
    weights and inputs are counted as the CUDA runtime lays them out (each aligned to 256 bytes in
    one buffer), and each of the three buffers is rounded up as the allocator does."""

    arena: int
    slots: int
    resident_weights: int
    streamed_weights: int
    inputs: int

    @property
    def peak(self) -> int:
        parts = (self.arena, self.resident_weights, self.inputs)
        return sum(align_up(max(p, 1), BUFFER_ROUNDING) for p in parts)


def device_memory(graph: Graph) -> DeviceMemory:
    """Arena (max offset + size), ring bytes used (`slots`), device weights, device inputs.

    A weight is device-resident when a node that does not run on the CPU reads it directly (or
    through an aliasing view) and it is neither streamed (`segment` annotation) nor placed on the
    host. Every input has a device buffer (the runtime stages them all).
    """
    arena = 0
    slot_ranges = set()
    for n in graph.nodes:
        ann = n.ann
        if ann.offset is None:
            continue
        arena = max(arena, ann.offset + (ann.size or 0))
        if n.op == "prefetch":
            slot_ranges.add((ann.slot, ann.offset, ann.size))
    slot_bytes = 0
    if slot_ranges:
        lo = min(o for _, o, _ in slot_ranges)
        hi = max(o + (s or 0) for _, o, s in slot_ranges)
        slot_bytes = hi - lo
    kept = device_resident_weights(graph)
    resident = sum(align_up(w.type.nbytes) for w in graph.weights if w.name in kept)
    streamed = sum(w.type.nbytes for w in graph.weights if w.ann.segment is not None)
    inputs = sum(align_up(max(i.type.nbytes, 1)) for i in graph.inputs)
    return DeviceMemory(arena, slot_bytes, resident, streamed, inputs)


def read_on_device(graph: Graph) -> set[str]:
    """Inputs and weights a GPU kernel reads in place (directly or through an aliasing view).

    CPU nodes, prefetches and copies to the device read the host's arrays instead. O(V + E).
    """
    roots = alias_roots(graph)
    operands: set[str] = set()
    for node in graph.nodes:
        op = node.op
        if op in _NOT_ON_DEVICE and (op != "copy" or node.attrs.get("to", "cuda") == "cuda"):
            continue
        if node.ann.backend != "cpu":
            operands.update(node.operands)
    viewed = operands & roots.keys()
    names = operands - viewed
    names.update(roots[o][0] for o in viewed)
    return names


# Nodes that read no input or weight in place on the device: events, prefetches (from host
# memory), and copies to the device (a copy to the CPU is a device read).
_NOT_ON_DEVICE = EVENT_OPS | {"prefetch", "copy"}


def device_resident_weights(graph: Graph) -> set[str]:
    """Weights kept on the device: read there in place, placed `device`, not streamed."""
    on_device = read_on_device(graph)
    return {
        w.name
        for w in graph.weights
        if w.placement == "device" and w.ann.segment is None and w.name in on_device
    }


def host_read_weights(graph: Graph) -> set[str]:
    """Weights a runtime keeps in pinned host memory: streamed, host-placed, or read on the CPU."""
    roots = alias_roots(graph)
    names = {w.name for w in graph.weights if w.placement == "host" or w.ann.segment is not None}
    weights = graph.weight_names()
    for node in graph.nodes:
        if node.is_event or not (node.ann.backend == "cpu" or node.op in ("prefetch", "copy")):
            continue
        for operand in node.operands:
            root = roots[operand][0] if operand in roots else operand
            if root in weights and (node.op != "copy" or node.attrs.get("to") == "cuda"):
                names.add(root)
    return names


def host_values(graph: Graph) -> set[str]:
    """Node results that live in host memory: CPU results and copies to the CPU."""
    return {
        n.name
        for n in graph.nodes
        if not n.is_event
        and (n.ann.backend == "cpu" or (n.op == "copy" and n.attrs.get("to") == "cpu"))
    }


def host_weight_layout(graph: Graph) -> tuple[dict[str, int], int]:
    """Offsets of the `host_read_weights` in one pinned host buffer (declaration order, aligned)."""
    names = host_read_weights(graph)
    offsets: dict[str, int] = {}
    cursor = 0
    for w in graph.weights:
        if w.name in names:
            offsets[w.name] = cursor
            cursor += align_up(w.type.nbytes)
    return offsets, cursor
