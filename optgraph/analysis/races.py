"""Races: conflicting accesses that happens-before does not order, found for check-races and the report.

Two accesses conflict when they touch the same bytes and at least one writes; they race when
neither happens-before the other. An access through a view of part of a buffer, or a slice's
read of its rows, touches only those bytes (`Access.within`, a `layout.ByteSet`).
`find_races(graph)` returns every race (values, in-place cache writes, overlapping arena bytes
once memory is planned, streams not joined at the end) and every `clobber` (buffers sharing
bytes ordered the wrong way round); `race_diagnostics` renders them located, with a note at the
other node. The `check-races` pass (`optgraph.passes.check_races`)
documents the accesses and the interval-map search in full.

    %a = exp(%x) !{stream = 1}    %b = neg(%a) !{stream = 0}     (no record/wait)
    -> [Race(%b reads %a, %a writes %a)]

A planned arena is first proved race-free in one sweep keeping only the last buffer written over
each byte range (`optgraph.analysis.arena_order`); only an arena that proof fails on is searched in
full (the frontier sets, the retired buffers, every pair of accesses).

Complexity: O((V + E)·k) for happens-before, O(E) for values, O(B log B + touched ranges·k) for
B planned buffers when race-free, plus O(accesses²) for each racing pair of buffers.
"""

from __future__ import annotations

import operator
from bisect import bisect_left, insort
from collections.abc import Sequence
from dataclasses import dataclass

from optgraph.analysis.arena_order import (
    NEVER_SEQ,
    Access,
    PlannedBuffer,
    access_clocks,
    is_arena_ordered,
)
from optgraph.analysis.happens_before import happens_before, operands_read
from optgraph.errors import Diagnostic, Span
from optgraph.ir.graph import EVENT_OPS, Graph, Node, TensorType
from optgraph.ir.layout import ByteSet, alias_roots, slice_bytes
from optgraph.ir.ops import get_op

END = -1  # the graph's end, as the second party of a race


@dataclass(frozen=True)
class Race:
    """`first` (issued later) and `second` (or END) access overlapping bytes, unordered."""

    first: Access
    second: Access
    overlap: tuple[int, int] | None = None  # arena bytes, when two different buffers share them
    clobber: bool = False  # ordered, but the wrong way: `second` overwrote the bytes `first` reads


def _describe(graph: Graph, access: Access) -> str:
    node = graph.nodes[access.node]
    verb = "writes" if access.writes else "reads"
    where = f"stream {node.stream}"
    if graph.device_count() > 1:
        where = f"device {access.device}, {where}"
    return f"%{node.name} ({where}) {verb} %{access.value}"


def race_message(graph: Graph, race: Race, roots: dict[str, tuple[str, int]] | None = None) -> str:
    """`race: %b (stream 1) reads %a while %c (stream 0) writes it; no event orders them`."""
    roots = alias_roots(graph) if roots is None else roots
    first = _describe(graph, race.first)
    if race.second.node == END and race.clobber:
        lo, hi = race.overlap or (0, 0)
        return (
            f"clobber: {first} over the bytes [{lo}, {hi}) of output %{race.second.value}, "
            "which the host reads when the graph returns; the memory plan reuses an output's bytes"
        )
    if race.second.node == END:
        s = graph.nodes[race.first.node].stream
        of_device = f" of device {race.first.device}" if graph.device_count() > 1 else ""
        return (
            f"race: {first} and may still be running when the graph returns; "
            f"no event joins stream {s} into stream 0{of_device} before the end"
        )
    second = _describe(graph, race.second)
    if race.clobber:
        lo, hi = race.overlap or (0, 0)
        return (
            f"clobber: {first} after {second} over its bytes [{lo}, {hi}); "
            f"the memory plan reuses %{race.first.value}'s bytes too early"
        )
    if race.second.value == race.first.value:
        second = second.rsplit(" ", 1)[0] + " it"
    elif race.overlap is not None:
        second += f", whose bytes [{race.overlap[0]}, {race.overlap[1]}) overlap it"
    elif roots.get(race.second.value, (None,))[0] == race.first.value:
        second += ", a view of it"
    elif roots.get(race.first.value, (None,))[0] == race.second.value:
        second += ", which it views"
    return f"race: {first} while {second}; no event orders them"


def _access_span(graph: Graph, access: Access) -> Span | None:
    """A read points at the operand it reads, a write at the node."""
    node = graph.nodes[access.node]
    if not access.writes and access.value in node.operands:
        k = node.operands.index(access.value)
        if k < len(node.operand_spans):
            return node.operand_spans[k]
    return node.span


def race_diagnostics(graph: Graph, races: list[Race]) -> list[Diagnostic]:
    """One located error per race plus a note at the other node."""
    diags: list[Diagnostic] = []
    roots = alias_roots(graph)
    for race in races:
        diags.append(Diagnostic(race_message(graph, race, roots), _access_span(graph, race.first)))
        if race.second.node != END:
            note = _describe(graph, race.second) + " here"
            diags.append(Diagnostic(note, _access_span(graph, race.second), "note"))
    return diags


class _Finder:
    def __init__(self, graph: Graph):
        self.graph = graph
        self.hb = happens_before(graph)
        self.races: list[Race] = []
        self.seen: set[tuple[int, str, int, str]] = set()
        self.one_instance = len(self.hb.node_of) == len(graph.nodes)  # instance i is node i

    def inst(self, access: Access) -> int:
        if self.one_instance:
            return access.node
        return self.hb.instance(access.node, access.device)

    def ordered(self, a: Access, b: Access) -> bool:
        return self.hb.ordered_instances(self.inst(a), self.inst(b))

    def pair(self, a: Access, b: Access, overlap: tuple[int, int] | None = None) -> None:
        if a.node == b.node or not (a.writes or b.writes):
            return
        if self.ordered(a, b) or self.ordered(b, a):
            return
        later, earlier = (a, b) if a.node > b.node else (b, a)
        key = (later.node, later.value, earlier.node, earlier.value)
        if key in self.seen:
            return
        self.seen.add(key)
        self.races.append(Race(later, earlier, overlap))


Buffers = dict[int, dict[str, list[Access]]]  # device -> root buffer -> its accesses


def view_bytes(
    value: str, roots: dict[str, tuple[str, int]], types: dict[str, TensorType]
) -> ByteSet | None:
    """The bytes [lo, hi) of its root buffer that `value` spans, when it is a view of part of
    it; None for the root itself or a view of all of it (a reshape): the whole buffer."""
    if value not in roots:
        return None
    root, offset = roots[value]
    nbytes = types[value].nbytes
    if offset == 0 and nbytes >= types[root].nbytes:
        return None
    return ByteSet(offset, offset + nbytes)


def _slice_read(
    node: Node, operand: str, roots: dict[str, tuple[str, int]], types: dict[str, TensorType]
) -> ByteSet | None:
    """The bytes of its root a materialized `slice` reads through `operand` (its rows, maybe a
    strided set, at the operand's place in the root); None: the operand's whole bytes."""
    part = slice_bytes(node, types[operand])
    if part is None:
        return None
    return part.shifted(roots[operand][1]) if operand in roots else part


def _buffer_accesses(graph: Graph, roots: dict[str, tuple[str, int]]) -> Buffers:
    """Per device, per root buffer: the write of its producer, and every read through it or its
    aliases on that device (a send reads the buffer it sends; a recv reads nothing there). A read
    through an aliasing view touches only the view's bytes, a materialized slice's read only
    its rows (`Access.within`). O(V + E)."""
    accesses: Buffers = {}
    types = graph.value_types()
    through = {view: (root, view_bytes(view, roots, types)) for view, (root, _) in roots.items()}
    for i, node in enumerate(graph.nodes):
        op = node.op
        if op in EVENT_OPS:
            continue
        name = node.name
        for d in node.ann.devices:
            on = accesses.get(d)
            if on is None:
                on = accesses[d] = {}
            sliced = False
            if op == "send" and node.operands:
                reads: Sequence[str] = node.operands[:1]
            elif name in roots:  # an aliasing view reads and writes nothing
                continue
            else:
                write = Access(i, name, True, d)
                found = on.get(name)
                if found is None:
                    on[name] = [write]
                else:
                    found.insert(0, write)
                reads = operands_read(node, d)
                sliced = op == "slice"
            for operand in reads:
                view = through.get(operand)
                if view is None:
                    root, within = operand, None
                else:
                    root, within = view
                if sliced:  # a slice's one operand: only the rows it copies
                    rows = _slice_read(node, operand, roots, types)
                    within = within if rows is None else rows
                access = Access(i, operand, False, d, within)
                found = on.get(root)
                if found is None:
                    on[root] = [access]
                else:
                    found.append(access)
    return accesses


def find_races(graph: Graph) -> list[Race]:
    """Every unordered pair of conflicting accesses (see the module docstring), in issue order."""
    f = _Finder(graph)
    nodes = graph.nodes
    hb = f.hb
    roots = alias_roots(graph)
    for x, y in hb.unordered_instance_edges():  # values: every data edge, on each device
        if hb.ordered_instances(y, x):
            continue  # what `pair` would find first, without making the two accesses
        p, i = hb.node_of[x], hb.node_of[y]
        value = nodes[p].name
        f.pair(Access(i, value, False, hb.device_of[y]), Access(p, value, True, hb.device_of[x]))
    accesses = _buffer_accesses(graph, roots)
    rule = _InPlaceRule(graph, roots)
    types = rule.types
    for i, node in enumerate(nodes):  # in place: kv_cache_write into its cache's buffer
        if (
            node.op == "kv_cache_write"
            and node.operands
            and _is_in_place(node, roots, rule.offsets)
        ):
            cache = node.operands[0]
            root = roots.get(cache, (cache, 0))[0]
            within = view_bytes(cache, roots, types)  # through a view: only the view's bytes
            for d in node.devices:
                write = Access(i, root, True, d, within)
                for other in accesses.get(d, {}).get(root, ()):
                    if write.shares_bytes(other):
                        f.pair(write, other)
    read_at_end = _output_roots(graph, roots)
    for device in hb.devices:
        _check_arena(f, accesses.get(device, {}), roots, device, rule, read_at_end)
    for c in hb.unjoined_lanes():  # the end joins every lane into its device's stream 0
        last = hb.on_lane[c][-1]
        at = hb.node_of[last]
        write = Access(at, nodes[at].name, True, hb.device_of[last])
        f.races.append(Race(write, Access(END, "", False, hb.device_of[last])))
    f.races.sort(
        key=lambda r: (r.first.node, r.second.node, r.first.value, r.second.value, r.first.device)
    )
    return f.races


def _is_in_place(
    node: Node, roots: dict[str, tuple[str, int]], offsets: dict[str, int | None]
) -> bool:
    """Whether a `kv_cache_write` writes into its cache's bytes: as planned, or (no plan yet)
    assumed so. Planned as a copy, its result has bytes of its own (a cache that is an input or
    weight has no arena offset, so a planned write of it is always a copy)."""
    if node.ann.offset is None:
        return True
    root, extra = roots.get(node.operands[0], (node.operands[0], 0))
    root_offset = offsets.get(root)
    return root_offset is not None and root_offset + extra == node.ann.offset


def _output_roots(graph: Graph, roots: dict[str, tuple[str, int]]) -> dict[str, list[Access]]:
    """The buffers the host reads at the end: each output's root, with the reads (an output
    that is a view reads only its bytes)."""
    types = graph.value_types()
    read: dict[str, list[Access]] = {}
    for name in graph.output_names():
        root = roots.get(name, (name, 0))[0]
        within = view_bytes(name, roots, types)
        read.setdefault(root, []).append(Access(END, name, False, 0, within))
    return read


def _check_arena(
    f: _Finder,
    every_access: dict[str, list[Access]],
    roots: dict[str, tuple[str, int]],
    device: int,
    rule: _InPlaceRule,
    read_at_end: dict[str, list[Access]],
) -> None:
    """Overlapping planned buffers in the arena of `device` (each device has its own): proved
    race-free in one sweep (`arena_order`), else searched in full."""
    graph, hb = f.graph, f.hb
    buffers: list[PlannedBuffer] = []
    for i, node in enumerate(graph.nodes):
        ann = node.ann
        offset = ann.offset
        if offset is None or not ann.size or node.op in EVENT_OPS or node.name in roots:
            continue
        if device in ann.devices:
            buffers.append((i, node.name, offset, offset + ann.size))
    if len(buffers) < 2:
        return
    if is_arena_ordered(hb, buffers, every_access, f.one_instance, read_at_end, rule.allows):
        return
    _search_arena(f, buffers, every_access, rule, read_at_end, device)


def _search_arena(
    f: _Finder,
    buffers: list[PlannedBuffer],
    every_access: dict[str, list[Access]],
    rule: _InPlaceRule,
    read_at_end: dict[str, list[Access]],
    device: int,
) -> None:
    """The full search of `_check_arena` (see `check_races`): every racing pair and clobber."""
    hb = f.hb
    accesses = {name: every_access.get(name, []) for _, name, _, _ in buffers}
    lanes = len(hb.lanes)
    # Per buffer: need[c], the latest sequence number of its accesses on lane c; least, the
    # earliest clock among its accesses (entry by entry): `arena_order.access_clocks`.
    need: dict[str, list[int]] = {}
    least: dict[str, list[int]] = {}
    for _, name, _, _ in buffers:
        need[name], least[name] = access_clocks(hb, accesses[name], f.one_instance)
    for name in read_at_end.keys() & need.keys():  # read by the host after every node
        need[name] = [NEVER_SEQ] * lanes
    span = {name: (lo, hi) for _, name, lo, hi in buffers}
    children: dict[str, list[str]] = {}
    bounds: list[int] = []
    owners: list[set[str]] = []  # owners[j]: frontier buffers on [bounds[j], bounds[j + 1])

    def split(x: int) -> int:
        j = bisect_left(bounds, x)
        if j < len(bounds) and bounds[j] == x:
            return j
        insort(bounds, x)
        owners.insert(j, set(owners[j - 1]) if j > 0 else set())
        return j

    for _, name, lo, hi in sorted(buffers):
        ja, jb = split(lo), split(hi)
        found = set().union(*owners[ja:jb]) if jb > ja else set()
        kept: set[str] = set()
        stack = sorted(found, reverse=True)
        visited = set(found)
        while stack:
            older = stack.pop()
            olo, ohi = span[older]
            if ohi <= lo or olo >= hi:
                continue
            overlap = (max(lo, olo), min(hi, ohi))
            # Only the accesses that reach the shared bytes (a read through a view of `older`
            # outside them cannot conflict with `name`'s write).
            local = {
                older: [a for a in accesses.get(older, ()) if a.touches(olo, overlap)],
                name: [b for b in accesses.get(name, ()) if b.touches(lo, overlap)],
            }
            if all(map(operator.ge, least[name], need[older])) and not _writes_over_own_read(
                rule, local, older, name
            ):
                if older in found:
                    children.setdefault(name, []).append(older)
                continue
            if older in found:
                kept.add(older)
            before = len(f.races)
            for a in local[older]:
                for b in local[name]:
                    f.pair(b, a, overlap)
            at_end = [e for e in read_at_end.get(older, ()) if e.touches(olo, overlap)]
            if len(f.races) == before and at_end:
                write = next(x for x in accesses[name] if x.writes)
                end = Access(END, at_end[0].value, False, device)  # the output, maybe a view
                f.races.append(Race(write, end, overlap, clobber=True))
            elif len(f.races) == before:
                _check_reuse_order(f, rule, local, older, name, overlap)
            for child in children.get(older, ()):
                if child not in visited:
                    visited.add(child)
                    stack.append(child)
        for j in range(ja, jb):
            owners[j] = (owners[j] & kept) | {name}


class _InPlaceRule:
    """A node may write its result over an operand it reads only element for element.

    Element-wise ops may overwrite any operand of their result's type at exactly the same bytes;
    `kv_cache_write` may overwrite its cache. Anything else (a broadcast, a reduction, a product)
    still reads bytes it has already overwritten. Lookups are built once: O(V).
    """

    def __init__(self, graph: Graph, roots: dict[str, tuple[str, int]]):
        self.graph, self.roots = graph, roots
        self.offsets = {n.name: n.ann.offset for n in graph.nodes if n.op not in EVENT_OPS}
        self.types = graph.value_types()

    def allows(self, read: Access, node_index: int) -> bool:
        node = self.graph.nodes[node_index]
        op = get_op(node.op)
        if op is None or read.value not in node.operands:
            return False
        if node.op == "kv_cache_write":
            allowed = node.operands[0] == read.value
        else:
            allowed = op.category == "elementwise"
        if not allowed or self.types.get(read.value) != node.type:
            return False
        root, extra = self.roots.get(read.value, (read.value, 0))
        root_offset = self.offsets.get(root)
        return root_offset is not None and root_offset + extra == node.ann.offset


def _writes_over_own_read(
    rule: _InPlaceRule, accesses: dict[str, list[Access]], older: str, newer: str
) -> bool:
    """Whether `newer`'s producer reads `older` and writes over it other than element-wise."""
    write = next((x for x in accesses.get(newer, ()) if x.writes), None)
    if write is None:
        return False
    return any(
        a.node == write.node and not a.writes and not rule.allows(a, write.node)
        for a in accesses.get(older, ())
    )


def _check_reuse_order(
    f: _Finder,
    rule: _InPlaceRule,
    accesses: dict[str, list[Access]],
    older: str,
    newer: str,
    overlap: tuple[int, int],
) -> None:
    """Overlapping buffers whose accesses are all ordered must be ordered as wholes.

    Every access of one must happen-before the other's first write; otherwise the later write
    clobbers bytes still to be read (reuse before the last read, or a result written over an
    operand it still reads, e.g. a broadcast).
    """

    def first_write(name: str) -> Access | None:
        return next((x for x in accesses.get(name, ()) if x.writes), None)

    w_new, w_old = first_write(newer), first_write(older)
    if w_new is None or w_old is None:
        return

    def fits(reads: list[Access], write: Access) -> list[Access]:
        bad = []
        for a in reads:
            if a.node == write.node:
                if not (not a.writes and rule.allows(a, write.node)):
                    bad.append(a)
            elif not f.ordered(a, write):
                bad.append(a)
        return bad

    bad_forward = fits(accesses.get(older, []), w_new)
    if not bad_forward or not fits(accesses.get(newer, []), w_old):
        return
    victim = bad_forward[0]
    f.races.append(Race(victim, w_new, overlap, clobber=True))
