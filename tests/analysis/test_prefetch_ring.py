"""The prefetch ring: offsets in bounds and aligned, and each segment's occupants exactly the
segments that last wrote one of its bytes (checked against a byte-by-byte owner map)."""

from __future__ import annotations

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from optgraph.analysis.arena_packing import ALIGNMENT
from optgraph.analysis.prefetch_ring import place_in_ring, ring_window

UNIT = ALIGNMENT  # segment sizes are whole aligned weights


def _owners_brute_force(sizes: list[int], offsets: list[int], ring: int) -> list[list[int]]:
    """Per segment, the earlier segments owning a byte of its range just before it is written."""
    owner = [-1] * ring
    out = []
    for z, (size, start) in enumerate(zip(sizes, offsets)):
        out.append(sorted({owner[b] for b in range(start, start + size) if owner[b] >= 0}))
        for b in range(start, start + size):
            owner[b] = z
    return out


@given(
    units=st.lists(st.integers(1, 6), min_size=1, max_size=14),
    extra=st.integers(0, 10),
)
@example(units=[3, 5, 4], extra=0)  # the third wraps and overlaps the second's first bytes
@example(units=[1, 1, 1, 1, 2, 2], extra=0)
def test_offsets_and_occupants(units: list[int], extra: int) -> None:
    sizes = [u * UNIT for u in units]
    ring = max(sizes) + extra * UNIT
    placed = place_in_ring(sizes, ring)
    for size, start in zip(sizes, placed.offsets):
        assert start % ALIGNMENT == 0 and 0 <= start and start + size <= ring
    assert placed.occupants == _owners_brute_force(sizes, placed.offsets, ring)
    # Laid one after another: a segment starts where the previous ended, or at 0 when it would
    # run past the end.
    for z in range(1, len(sizes)):
        end = placed.offsets[z - 1] + sizes[z - 1]
        assert placed.offsets[z] == (end if end + sizes[z] <= ring else 0)


def test_small_segments_share_the_ring_of_two_large_ones() -> None:
    mib = 1 << 20
    sizes = [8 * mib, 2 * mib, 2 * mib, 8 * mib, 22 * mib, 22 * mib]
    placed = place_in_ring(sizes, 44 * mib)
    assert placed.offsets == [0, 8 * mib, 10 * mib, 12 * mib, 20 * mib, 0]
    assert placed.occupants[:5] == [[], [], [], [], []]  # five copies ahead, nothing to wait for
    assert placed.occupants[5] == [0, 1, 2, 3, 4]


def test_window_is_the_largest_run_of_depth_sizes() -> None:
    assert ring_window([1, 1, 16], 2) == 17
    assert ring_window([4, 4, 4], 2) == 8
    assert ring_window([4, 4, 4], 5) == 12
    assert ring_window([7], 1) == 7
    assert ring_window([], 2) == 0


def test_a_segment_larger_than_the_ring_is_refused() -> None:
    with pytest.raises(ValueError, match="does not fit"):
        place_in_ring([UNIT, 3 * UNIT], 2 * UNIT)
