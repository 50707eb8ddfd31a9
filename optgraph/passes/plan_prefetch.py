"""`plan-prefetch{budget=2GiB, depth=2, segment-bytes=auto, sync=false}`: stream weights that do
not fit the GPU budget through a pool of prefetch slots.

When arena + device inputs + device weights exceed `budget`, the weights the GPU reads are cut into
segments (runs of weights in first-use order whose readers occupy disjoint ranges of the issue
order: layers, in a decoder). Leading segments stay resident as far as the budget allows; each
later segment `n` is copied every step from pinned host memory into slot `n mod depth` on a
dedicated copy stream, and its readers read the copy:

    before: %q = matmul(%h, %l5.wq) : f16[1,4096] !{stream = 0, offset = 0, size = 8192}
    after:  %l5.wq.s = prefetch(%l5.wq) : f16[4096,4096] !{stream = 2, segment = 5, slot = 1, ..}
            record ^pf5.ready !{stream = 2}   wait ^pf5.ready !{stream = 0}
            %q = matmul(%h, %l5.wq.s) ..

Ordering, all of it record/wait events, so happens-before (and check-races) sees it:
- the prefetches of segment `n` wait for `^pfN.free.S`, recorded on every stream S right after its
  last read of slot `n mod depth`'s previous occupant (segment `n - depth`): a slot is rewritten
  only after every read of it happens-before the copy;
- every stream reading segment `n` waits for `^pfN.ready` before its first read.
Segment `n + 1`'s copy thus overlaps segment `n`'s compute (depth 2: double buffering).

The slots are `depth` regions of `slot bytes` (the largest streamed segment) placed above the
planned arena, so prefetch results have `offset`/`size` like any buffer, the planned and CUDA
executors copy into them like any copy, and the arena-overlap race check covers slot reuse. Peak
device memory = arena (with slots) + resident weights + device inputs <= budget
(`segments.device_memory`). Streamed weights get `!{segment = n}` on their declaration.

`sync=true` (and the fallback, with a warning, when `depth` slots do not fit the budget) copies
each segment on the stream of its first reader, just before it, into one slot: no overlap, the
least memory. `strip_prefetch` undoes the pass so a runtime can re-plan synchronously when the
slot pool cannot be allocated.

Segment size: `segment-bytes=auto` tries sizes from the largest weight group up to all weights
(x1.1 steps) and keeps the one streaming the fewest bytes, counting 256 KiB per streamed segment
(`segments.SEGMENT_OVERHEAD_BYTES`: its events and launch); a size such as `256MiB` fixes it.

Runs after plan-memory (it reads the arena size) and refreshes `live`/`visible`. Does not handle:
weights read on the CPU or by an output, or only gathered from (`get_rows`: streaming a table to
read a few rows would copy all of it; place it on the `host` instead) -- those stay resident;
host-placed weights (split-backends copies those), several GPUs, reordering compute to make room.
Complexity: O(V·k) for the clocks, O(C·S·depth) to choose segments (C candidate sizes, S
segments), O(V + E) to rewrite.
"""

from __future__ import annotations

import re
import warnings
from dataclasses import dataclass, replace

from optgraph.analysis.happens_before import HappensBefore
from optgraph.analysis.segments import (
    BUFFER_ROUNDING,
    Layout,
    Segment,
    align_up,
    choose_layout,
    device_memory,
    device_resident_weights,
    format_size,
    group_weights,
    parse_size,
    weight_accesses,
)
from optgraph.errors import OptGraphError
from optgraph.ir.graph import Annotations, Graph, Node
from optgraph.passes.analyze_lifetimes import annotate_lifetimes, compute_lifetimes
from optgraph.passes.base import Pass

EVENT_PREFIX = "pf"  # events made by this pass are named ^pf<N>.ready / ^pf<N>.free.<stream>
_EVENT_RE = re.compile(rf"^{EVENT_PREFIX}[0-9]+\.(ready|free\.[0-9]+)[0-9]*$")


class BudgetError(OptGraphError):
    """The budget cannot hold what must stay on the device plus one slot."""


def _unique(base: str, taken: set[str]) -> str:
    name, k = base, 1
    while name in taken:
        name, k = f"{base}{k}", k + 1
    taken.add(name)
    return name


def strip_prefetch(graph: Graph) -> Graph:
    """The graph before plan-prefetch: no prefetch nodes or ^pf events, readers read weights."""
    source = {n.name: n.operands[0] for n in graph.nodes if n.op == "prefetch"}
    nodes = []
    for node in graph.nodes:
        if node.op == "prefetch" or (node.is_event and _EVENT_RE.match(node.name)):
            continue
        if any(o in source for o in node.operands):
            node = replace(node, operands=tuple(source.get(o, o) for o in node.operands))
        nodes.append(node)
    weights = tuple(replace(w, ann=replace(w.ann, segment=None)) for w in graph.weights)
    return replace(graph, nodes=tuple(nodes), weights=weights)


def with_vram_budget(pipeline: str, budget: str, depth: int | None = None) -> str:
    """`pipeline` (with `default` expanded) ending in a memory plan, then `plan-prefetch`.

    What `optgraph compile/run --vram-budget SIZE` runs: analyze-lifetimes,plan-memory are
    appended when the pipeline does not plan memory, and a plan-prefetch already in it is replaced.
    """
    from optgraph.errors import PipelineError
    from optgraph.passes.manager import DEFAULT_PIPELINE, parse_pipeline

    try:
        parse_size(budget)
    except ValueError as err:
        raise PipelineError(f"--vram-budget: {err}") from None
    text = DEFAULT_PIPELINE if pipeline.strip() == "default" else pipeline
    passes = [p for p in parse_pipeline(text) if p.name != "plan-prefetch"]
    parts = [s for s in _split_pipeline(text) if not s.strip().startswith("plan-prefetch")]
    if not any(p.name == "plan-memory" for p in passes):
        parts += ["analyze-lifetimes", "plan-memory"]
    options = f"budget={budget}" + ("" if depth is None else f",depth={depth}")
    return ",".join(parts + [f"plan-prefetch{{{options}}}"])


def _split_pipeline(text: str) -> list[str]:
    """Top-level comma-separated items of a pipeline string (options in braces kept whole)."""
    items, depth, current = [], 0, ""
    for ch in text:
        depth += ch == "{"
        depth -= ch == "}"
        if ch == "," and depth == 0:
            items.append(current.strip())
            current = ""
        else:
            current += ch
    if current.strip():
        items.append(current.strip())
    return [i for i in items if i]


def synchronous_prefetch(graph: Graph) -> Graph:
    """The same streamed segments copied synchronously through one slot (no budget needed).

    What a runtime falls back to when the slot pool of `graph` cannot be allocated: the arena
    shrinks by (depth - 1) slots and every copy runs on its reader's stream right before it.
    """
    numbers: dict[int, list[str]] = {}
    for w in graph.weights:
        if w.ann.segment is not None:
            numbers.setdefault(w.ann.segment, []).append(w.name)
    if not numbers:
        return graph
    base = strip_prefetch(graph)
    accesses = weight_accesses(base)
    segments = []
    for number in sorted(numbers):
        names = tuple(sorted(numbers[number], key=lambda w: accesses[w][0]))
        reads = [i for w in names for i in accesses[w]]
        size = sum(align_up(t.nbytes) for w in base.weights if w.name in names for t in [w.type])
        segments.append(Segment(names, size, min(reads), max(reads)))
    first = min(numbers)
    layout = Layout([segments[0]] * first + segments, first, (max(s.nbytes for s in segments),))
    return _rewrite(base, layout, accesses, align_up(device_memory(base).arena), True)


@dataclass(frozen=True)
class PlanPrefetchPass(Pass):
    name = "plan-prefetch"
    summary = "stream weights over the GPU budget through `depth` prefetch slots on a copy stream"
    requires = ("memory-planned",)
    provides = ()

    budget: str = "0"
    depth: int = 2
    segment_bytes: str = "auto"
    sync: bool = False

    def __post_init__(self) -> None:
        if parse_size(self.budget) <= 0:
            raise ValueError("budget must be given, e.g. plan-prefetch{budget=2GiB}")
        if self.depth < 1:
            raise ValueError(f"depth must be at least 1, got {self.depth}")
        if self.segment_bytes != "auto":
            parse_size(self.segment_bytes)

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
                    f"plan-prefetch: {self.depth} slots do not fit the budget "
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
                f" need {format_size(fixed)}, and one slot for the largest weight group needs "
                f"{format_size(smallest)} more (streamable weights: {format_size(movable)})"
            )
        if not layout.streamed:
            return graph
        return _rewrite(graph, layout, accesses, arena_base, sync)


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


def _rewrite(
    graph: Graph,
    layout: Layout,
    accesses: dict[str, list[int]],
    arena_base: int,
    sync: bool,
) -> Graph:
    """Insert the prefetch nodes and events, point readers at the copies, annotate, re-analyze."""
    nodes = graph.nodes
    hb = HappensBefore(graph)
    taken = {n.name for n in nodes} | {i.name for i in graph.inputs} | graph.weight_names()
    has_backends = any(n.ann.backend is not None for n in nodes if not n.is_event)
    backend = "cuda" if has_backends else None
    copy_stream = max((n.stream for n in nodes), default=0) + 1
    types = {w.name: w.type for w in graph.weights}

    before: dict[int, list[Node]] = {}  # issue index -> nodes inserted just before it
    after: dict[int, list[Node]] = {}  # issue index -> nodes inserted just after it
    renamed: dict[str, str] = {}
    streamed: dict[str, int] = {}
    depth = 1 if sync else layout.depth
    sizes = (max(layout.slot_sizes),) if sync else layout.slot_sizes
    slot_base = [arena_base + sum(sizes[:k]) for k in range(len(sizes))]
    for z, segment in enumerate(layout.streamed):
        number = layout.resident + z
        slot = z % depth
        readers = sorted({i for w in segment.weights for i in accesses[w]})
        first = readers[0]
        stream = nodes[first].stream if sync else copy_stream
        group: list[Node] = []
        # Wait until every read of the slot's previous occupant happens-before the copy.
        if z >= depth:
            previous = layout.streamed[z - depth]
            old = sorted({i for w in previous.weights for i in accesses[w]})
            last_on: dict[int, int] = {}
            for i in old:
                last_on[nodes[i].stream] = i
            lasts = [i for s, i in last_on.items() if s != stream]
            lasts = [i for i in lasts if not any(hb.ordered(i, j) for j in lasts)]
            if sync:
                lasts = [i for i in lasts if not hb.ordered(i, first)]
            for i in lasts:
                event = _unique(f"{EVENT_PREFIX}{number}.free.{nodes[i].stream}", taken)
                after.setdefault(i, []).append(_event("record", event, nodes[i].stream, nodes[i]))
                group.append(_event("wait", event, stream, nodes[i]))
        offset = slot_base[slot]
        for w in segment.weights:
            name = _unique(f"{w}.s", taken)
            renamed[w] = name
            streamed[w] = number
            group.append(
                Node(
                    name,
                    "prefetch",
                    (w,),
                    {},
                    types[w],
                    Annotations(
                        stream=stream,
                        backend=backend,
                        offset=offset,
                        size=align_up(types[w].nbytes),
                        segment=number,
                        slot=slot,
                    ),
                    span=nodes[first].span,
                )
            )
            offset += align_up(types[w].nbytes)
        # Every stream reading the segment waits for its copies before its first read.
        first_on: dict[int, int] = {}
        for i in readers:
            first_on.setdefault(nodes[i].stream, i)
        waiting = [(s, i) for s, i in first_on.items() if s != stream]
        if waiting:
            event = _unique(f"{EVENT_PREFIX}{number}.ready", taken)
            group.append(_event("record", event, stream, nodes[first]))
            for s, i in waiting:
                before.setdefault(i, []).append(_event("wait", event, s, nodes[i]))
        if sync:
            # Just before the first read, ahead of that read's other inserted waits.
            before.setdefault(first, [])[:0] = group
        else:
            # At the start for the first `depth` segments, else right after the last read (and
            # its free record) of the slot's previous occupant.
            anchor = max(old) if z >= depth else -1
            after.setdefault(anchor, []).extend(group)

    out: list[Node] = list(after.get(-1, []))
    for i, node in enumerate(nodes):
        out.extend(before.get(i, []))
        if any(o in renamed for o in node.operands):
            node = replace(node, operands=tuple(renamed.get(o, o) for o in node.operands))
        out.append(node)
        out.extend(after.get(i, []))
    weights = tuple(
        replace(w, ann=replace(w.ann, segment=streamed[w.name])) if w.name in streamed else w
        for w in graph.weights
    )
    result = replace(graph, nodes=tuple(out), weights=weights)
    return annotate_lifetimes(result, compute_lifetimes(result))


def _event(op: str, event: str, stream: int, like: Node) -> Node:
    """A record/wait on a GPU stream (streamed weights are never read on the host stream)."""
    return Node(event, op, (), {}, None, Annotations(stream=stream), span=like.span)
