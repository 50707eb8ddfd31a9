"""`plan-prefetch{budget=2GiB, depth=2, segment-bytes=auto, ring-bytes=auto, host-bandwidth=50GB,
device=h100, sync=false, times=FILE.json}`: stream weights that do not fit the GPU budget through
a ring of prefetch bytes.

When arena + device inputs + device weights exceed `budget`, the weights the GPU reads are cut into
segments (runs of weights in first-use order whose readers occupy disjoint ranges of the issue
order: layers, in a decoder). As many segments as the budget allows stay resident, spread evenly
among the streamed ones (`segments.spread`: leading residents starve the copy stream); the
streamed ones are copied every step from pinned host memory, in issue order, one after another
into a ring of bytes above the arena (`analysis.prefetch_ring`), on a dedicated copy stream, and
their readers read the copies:

    before: %q = matmul(%h, %l5.wq) : f16[1,4096] !{stream = 0, offset = 0, size = 8192}
    after:  %l5.wq.s = prefetch(%l5.wq) : f16[4096,4096] !{stream = 2, segment = 5, slot = 0, ..}
            record ^pf5.ready !{stream = 2}   wait ^pf5.ready !{stream = 0}
            %q = matmul(%h, %l5.wq.s) ..

Ordering, all of it record/wait events, so happens-before (and check-races) sees it:
- the prefetches of segment `n` wait for `^pfN.free.S`, recorded on every stream S right after its
  last read of the segments whose ring bytes they overwrite (their *occupants*): ring bytes are
  rewritten only after every read of them happens-before the copy;
- every stream reading segment `n` waits for `^pfN.ready` before its first read.
So a copy waits for as little compute as its bytes need: small segments (attention matrices) run
several ahead where `depth` equal slots of the largest would hold `depth` of them.

The ring: at least `depth` consecutive streamed segments fit it at once (`ring_window`; for equal
segments exactly `depth` slots), and `ring-bytes=auto` grows it into the room the budget leaves
and weighs ring bytes against resident segments: fewer residents stream more bytes but let the
copies run further ahead, which wins when compute and copying take about as long.
`analysis.prefetch_choice` estimates each trade (list schedule: compute by the roofline of
`device`, copies at `host-bandwidth` bytes/s)
and keeps the one closest to the best at every plausible error of the compute estimate. A size
(`ring-bytes=64MiB`) caps the growth and skips the trade (`0`: the least ring). The ring sits
above the planned arena, so prefetch results have `offset`/`size` like any buffer (`slot` is 0:
one ring), the planned and CUDA executors copy into them like any copy, and the arena-overlap race
check covers ring reuse. Peak device memory = arena (with the ring) + resident weights + device
inputs <= budget (`segments.device_memory`). Streamed weights get `!{segment = n}`.

`sync=true` (and the fallback, with a warning, when a ring of `depth` segments does not fit the
budget) copies each segment on the stream of its first reader, just before it, into a ring of the
largest segment: no overlap, the least memory. The IR rewrite lives in
`optgraph.analysis.prefetch_copies`, where `strip_prefetch` undoes it and `synchronous_prefetch`
re-plans it that way for when the ring cannot be allocated.

`times=FILE.json` (seconds by node name, measured on the device: `optgraph run --node-times
FILE.json` writes them from a run of the resident program) prices the compute of that
choice instead of the roofline, and adds the candidates that keep the segments of most bytes per
second of compute resident (`prefetch_choice.dense_resident`): the roofline put SD-1.5's UNet
step at 3.9 ms where it took 14.8 ms on the H200, and its error is not the same in every layer.

Segment size: `segment-bytes=auto` tries sizes from the largest weight group up to all weights
(x1.1 steps) and keeps the one streaming the fewest bytes, counting 256 KiB per streamed segment
(`segments.SEGMENT_OVERHEAD_BYTES`: its events and launch) and the largest segment once more (the
pipeline's fill and drain); a size such as `256MiB` fixes it.

Requires a memory plan (it reads the arena size) and refreshes `live`/`visible`. Does not handle:
weights read on the CPU or by an output, or only gathered from (`get_rows`: streaming a table to
read a few rows would copy all of it; place it on the `host` instead) -- those stay resident;
host-placed weights (split-backends copies those), several GPUs, reordering compute to make room,
splitting one weight over several copies. Complexity: O(V·k) for the clocks, O(C·S) to choose
segments (C candidate sizes, S segments), O(T·(V·k + X·V)) to weigh T ring trades with X compute
scales, O(V + E) to rewrite.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from optgraph.analysis.arena_packing import align_up
from optgraph.analysis.prefetch_choice import (
    dense_resident,
    fewer_resident,
    least_regret_layout,
)
from optgraph.analysis.prefetch_copies import insert_prefetches, strip_prefetch
from optgraph.analysis.schedule_estimate import profile_named
from optgraph.analysis.segments import (
    BUFFER_ROUNDING,
    SLOT_ALIGNMENT,
    Layout,
    choose_layout,
    device_memory,
    device_resident_weights,
    format_size,
    group_weights,
    parse_size,
    weight_accesses,
)
from optgraph.errors import OptGraphError
from optgraph.ir.graph import Graph
from optgraph.passes.base import Pass


class BudgetError(OptGraphError):
    """The budget cannot hold what must stay on the device plus one slot."""


MAX_DEPTH = 256  # segments a ring holds at least; more than the segments buys nothing


@dataclass(frozen=True)
class PlanPrefetchPass(Pass):
    name = "plan-prefetch"
    summary = "stream weights over the GPU budget through a ring of prefetch bytes on a copy stream"
    requires = ("memory-planned",)
    provides = ()

    budget: str = "0"
    depth: int = 2
    segment_bytes: str = "auto"
    ring_bytes: str = "auto"
    host_bandwidth: str = "50GB"
    device: str = "h100"
    sync: bool = False
    times: str = ""

    def __post_init__(self) -> None:
        if parse_size(self.budget) <= 0:
            raise ValueError("budget must be given, e.g. plan-prefetch{budget=2GiB}")
        if not 1 <= self.depth <= MAX_DEPTH:
            raise ValueError(f"depth must be between 1 and {MAX_DEPTH}, got {self.depth}")
        profile_named(self.device)  # raises ValueError naming the known devices
        if parse_size(self.host_bandwidth) <= 0:
            raise ValueError("host-bandwidth must be positive, e.g. host-bandwidth=50GB")
        for size in (self.segment_bytes, self.ring_bytes):
            if size != "auto":
                parse_size(size)

    def run(self, graph: Graph) -> Graph:
        graph = strip_prefetch(graph) if any(n.op == "prefetch" for n in graph.nodes) else graph
        budget = parse_size(self.budget)
        memory = device_memory(graph)
        if memory.peak <= budget:
            return graph
        accesses = weight_accesses(graph)
        streamable = _streamable(graph, accesses)
        sizes = {w.name: w.type.nbytes for w in graph.weights}
        groups, pinned = group_weights(streamable, accesses, sizes)
        movable = sum(g.nbytes for g in groups)
        grouped = {w for g in groups for w in g.weights}
        kept = sum(align_up(sizes[w]) for w in device_resident_weights(graph) - grouped)
        arena_base = align_up(memory.arena)
        # What stays whatever the layout, with the allocator's rounding of the arena and weight
        # buffers (see DeviceMemory.peak): resident segments and slots get the rest.
        inputs = align_up(max(memory.inputs, 1), BUFFER_ROUNDING)
        fixed = arena_base + kept + inputs

        def fits(resident: int, slots: int) -> bool:  # DeviceMemory.peak of the result
            arena = align_up(arena_base + slots, BUFFER_ROUNDING)
            return arena + align_up(max(kept + resident, 1), BUFFER_ROUNDING) + inputs <= budget

        target = None if self.segment_bytes == "auto" else parse_size(self.segment_bytes)
        sync = self.sync
        layout = None if sync else choose_layout(groups, fits, self.depth, target)
        if layout is None:
            layout = choose_layout(groups, fits, 1, target)
            if layout is not None and not sync:
                warnings.warn(
                    f"plan-prefetch: a ring of {self.depth} segments does not fit the budget "
                    f"{format_size(budget)}; falling back to synchronous copies (one slot)",
                    RuntimeWarning,
                    stacklevel=2,
                )
                sync = True
        if layout is None:
            smallest = max((g.nbytes for g in groups), default=0)
            raise BudgetError(
                f"plan-prefetch: budget {format_size(budget)} is too small: the arena, inputs and "
                f"weights that cannot be streamed{' (' + ', '.join(pinned) + ')' if pinned else ''}"
                f" need {format_size(fixed)}, and a ring of the largest weight group needs "
                f"{format_size(smallest)} more (streamable weights: {format_size(movable)})"
            )
        if not layout.streamed:
            return graph
        if not sync and self.ring_bytes == "auto":

            def grow(layout: Layout) -> Layout:
                return _grown_ring(layout, fits, None)

            candidates = fewer_resident(grow(layout), fits, grow)
            measured = load_times(self.times) if self.times else None
            if measured is not None:
                by_index = {
                    i: measured[n.name] for i, n in enumerate(graph.nodes) if n.name in measured
                }
                candidates += dense_resident(layout, fits, grow, by_index)
            copy_rate = (parse_size(self.host_bandwidth), profile_named(self.device))
            layout = least_regret_layout(
                graph, candidates, accesses, arena_base, copy_rate, measured
            )
        elif not sync:
            layout = _grown_ring(layout, fits, parse_size(self.ring_bytes))
        return insert_prefetches(graph, layout, accesses, arena_base, sync)


def load_times(path: str) -> dict[str, float]:
    """A `times=` file: a JSON object of node names and seconds (non-negative numbers)."""
    try:
        data = json.loads(Path(path).read_text())
    except OSError as e:
        raise OptGraphError(f"plan-prefetch: cannot read times file {path}: {e.strerror}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise OptGraphError(f"plan-prefetch: times file {path} is not JSON: {e}") from None
    if not isinstance(data, dict) or not all(
        isinstance(v, int | float) and not isinstance(v, bool) and 0 <= v < float("inf")
        for v in data.values()
    ):
        raise OptGraphError(
            f"plan-prefetch: times file {path} must be an object of node names and seconds"
        )
    return {str(k).lstrip("%"): float(v) for k, v in data.items()}


def _grown_ring(layout: Layout, fits: Callable[[int, int], bool], cap: int | None) -> Layout:
    """`layout` with its ring grown into the room the budget leaves (at most `cap` bytes): more
    ring lets copies run further ahead of the compute. Binary search over the ring size, in
    `SLOT_ALIGNMENT` steps, since `fits` is monotone in it."""
    resident = sum(s.nbytes for i, s in enumerate(layout.segments) if i in layout.kept)

    def allowed(steps: int) -> bool:
        ring = steps * SLOT_ALIGNMENT
        return fits(resident, ring) and (cap is None or ring <= cap)

    lo = layout.ring // SLOT_ALIGNMENT  # fits, or the layout would not have been chosen
    hi = lo + 1
    while allowed(hi):
        lo, hi = hi, 2 * hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if allowed(mid) else (lo, mid)
    return replace(layout, ring=max(layout.ring, lo * SLOT_ALIGNMENT))


def _streamable(graph: Graph, accesses: dict[str, list[int]]) -> list[str]:
    """Device weights read only by device nodes and not by an output, in first-use order."""
    outputs = set(graph.output_names())
    nodes = graph.nodes
    names = []
    for w in graph.weights:
        acc = accesses.get(w.name, [])
        if w.placement != "device" or not acc or w.name in outputs:
            continue
        readers = [nodes[i] for i in acc]
        if any(r.ann.backend == "cpu" or r.op == "copy" for r in readers):
            continue
        if any(r.name in outputs for r in readers if r.op in ("reshape", "transpose", "slice")):
            continue
        if all(r.op == "get_rows" for r in readers):
            continue  # a gather reads a few rows: streaming the whole table would copy it all
        names.append(w.name)
    return sorted(names, key=lambda w: accesses[w][0])
