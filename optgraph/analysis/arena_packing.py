"""Packing slots into one arena: conflict graph, best-fit placement, stacked permanent slots.

The placement half of plan-memory (`optgraph.passes.plan_memory` builds the slots and picks the
best result). A slot is one block of bytes (a buffer, or buffers chained in place) with its first
write `start` and, per stream, the first issue index `ends[s]` from which it is free there.

- `conflict_graph`: A (earlier) and B conflict iff `start_A < start_B < ends_A[stream_B]`: per
  stream two `searchsorted` calls find each slot's conflicting range, so building the CSR
  adjacency is O(n·k·log n + P) for P conflicting pairs.
- `place`: best fit in the order given (TFLite's greedy by size; XLA also tries by lifetime):
  the smallest gap between already placed conflicting slots that fits, else above them.
  O(P log P) in all.
- `lower_bound`: what any placement needs (slots live together on a lane); the orderings stop at
  the first that meets it. O(n·k·log n).
- `StackedPermanents`: slots never free (outputs) conflict with every later slot, which makes P
  quadratic (a 3,000-layer decode step keeps 6,000 KV caches); stacked from offset 0 in start
  order, the live ones always form a prefix, so each other slot only needs a floor, found by
  binary search.

    slots a [0,3) 256 B, b [1,2) 256 B, c [3,5) 256 B:  a@0, b@256, c@0 (c reuses a's bytes)
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

NEVER = 2**63 - 1  # np.iinfo(np.int64).max: the end of a slot that is never freed
ALIGNMENT = 256  # bytes: CUDA allocations start on this boundary, so arena buffers do too


def align_up(nbytes: int, alignment: int = ALIGNMENT) -> int:
    """`nbytes` rounded up to a multiple of `alignment`."""
    return -(-nbytes // alignment) * alignment


ORDERINGS: tuple[str, ...] = ("size", "lifetime", "issue")


@dataclass
class Slot:
    """Buffers that share bytes by in-place reuse; planned as one block."""

    members: list[str]
    size: int
    start: int  # issue index of the first member's producer
    stream: int  # lane of that producer (its stream, with one device)
    last: int  # last access of the last member (len(nodes) for outputs)
    ends: list[int]  # per lane: the first member-free node index there, NEVER if none
    lanes: tuple[int, ...] = ()  # every lane the first producer runs on (several devices)
    devices: tuple[int, ...] = (0,)  # devices whose arenas hold the slot (at one offset)

    def __post_init__(self) -> None:
        if not self.lanes:
            self.lanes = (self.stream,)


@dataclass
class LaneArrays:
    """What `conflict_graph` and `lower_bound` read of the slots, made once for both: starts,
    ends (a row per slot, a column per lane) and sizes as arrays, and the slots on each lane
    (in start order)."""

    starts: np.ndarray
    ends: np.ndarray
    sizes: np.ndarray
    on_lane: dict[int, list[int]]

    @classmethod
    def of(cls, slots: list[Slot]) -> LaneArrays:
        import numpy as np

        on_lane: dict[int, list[int]] = {}
        for i, slot in enumerate(slots):
            for lane in slot.lanes:
                on_lane.setdefault(lane, []).append(i)
        return cls(
            np.array([s.start for s in slots], dtype=np.int64),
            np.array([s.ends for s in slots], dtype=np.int64),
            np.array([s.size for s in slots], dtype=np.int64),
            on_lane,
        )

    def subset(self, ids: np.ndarray) -> LaneArrays:
        """`LaneArrays.of([slots[i] for i in ids])` for increasing `ids`, from these arrays."""
        import numpy as np

        position = np.full(len(self.starts), -1, dtype=np.int64)
        position[ids] = np.arange(len(ids), dtype=np.int64)
        on_lane: dict[int, list[int]] = {}
        for lane, on in self.on_lane.items():
            kept = position[on]
            kept = kept[kept >= 0]
            if kept.size:
                on_lane[lane] = kept.tolist()
        return LaneArrays(self.starts[ids], self.ends[ids], self.sizes[ids], on_lane)

    def permanent(self) -> list[bool]:
        """`is_permanent` of every slot: its ends are all NEVER or 0, and one is NEVER."""
        import numpy as np

        ends = self.ends
        if ends.ndim != 2 or ends.shape[1] == 0:  # no lanes: `is_permanent` finds no NEVER
            return [False] * len(ends)
        never = ends == NEVER
        kept = np.all(never | (ends == 0), axis=1) & np.any(never, axis=1)
        return [bool(k) for k in kept.tolist()]


def conflict_graph(
    slots: list[Slot], limit: int | None = None, arrays: LaneArrays | None = None
) -> tuple[np.ndarray, np.ndarray] | None:
    """CSR adjacency (indptr, indices) of slots that must not share bytes; None above `limit`
    conflicting pairs. `arrays`: `LaneArrays.of(slots)`, where the caller has them.

    Slots are in order of `start`; A (earlier) and B conflict iff B starts before A is free on
    B's stream: start_A < start_B < ends_A[stream_B]. With several devices, on any of B's lanes
    (a slot's ends on the lanes of devices it does not live on are 0: never a conflict there).
    """
    import numpy as np

    n = len(slots)
    if n == 0:
        return np.zeros(1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    arrays = arrays or LaneArrays.of(slots)
    starts, ends, on_lane = arrays.starts, arrays.ends, arrays.on_lane
    ranges = []
    for s in range(ends.shape[1]):
        if s not in on_lane:
            continue
        ids = np.array(on_lane[s], dtype=np.int64)
        on_s = starts[ids]  # sorted, since slots are in start order
        lo = np.searchsorted(on_s, starts, side="right")
        counts = np.maximum(np.searchsorted(on_s, ends[:, s], side="left") - lo, 0)
        ranges.append((ids, lo, counts))
    if limit is not None and sum(int(c.sum()) for _, _, c in ranges) > limit:
        return None
    src_parts: list[np.ndarray] = []
    dst_parts: list[np.ndarray] = []
    for ids, lo, counts in ranges:
        total = int(counts.sum())
        if total == 0:
            continue
        src_parts.append(np.repeat(np.arange(n, dtype=np.int64), counts))
        first = np.repeat(lo - np.cumsum(counts) + counts, counts)
        dst_parts.append(ids[first + np.arange(total, dtype=np.int64)])
    if not src_parts:
        return np.zeros(n + 1, dtype=np.int64), np.zeros(0, dtype=np.int64)
    a = np.concatenate(src_parts)
    b = np.concatenate(dst_parts)
    u = np.concatenate([a, b])
    v = np.concatenate([b, a])
    order = np.argsort(u, kind="stable")
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(u, minlength=n), out=indptr[1:])
    return indptr, v[order]


def is_permanent(slot: Slot) -> bool:
    """Never free on any stream (outputs, mostly): it conflicts with every later slot on its
    devices (its ends on other devices' lanes are 0)."""
    return all(e in (NEVER, 0) for e in slot.ends) and NEVER in slot.ends


class StackedPermanents:
    """Permanent slots stacked from offset 0 in start order, so at any time the live ones form
    a prefix [0, top): a later slot then needs only a floor, the top of the last permanent slot it
    conflicts with, instead of one conflict per permanent slot (a Llama decode step has two
    permanent KV caches per layer, and every later buffer would conflict with all of them).

    Several devices: one stack per device (a slot on several goes above each of their tops), so
    a device's arena holds no other device's permanent slots; a later slot conflicts only with
    permanent slots of its own devices.
    """

    def __init__(self, slots: list[Slot], ids: list[int]):
        self.offsets: dict[int, int] = {}
        cursor: dict[int, int] = {}
        self.starts: dict[int, list[int]] = {}  # per device, in start order
        self.tops: dict[int, list[int]] = {}
        self.by_stream: dict[int, tuple[list[int], list[int]]] = {}  # per lane
        for i in sorted(ids, key=lambda i: slots[i].start):
            slot = slots[i]
            offset = max(cursor.get(d, 0) for d in slot.devices)
            self.offsets[i] = offset
            top = offset + slot.size
            for d in slot.devices:
                cursor[d] = top
                self.starts.setdefault(d, []).append(slot.start)
                self.tops.setdefault(d, []).append(top)
            for lane in slot.lanes:
                on_s = self.by_stream.setdefault(lane, ([], []))
                on_s[0].append(slot.start)
                on_s[1].append(top)

    def floors(self, slots: list[Slot], arrays: LaneArrays) -> list[int]:
        """`floor` of every slot, as arrays (`searchsorted` per device and lane stack)."""
        import numpy as np

        starts, ends = arrays.starts, arrays.ends
        top = np.zeros(len(starts), dtype=np.int64)
        for d, on_d in self.starts.items():
            k = np.searchsorted(np.array(on_d, dtype=np.int64), starts, side="left")
            tops = np.array([0, *self.tops[d]], dtype=np.int64)  # k = 0: nothing below
            mine = np.array([d in slot.devices for slot in slots], dtype=bool)
            top = np.maximum(top, np.where(mine, tops[k], 0))
        width = ends.shape[1] if ends.ndim == 2 else 0
        for lane, (on_s, tops_s) in self.by_stream.items():
            end = ends[:, lane] if lane < width else np.full(len(starts), NEVER, dtype=np.int64)
            k = np.searchsorted(np.array(on_s, dtype=np.int64), end, side="left")
            top = np.maximum(top, np.array([0, *tops_s], dtype=np.int64)[k])
        return [int(t) for t in top.tolist()]

    def floor(self, slot: Slot) -> int:
        top = 0
        for d in slot.devices:  # every earlier permanent slot of a shared device conflicts
            starts = self.starts.get(d, [])
            k = bisect_left(starts, slot.start)
            if k:  # tops only grow along a device's stack
                top = max(top, self.tops[d][k - 1])
        for s, (starts, tops) in self.by_stream.items():
            end = slot.ends[s] if s < len(slot.ends) else NEVER
            k = bisect_left(starts, end)  # later ones that start before `slot` is free there
            if k and tops[k - 1] > top:
                top = tops[k - 1]
        return top


def place(
    slots: list[Slot],
    adjacency: tuple[np.ndarray, np.ndarray],
    order: list[int],
    floors: list[int] | None = None,
    fixed: dict[int, int] | None = None,
) -> list[int]:
    """Best-fit offsets for slots taken in `order`, avoiding placed conflicting slots and the
    bytes below each slot's floor; `fixed` slots are placed already."""
    sizes = [s.size for s in slots]
    offsets = [-1] * len(slots)
    for i, offset in (fixed or {}).items():
        offsets[i] = offset
    ptr = adjacency[0].tolist()
    nbrs = adjacency[1].tolist()
    floor = floors or [0] * len(slots)
    for i in order:
        if offsets[i] >= 0:
            continue
        a, b = ptr[i], ptr[i + 1]
        cursor = floor[i]
        if a == b:  # no placed neighbour can be in the way
            offsets[i] = cursor
            continue
        placed = [(offsets[j], sizes[j]) for j in nbrs[a:b] if offsets[j] >= 0]
        placed.sort()
        size = sizes[i]
        best, best_gap = -1, -1
        for lo, n in placed:
            gap = lo - cursor
            if gap >= size and (best < 0 or gap < best_gap):
                best, best_gap = cursor, gap
            cursor = max(cursor, lo + n)
        offsets[i] = best if best >= 0 else cursor
    return offsets


def _order(slots: list[Slot], name: str) -> list[int]:
    """The ordering `name` as slot positions."""
    keys: dict[str, Callable[[Slot], tuple[int, int]]] = {
        "size": lambda s: (-s.size, s.start),
        "lifetime": lambda s: (s.start - s.last, -s.size),
    }
    ids = range(len(slots))
    if name not in keys:
        return list(ids)
    key = list(map(keys[name], slots))
    return sorted(ids, key=key.__getitem__)


def lower_bound(slots: list[Slot], arrays: LaneArrays | None = None) -> int:
    """Bytes every arena of `slots` needs: the most a slot B and the earlier slots on one of its
    lanes that are not yet free there when B starts hold together. Those slots pairwise conflict
    (`conflict_graph`: each earlier one A has start_A < start_B < ends_A[lane], the lane of each
    later one), so no placement lets any two share a byte. Per lane: a prefix sum of sizes by
    start, less those freed by B's start (by end, `searchsorted`). O(n·k·log n)."""
    import numpy as np

    if not slots:
        return 0
    arrays = arrays or LaneArrays.of(slots)
    bound = 0
    for lane, on in arrays.on_lane.items():
        if lane >= arrays.ends.shape[1]:
            continue  # `conflict_graph` finds no conflict on such a lane
        ids = np.array(on, dtype=np.int64)
        starts = arrays.starts[ids]
        if np.any(starts[1:] <= starts[:-1]):
            return 0  # two slots of one start conflict with neither: no bound claimed
        sizes = arrays.sizes[ids]
        # A slot free on the lane when (or before) it starts conflicts with no later slot there.
        ends = np.maximum(arrays.ends[ids, lane], starts + 1)
        before = np.cumsum(sizes) - sizes  # sizes of the slots starting before each
        by_end = np.argsort(ends, kind="stable")
        freed = np.concatenate([[0], np.cumsum(sizes[by_end])])
        gone = freed[np.searchsorted(ends[by_end], starts, side="right")]
        bound = max(bound, int((before - gone + sizes).max()))
    return bound


def placements(
    slots: list[Slot], names: list[str], explicit_limit: int, stop_at_bound: bool = False
) -> dict[str, list[int]]:
    """Offsets per strategy, in order: each ordering with every conflict explicit (when there
    are at most `explicit_limit` conflicting pairs), then with permanent slots stacked.
    `stop_at_bound`: the strategies stop at the first whose arena is `lower_bound(slots)`,
    since none after it can be smaller."""
    import numpy as np

    results: dict[str, list[int]] = {}
    orders: dict[str, list[int]] = {}  # made when first placed: most stop at the first

    def order(name: str) -> list[int]:
        if name not in orders:
            orders[name] = _order(slots, name)
        return orders[name]

    arrays = LaneArrays.of(slots) if slots else None
    enough = lower_bound(slots, arrays) if stop_at_bound else None

    def is_enough(offsets: list[int]) -> bool:
        return enough is not None and arena_top(slots, offsets) <= enough

    full = conflict_graph(slots, explicit_limit, arrays)
    if full is not None:
        for name in names:
            results[name] = place(slots, full, order(name))
            if is_enough(results[name]):
                return results
    is_kept = arrays.permanent() if arrays is not None else []
    permanent = [i for i, kept in enumerate(is_kept) if kept]
    if permanent or full is None:
        stacked = StackedPermanents(slots, permanent)
        rest = np.array([i for i, kept in enumerate(is_kept) if not kept], dtype=np.int64)
        rest_slots = [slots[i] for i in rest]
        sub = conflict_graph(rest_slots, None, arrays.subset(rest) if arrays else None)
        assert sub is not None
        # The same adjacency over all slots (rows of `sub` follow `rest`, which is increasing);
        # permanent slots have no explicit neighbours.
        counts = np.zeros(len(slots), dtype=np.int64)
        counts[rest] = np.diff(sub[0])
        indptr = np.zeros(len(slots) + 1, dtype=np.int64)
        np.cumsum(counts, out=indptr[1:])
        indices = rest[sub[1]] if sub[1].size else sub[1]
        below = stacked.floors(slots, arrays) if arrays is not None else []
        floors = [0 if kept else b for b, kept in zip(below, is_kept)]
        for name in names:
            offsets = place(slots, (indptr, indices), order(name), floors, stacked.offsets)
            results[f"{name}, outputs stacked"] = offsets
            if is_enough(offsets):
                break
    return results


def arena_top(slots: list[Slot], offsets: list[int]) -> int:
    """The arena bytes of a placement: its highest slot's end."""
    return max((o + s.size for o, s in zip(offsets, slots)), default=0)
