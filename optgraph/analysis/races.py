"""Races: conflicting accesses that happens-before does not order, found for check-races and the report.

Two accesses conflict when they touch the same bytes and at least one writes; they race when
neither happens-before the other. `find_races(graph)` returns every race (values, in-place cache
writes, overlapping arena bytes once memory is planned, streams not joined at the end) and every
`clobber` (buffers sharing bytes ordered the wrong way round); `race_diagnostics` renders them
located, with a note at the other node. The `check-races` pass (`optgraph.passes.check_races`)
documents the accesses and the interval-map search in full.

    %a = exp(%x) !{stream = 1}    %b = neg(%a) !{stream = 0}     (no record/wait)
    -> [Race(%b reads %a, %a writes %a)]

Complexity: O((V + E)·k) for happens-before, O(E) for values, O(B log B + touched ranges·k) for
B planned buffers when race-free, plus O(accesses²) for each racing pair of buffers.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

from optgraph.analysis.happens_before import HappensBefore
from optgraph.errors import Diagnostic, Span
from optgraph.ir.graph import Graph, Node
from optgraph.ir.layout import alias_roots
from optgraph.ir.ops import get_op

END = -1  # the graph's end, as the second party of a race


@dataclass(frozen=True)
class Access:
    node: int
    value: str
    writes: bool


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
    return f"%{node.name} (stream {node.stream}) {verb} %{access.value}"


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
        return (
            f"race: {first} and may still be running when the graph returns; "
            f"no event joins stream {s} into stream 0 before the end"
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
        self.hb = HappensBefore(graph)
        self.races: list[Race] = []
        self.seen: set[tuple[int, str, int, str]] = set()

    def pair(self, a: Access, b: Access, overlap: tuple[int, int] | None = None) -> None:
        if a.node == b.node or not (a.writes or b.writes):
            return
        if not self.hb.concurrent(a.node, b.node):
            return
        later, earlier = (a, b) if a.node > b.node else (b, a)
        key = (later.node, later.value, earlier.node, earlier.value)
        if key in self.seen:
            return
        self.seen.add(key)
        self.races.append(Race(later, earlier, overlap))


def _buffer_accesses(graph: Graph, roots: dict[str, tuple[str, int]]) -> dict[str, list[Access]]:
    """Per root buffer: the write of its producer, and every read through it or its aliases."""
    accesses: dict[str, list[Access]] = {}
    for i, node in graph.compute_nodes():
        if node.name not in roots:
            accesses.setdefault(node.name, []).insert(0, Access(i, node.name, True))
        else:  # an aliasing view reads and writes nothing
            continue
        for operand in dict.fromkeys(node.operands):
            root = roots.get(operand, (operand, 0))[0]
            accesses.setdefault(root, []).append(Access(i, operand, False))
    return accesses


def find_races(graph: Graph) -> list[Race]:
    """Every unordered pair of conflicting accesses (see the module docstring), in issue order."""
    f = _Finder(graph)
    nodes = graph.nodes
    producers = graph.producers()
    roots = alias_roots(graph)
    for i, node in graph.compute_nodes():  # values: every data edge
        for operand in dict.fromkeys(node.operands):
            p = producers.get(operand)
            if p is not None:
                f.pair(Access(i, operand, False), Access(p, operand, True))
    accesses = _buffer_accesses(graph, roots)
    offsets = {n.name: n.ann.offset for _, n in graph.compute_nodes()}
    for i, node in graph.compute_nodes():  # in place: kv_cache_write into its cache's buffer
        if node.op == "kv_cache_write" and node.operands and _is_in_place(node, roots, offsets):
            root = roots.get(node.operands[0], (node.operands[0], 0))[0]
            for other in accesses.get(root, ()):
                f.pair(Access(i, root, True), other)
    _check_arena(f, accesses, roots)
    hb = f.hb
    end = hb.column[0]
    for c, on_stream in enumerate(hb.on_stream):  # the end joins every stream
        if c != end and on_stream and hb.final[end, c] < hb.seq[on_stream[-1]]:
            last = on_stream[-1]
            f.races.append(Race(Access(last, nodes[last].name, True), Access(END, "", False)))
    f.races.sort(key=lambda r: (r.first.node, r.second.node, r.first.value, r.second.value))
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


def _output_roots(graph: Graph, roots: dict[str, tuple[str, int]]) -> set[str]:
    """The buffers the host reads at the end: each output's root."""
    return {roots.get(name, (name, 0))[0] for name in graph.output_names()}


def _check_arena(
    f: _Finder, accesses: dict[str, list[Access]], roots: dict[str, tuple[str, int]]
) -> None:
    import numpy as np  # deferred: `optgraph passes` imports this module and needs no NumPy

    graph, hb = f.graph, f.hb
    rule = _InPlaceRule(graph, roots)
    buffers = []
    for i, node in graph.compute_nodes():
        ann = node.ann
        if node.name in roots or ann.offset is None or not ann.size:
            continue
        buffers.append((i, node.name, ann.offset, ann.offset + ann.size))
    if len(buffers) < 2:
        return
    need: dict[str, np.ndarray] = {}
    least: dict[str, np.ndarray] = {}
    for _, name, _, _ in buffers:
        acc = accesses.get(name, [])
        idx = [x.node for x in acc]
        row = np.zeros(len(hb.streams), dtype=np.int64)
        np.maximum.at(row, hb.stream_col[idx], hb.seq[idx])
        need[name] = row
        least[name] = hb.clocks[idx].min(axis=0)
    read_at_end = _output_roots(graph, roots)
    for name in read_at_end & need.keys():  # read by the host after every node: never before
        need[name] = np.full(len(hb.streams), np.iinfo(np.int64).max, dtype=np.int64)
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
            if bool(np.all(least[name] >= need[older])) and not _writes_over_own_read(
                rule, accesses, older, name
            ):
                if older in found:
                    children.setdefault(name, []).append(older)
                continue
            if older in found:
                kept.add(older)
            overlap = (max(lo, olo), min(hi, ohi))
            before = len(f.races)
            for a in accesses.get(older, ()):
                for b in accesses.get(name, ()):
                    f.pair(b, a, overlap)
            if len(f.races) == before and older in read_at_end:
                write = next(x for x in accesses[name] if x.writes)
                f.races.append(Race(write, Access(END, older, False), overlap, clobber=True))
            elif len(f.races) == before:
                _check_reuse_order(f, rule, accesses, older, name, overlap)
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
        self.offsets = {n.name: n.ann.offset for n in graph.nodes if not n.is_event}
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
    hb = f.hb

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
            elif not hb.ordered(a.node, write.node):
                bad.append(a)
        return bad

    bad_forward = fits(accesses.get(older, []), w_new)
    if not bad_forward or not fits(accesses.get(newer, []), w_old):
        return
    victim = bad_forward[0]
    f.races.append(Race(victim, w_new, overlap, clobber=True))
