"""Where each streamed segment lands in the prefetch ring, and whose bytes its copy overwrites.

plan-prefetch copies the streamed segments, in issue order, into one ring of bytes above the arena.
Segment z goes right after segment z - 1; one that would run past the end of the ring starts over
at its beginning (the tail it skips stays unused for that lap). Its copy may start once every
read of the segments whose bytes it overwrites has happened: those are the *occupants* of its
byte range, the latest segment written to each of its bytes. So small segments run several ahead
in the same bytes where N equal slots of the largest segment would hold N of them:

    ring of 44 MiB, segments of 8, 2, 2, 8, 22, 22 MiB (attention matrices, then FFN ones):
    offsets 0, 8, 10, 12, 20, 0: the sixth copy waits for the reads of the first five only,
    where two slots of 22 MiB would make the third copy wait for the first one's reads.

`ring_window` is the least ring that keeps `depth` consecutive segments apart in the common case
(the largest sum of `depth` consecutive sizes); a ring of `depth` equal segments is exactly
`depth` slots. Complexity: O(S + overlaps) to place S segments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from optgraph.analysis.arena_packing import ALIGNMENT, align_up


@dataclass(frozen=True)
class RingPlacement:
    """Segment z's offset in the ring and the earlier segments whose bytes it overwrites."""

    offsets: list[int]
    occupants: list[list[int]]  # per segment, ascending indices of the segments it overwrites


def ring_window(sizes: Sequence[int], depth: int) -> int:
    """The largest sum of `depth` consecutive sizes (all of them when fewer): the ring bytes that
    hold any `depth` segments in a row at once (one slot of the largest for `depth` 1)."""
    if not sizes:
        return 0
    k = min(depth, len(sizes))
    total = best = sum(sizes[:k])
    for i in range(k, len(sizes)):
        total += sizes[i] - sizes[i - k]
        best = max(best, total)
    return best


def place_in_ring(sizes: Sequence[int], ring: int) -> RingPlacement:
    """Offsets of segments of `sizes` laid one after another in a ring of `ring` bytes (each
    aligned to `ALIGNMENT`), and each one's occupants. Every size must fit the ring."""
    offsets: list[int] = []
    occupants: list[list[int]] = []
    # Occupied intervals as [start, end, segment], kept sorted by start and disjoint.
    held: list[list[int]] = []
    cursor = 0
    for z, size in enumerate(sizes):
        if size > ring:
            raise ValueError(f"a {size}-byte segment does not fit a {ring}-byte ring")
        start = align_up(cursor, ALIGNMENT)
        if start + size > ring:
            start = 0
        end = start + size
        overwritten: set[int] = set()
        kept: list[list[int]] = []
        for a, b, owner in held:
            if b <= start or a >= end or size == 0:
                kept.append([a, b, owner])
                continue
            overwritten.add(owner)
            if a < start:
                kept.append([a, start, owner])
            if b > end:
                kept.append([end, b, owner])
        if size:
            kept.append([start, end, z])
        held = sorted(kept)
        offsets.append(start)
        occupants.append(sorted(overwritten))
        cursor = end
    return RingPlacement(offsets, occupants)
