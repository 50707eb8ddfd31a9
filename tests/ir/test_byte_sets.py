"""`layout.ByteSet` and `layout.slice_bytes` against byte sets enumerated by brute force: the
bytes a slice reads (contiguous or strided), whether they meet an interval, whether two sets
share a byte (exact up to `RUN_LIMIT` runs, never missing a shared byte beyond)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

import optgraph as og
from optgraph.ir.layout import RUN_LIMIT, ByteSet, slice_bytes
from tests.support.property_examples import examples
from tests.support.touched_bytes import read_bytes


def _members(s: ByteSet) -> set[int]:
    if s.period == 0:
        return set(range(s.lo, s.hi))
    return {b for k in range(s.lo, s.hi, s.period) for b in range(k, k + s.run)}


@st.composite
def byte_sets(draw: st.DrawFn) -> ByteSet:
    lo = draw(st.integers(0, 40))
    if draw(st.booleans()):
        return ByteSet(lo, lo + draw(st.integers(0, 40)))
    period = draw(st.integers(2, 12))
    run = draw(st.integers(1, period - 1))
    count = draw(st.integers(1, 2 * RUN_LIMIT if draw(st.booleans()) else 5))
    return ByteSet(lo, lo + (count - 1) * period + run, period, run)


@settings(max_examples=examples(300))
@given(s=byte_sets(), a=st.integers(0, 200), width=st.integers(0, 60))
def test_meets_is_exact(s: ByteSet, a: int, width: int) -> None:
    assert s.meets(a, a + width) == bool(_members(s) & set(range(a, a + width)))


@settings(max_examples=examples(300))
@given(s=byte_sets(), t=byte_sets())
def test_intersects_is_exact_or_conservative(s: ByteSet, t: ByteSet) -> None:
    shared = bool(_members(s) & _members(t))
    if min(s.runs(), t.runs()) <= RUN_LIMIT:
        assert s.intersects(t) == shared == t.intersects(s)
    else:
        assert s.intersects(t) or not shared  # sound: a shared byte is never missed


@settings(max_examples=examples(200))
@given(
    shape=st.lists(st.integers(1, 4), min_size=1, max_size=4),
    data=st.data(),
)
def test_slice_bytes_are_the_elements_it_reads(shape: list[int], data: st.DataObject) -> None:
    axis = data.draw(st.integers(0, len(shape) - 1))
    start = data.draw(st.integers(0, shape[axis]))
    end = data.draw(st.integers(start, shape[axis]))
    out = [end - start if i == axis else d for i, d in enumerate(shape)]
    dims = ",".join(map(str, shape))
    cut = ",".join(map(str, out))
    graph = og.parse(
        f"""graph g {{
  input %x : f32[{dims}]
  %a = neg(%x) : f32[{dims}]
  %s = slice(%a) {{axis = {axis}, end = {end}, start = {start}}} : f32[{cut}]
  %y = neg(%s) : f32[{cut}]
  output %y
}}"""
    )
    node = graph.nodes[1]
    found = slice_bytes(node, graph.value_types()["a"])
    expected = read_bytes(node, "a", graph.value_types(), {})
    if expected is None:  # every byte of %a
        assert found is None
    else:
        assert found is not None and _members(found) == set(expected)
