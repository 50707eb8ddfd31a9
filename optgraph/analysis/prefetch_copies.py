"""The prefetch copies of streamed weight segments: insert them with their events, or strip them.

`plan-prefetch` chooses which segments to stream (`optgraph.analysis.segments.choose_layout`,
`prefetch_choice`); `insert_prefetches` turns that layout into IR: for segment `n`, the k-th
streamed one, a `prefetch` node per weight on the copy stream, writing its place in the ring above
the arena (`prefetch_ring.place_in_ring`), after `wait ^pfN.free.S` for every stream S that read
the segments whose bytes it overwrites (one wait per stream, none for a read the copy stream's
earlier waits already order), then `record ^pfN.ready`, waited on by every stream reading the segment before its first
read; readers read the copies. The copies stay in segment order on the copy stream, each issued
right after the last read it waits for. `strip_prefetch` undoes that, and `synchronous_prefetch`
re-plans the same segments through a ring of the largest one, each copy on its first reader's
stream (what a runtime falls back to when the ring cannot be allocated).

    before: %q = matmul(%h, %l5.wq) !{stream = 0}
    after:  %l5.wq.s = prefetch(%l5.wq) !{stream = 2, segment = 5, slot = 0, ..}
            record ^pf5.ready !{stream = 2}   wait ^pf5.ready !{stream = 0}
            %q = matmul(%h, %l5.wq.s) !{stream = 0}

Complexity: O(V·k) for the clocks and O(V + E) for the rewrite.
"""

from __future__ import annotations

import re
from dataclasses import replace

from optgraph.analysis.arena_packing import align_up
from optgraph.analysis.happens_before import HappensBefore, happens_before
from optgraph.analysis.lifetimes import annotate_lifetimes, compute_lifetimes
from optgraph.analysis.prefetch_ring import place_in_ring
from optgraph.analysis.segments import Layout, Segment, device_memory, weight_accesses
from optgraph.ir.graph import Annotations, Graph, Node
from optgraph.ir.names import fresh_name

EVENT_PREFIX = "pf"  # events made by plan-prefetch are named ^pf<N>.ready / ^pf<N>.free.<stream>
_EVENT_RE = re.compile(rf"^{EVENT_PREFIX}[0-9]+\.(ready|free\.[0-9]+)[0-9]*$")


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


def synchronous_prefetch(graph: Graph) -> Graph:
    """The same streamed segments copied synchronously through one slot (no budget needed).

    What a runtime falls back to when the prefetch ring of `graph` cannot be allocated: the ring
    shrinks to the largest segment and every copy runs on its reader's stream right before it.
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
    # Numbers missing from the annotations were kept resident: empty placeholders hold their place.
    by_number = dict(zip(sorted(numbers), segments))
    placeholder = Segment((), 0, 0, 0)
    top = max(numbers)
    layout = Layout(
        [by_number.get(k, placeholder) for k in range(top + 1)],
        frozenset(k for k in range(top + 1) if k not in by_number),
        max(s.nbytes for s in segments),
        1,
    )
    return insert_prefetches(base, layout, accesses, align_up(device_memory(base).arena), True)


def insert_prefetches(
    graph: Graph,
    layout: Layout,
    accesses: dict[str, list[int]],
    arena_base: int,
    sync: bool,
    hb: HappensBefore | None = None,
    lifetimes: bool = True,
) -> Graph:
    """Insert the prefetch nodes and events, point readers at the copies, annotate, re-analyze
    (`lifetimes=False`: not the live ranges, for a graph that is only estimated). `hb`: the
    happens-before of `graph`, where the caller has it."""
    nodes = graph.nodes
    hb = happens_before(graph) if hb is None else hb
    taken = {n.name for n in nodes} | {i.name for i in graph.inputs} | graph.weight_names()
    has_backends = any(n.ann.backend is not None for n in nodes if not n.is_event)
    backend = "cuda" if has_backends else None
    copy_stream = max((n.stream for n in nodes), default=0) + 1
    types = {w.name: w.type for w in graph.weights}

    before: dict[int, list[Node]] = {}  # issue index -> nodes inserted just before it
    after: dict[int, list[Node]] = {}  # issue index -> nodes inserted just after it
    renamed: dict[str, str] = {}
    streamed: dict[str, int] = {}
    segments = layout.streamed
    ring = max(s.nbytes for s in segments) if sync else layout.ring
    placement = place_in_ring([s.nbytes for s in segments], ring)
    reads = [sorted({i for w in s.weights for i in accesses[w]}) for s in segments]
    covered: dict[int, int] = {}  # per stream, the last read the copy stream already waited for
    anchor = -1  # the copy stream's copies stay in segment order in the issue order
    for z, (number, segment) in enumerate(layout.numbered):
        first = reads[z][0]
        stream = nodes[first].stream if sync else copy_stream
        # Wait until every read of the bytes' previous occupants happens-before the copy.
        # A synchronous copy sits just before `first`: what happens-before it needs no wait.
        done = [first] if sync else list(covered.values())
        old = [reads[y] for y in placement.occupants[z]]
        group, records = _free_waits(nodes, hb, old, (number, stream), done, taken)
        for i, _ in records:
            if not sync:
                covered[nodes[i].stream] = max(covered.get(nodes[i].stream, -1), i)
        for record_at, record in records:
            after.setdefault(record_at, []).append(record)
        offset = arena_base + placement.offsets[z]
        for w in segment.weights:
            name = fresh_name(f"{w}.s", taken, "")
            renamed[w] = name
            streamed[w] = number
            annotations = Annotations(
                stream=stream,
                backend=backend,
                offset=offset,
                size=align_up(types[w].nbytes),
                segment=number,
                slot=0,
            )
            group.append(
                Node(name, "prefetch", (w,), {}, types[w], annotations, span=nodes[first].span)
            )
            offset += align_up(types[w].nbytes)
        # Every stream reading the segment waits for its copies before its first read.
        first_on: dict[int, int] = {}
        for i in reads[z]:
            first_on.setdefault(nodes[i].stream, i)
        waiting = [(s, i) for s, i in first_on.items() if s != stream]
        if waiting:
            event = fresh_name(f"{EVENT_PREFIX}{number}.ready", taken, "")
            group.append(_event("record", event, stream, nodes[first]))
            for s, i in waiting:
                before.setdefault(i, []).append(_event("wait", event, s, nodes[i]))
        if sync:
            # Just before the first read, ahead of that read's other inserted waits.
            before.setdefault(first, [])[:0] = group
        else:
            # At the start while the ring has room, else right after the last read (and its free
            # record) of the bytes' previous occupants, never before an earlier segment's copy.
            anchor = max([anchor] + [reads[y][-1] for y in placement.occupants[z]])
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
    return annotate_lifetimes(result, compute_lifetimes(result)) if lifetimes else result


def _free_waits(
    nodes: tuple[Node, ...],
    hb: HappensBefore,
    occupant_reads: list[list[int]],
    copy: tuple[int, int],
    done: list[int],
    taken: set[str],
) -> tuple[list[Node], list[tuple[int, Node]]]:
    """The waits of segment `copy[0]`'s copies on stream `copy[1]` for every read of the
    occupants they overwrite, and the records those wait for, as (issue index to record after,
    record): one per stream's last read, none for a read that happens-before another of them or
    before a node of `done` (reads the copy is already ordered after)."""
    last_on: dict[int, int] = {}
    for old in occupant_reads:
        for i in old:
            s = nodes[i].stream
            last_on[s] = max(last_on.get(s, -1), i)
    number, stream = copy
    lasts = [i for s, i in last_on.items() if s != stream]
    lasts = [i for i in lasts if not any(hb.ordered(i, j) for j in lasts if j != i)]
    lasts = [i for i in lasts if not any(i == j or hb.ordered(i, j) for j in done)]
    waits, records = [], []
    for i in sorted(lasts):
        event = fresh_name(f"{EVENT_PREFIX}{number}.free.{nodes[i].stream}", taken, "")
        records.append((i, _event("record", event, nodes[i].stream, nodes[i])))
        waits.append(_event("wait", event, stream, nodes[i]))
    return waits, records


def _event(op: str, event: str, stream: int, like: Node) -> Node:
    """A record/wait on a GPU stream (streamed weights are never read on the host stream)."""
    return Node(event, op, (), {}, None, Annotations(stream=stream), span=like.span)
