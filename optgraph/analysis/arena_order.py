"""Proving a planned arena race-free in one sweep: the race search's fast path.

The race search (`optgraph.analysis.races`) walks the buffers of an arena in issue order against
an interval map of the bytes. Each range holds its *frontier*: the buffers not yet found
"entirely before" a later one. A buffer B is compared with the frontier buffers A of its bytes;
when every access of A happens-before every access of B (and B's producer does not overwrite a
part of A it reads other than element for element), A is retired under B. Only when a pair fails
that test does the search do more: pair the accesses, look for clobbers, revisit retired buffers.

Until a pair fails, every range's frontier is one buffer, the last one written there. So
`is_arena_ordered` runs the same test on the same pairs keeping only that last writer per range
(a list of range starts and one owner each, no sets, no retired lists): when every pair passes,
the search would have found nothing, and the caller skips it; at the first failing pair it answers
False and the caller runs the full search, which then finds exactly what it finds without this
proof.

    buffers %a@[0, 256) written at 0, read at 1;  %b@[0, 256) written at 2, read at 3
    -> True: %a's accesses (0, 1) all happen-before %b's (2, 3); the range [0, 256) now owned by %b

Complexity: O(A·k) for the clocks of the A accesses (k lanes), then O(log R + R_B) per buffer for
R ranges in the map (R_B those under its bytes, each one test of k entries): O(B·(log B + k))
for B buffers when their ranges are touched a bounded number of times.
"""

from __future__ import annotations

import operator
from bisect import bisect_left, bisect_right
from collections.abc import Callable, Collection, Mapping, Sequence
from typing import NamedTuple

from optgraph.analysis.happens_before import HappensBefore
from optgraph.ir.layout import ByteSet

NEVER_SEQ = (1 << 63) - 1  # a sequence number no access reaches


class Access(NamedTuple):
    """`node` (an index in issue order) reads or writes `value` on `device`. `within`: the
    bytes of its root buffer the access touches (a read through an aliasing view: the view's
    bytes; a materialized slice's read: its operand's rows, a strided set; an in-place write
    through a view: the view's bytes); None: the whole buffer. A named tuple: the race search
    makes one per read and write of every buffer, and a frozen dataclass costs several times
    more to make."""

    node: int
    value: str
    writes: bool
    device: int = 0
    within: ByteSet | None = None

    def touches(self, start: int, overlap: tuple[int, int]) -> bool:
        """Whether the access reaches the arena bytes `overlap`, its buffer starting at `start`."""
        if self.within is None:
            return True
        return self.within.meets(overlap[0] - start, overlap[1] - start)

    def shares_bytes(self, other: Access) -> bool:
        """Whether two accesses of one buffer reach a common byte (None: every byte)."""
        if self.within is None:
            return other.within is None or other.within.runs() > 0
        if other.within is None:
            return self.within.runs() > 0
        return self.within.intersects(other.within)


PlannedBuffer = tuple[int, str, int, int]  # (producer index, name, first byte, end byte)


def access_clocks(
    hb: HappensBefore, accesses: Sequence[Access], one_instance: bool
) -> tuple[list[int], list[int]]:
    """(need, least) of a buffer's accesses: per lane, the latest sequence number among them,
    and entry by entry the earliest of their clocks. Every access of A happens-before (or is)
    every access of B exactly when least(B) >= need(A) entry by entry."""
    if one_instance:
        idx = [a.node for a in accesses]
    else:
        idx = [hb.instance(a.node, a.device) for a in accesses]
    seqs = hb.seqs
    if len(hb.lanes) == 1:  # every clock is (its own sequence number,), growing with x
        return [seqs[max(idx)]], [seqs[min(idx)]]
    rows, lanes_of = hb.rows, hb.lanes_of
    need = [0] * len(hb.lanes)
    for x in idx:
        c = lanes_of[x]
        need[c] = max(need[c], seqs[x])
    least = list(map(min, *(rows[x] for x in idx))) if len(idx) > 1 else [*rows[idx[0]]]
    return need, least


def overwrites_own_read(
    older: Sequence[Access],
    olo: int,
    overlap: tuple[int, int],
    write_node: int,
    allows: Callable[[Access, int], bool],
) -> bool:
    """Whether node `write_node` reads bytes of `overlap` of the older buffer (accesses `older`,
    starting at `olo`) and writes its result over them other than element for element."""
    for a in older:
        if (
            a.node == write_node
            and not a.writes
            and a.touches(olo, overlap)
            and not allows(a, write_node)
        ):
            return True
    return False


def is_arena_ordered(
    hb: HappensBefore,
    buffers: Sequence[PlannedBuffer],
    accesses: Mapping[str, list[Access]],
    one_instance: bool,
    read_at_end: Collection[str],
    allows: Callable[[Access, int], bool],
) -> bool:
    """Whether the race search of these buffers (in issue order) retires every buffer it compares
    (see the module docstring): then it finds no race. `read_at_end`: buffers the host reads
    after every node (no later buffer may take their bytes)."""
    never = [NEVER_SEQ] * len(hb.lanes)
    ge = operator.ge
    need: list[list[int]] = []
    starts: list[int] = []  # range starts, increasing; range j is [starts[j], starts[j + 1])
    owner: list[int] = []  # the buffer last written over range j (its position), -1 for none
    for k, (i, name, lo, hi) in enumerate(buffers):
        mine = accesses.get(name, [])
        need_k, least = access_clocks(hb, mine, one_instance)
        need.append(never if name in read_at_end else need_k)
        writes = [x.node for x in mine if x.writes]
        a = bisect_right(starts, lo) - 1  # the range holding lo (-1: below every range)
        b = bisect_left(starts, hi)  # ranges a.. b - 1 meet [lo, hi)
        seen: set[int] = set()
        for o in owner[max(a, 0) : b]:
            if o < 0 or o in seen:
                continue
            seen.add(o)
            _, older, olo, ohi = buffers[o]
            if not all(map(ge, least, need[o])):
                return False
            if writes and overwrites_own_read(
                accesses.get(older, []), olo, (max(lo, olo), min(hi, ohi)), writes[0], allows
            ):
                return False
        after = owner[b - 1] if b > 0 else -1  # who holds the bytes from hi on
        first = a if a >= 0 and starts[a] == lo else a + 1
        if b < len(starts) and starts[b] == hi:
            starts[first:b], owner[first:b] = [lo], [k]
        else:
            starts[first:b], owner[first:b] = [lo, hi], [k, after]
    return True
