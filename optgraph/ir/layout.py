"""Where a view's bytes are: the one rule memory planning, executors and codegen share.

Every buffer optgraph allocates is contiguous (row-major). A view node (reshape, transpose, slice)
*aliases* its operand's buffer when its result is itself contiguous inside that buffer; then it costs
no memory and no kernel, and keeps its base alive. Otherwise it is *materialized*: a buffer of its own,
filled by a copy kernel. A `send`'s result always aliases its operand at byte 0: no memory, and it
keeps the sent buffer alive until the transfer (its recv) is done.

    reshape(%x {shape=[2,8]})            aliases %x at byte 0
    slice(%x : f32[1,4,8] {axis=1, start=2, end=3})   aliases %x at byte 2·8·4 = 64
    transpose(%x : f32[1,1,4,8] {perm=[0,2,1,3]})     aliases %x (only a size-1 dim moves)
    transpose(%x : f32[2,3] {perm=[1,0]})             materialized

What a node touches of a buffer, for the race checker, is a `ByteSet`: an interval, or the rows
of a strided slice (a materialized slice copies only those):

    slice(%x : f32[4,8] {axis=1, start=4, end=8})     reads bytes 16 + 32·k + [0, 16), k < 4

Complexity O(rank) per node; a `ByteSet` test O(1) (two strided ones: O(runs) up to a bound).
"""

from __future__ import annotations

import math
from typing import NamedTuple

from optgraph.ir.attrs import int_attr, ints_attr
from optgraph.ir.graph import DTYPE_BYTES, Graph, Node, TensorType

VIEW_OPS = frozenset({"reshape", "transpose", "slice"})
# A send's result is its operand's buffer on the sending device, kept alive until the transfer is
# done (docs/ir.md, "Devices"): an alias at byte 0 for lifetimes and memory plans.
ALIAS_OPS = VIEW_OPS | {"send"}


def alias_offset(node: Node, operand_type: TensorType) -> int | None:
    """Byte offset of the view's result inside its operand's buffer, or None if not an alias."""
    if node.op in ("reshape", "send"):
        return 0
    if node.op == "transpose":
        perm = ints_attr(node.attrs, "perm", ())
        moved = [d for d in perm if operand_type.shape[d] != 1]
        return 0 if moved == sorted(moved) else None
    if node.op == "slice":
        rank = operand_type.rank
        axis = int_attr(node.attrs, "axis", 0)
        axis = axis + rank if axis < 0 else axis
        if math.prod(operand_type.shape[:axis]) != 1:
            return None
        start = int_attr(node.attrs, "start", 0)
        inner = math.prod(operand_type.shape[axis + 1 :])
        return start * inner * DTYPE_BYTES[operand_type.dtype]
    return None


# Two strided sets are compared run by run up to this many runs of the sparser one; beyond, by
# the intervals around them (conservative: never misses a shared byte).
RUN_LIMIT = 64


class ByteSet(NamedTuple):
    """Bytes of a buffer: the runs [lo + k·period, lo + k·period + run) for k >= 0 that start
    below `hi` (the last one ends at `hi`); `period` 0: the interval [lo, hi). Empty when
    lo >= hi."""

    lo: int
    hi: int
    period: int = 0
    run: int = 0

    def shifted(self, by: int) -> ByteSet:
        return self._replace(lo=self.lo + by, hi=self.hi + by)

    def meets(self, a: int, b: int) -> bool:
        """Whether one of these bytes lies in [a, b)."""
        lo, hi = max(self.lo, a), min(self.hi, b)
        if lo >= hi:
            return False
        if self.period == 0:
            return True
        first = lo - (lo - self.lo) % self.period  # the start of the run at or before lo
        return lo < first + self.run or first + self.period < hi

    def runs(self) -> int:
        if self.lo >= self.hi:
            return 0
        return 1 if self.period == 0 else (self.hi - self.lo + self.period - 1) // self.period

    def intersects(self, other: ByteSet) -> bool:
        """Whether the two sets share a byte: exact, except two strided sets of more than
        `RUN_LIMIT` runs each, which are compared by their intervals."""
        if self.period == 0:
            return other.meets(self.lo, self.hi)
        if other.period == 0:
            return self.meets(other.lo, other.hi)
        few, many = (self, other) if self.runs() <= other.runs() else (other, self)
        if few.runs() > RUN_LIMIT:
            return max(self.lo, other.lo) < min(self.hi, other.hi)
        return any(many.meets(s, s + few.run) for s in range(few.lo, few.hi, few.period))


def slice_bytes(node: Node, operand_type: TensorType) -> ByteSet | None:
    """The bytes of its operand's buffer a `slice` node reads (a materialized slice copies
    exactly these; an aliasing one is them), or None where that is all of them (or the dtype
    has no per-element size). O(rank)."""
    size = DTYPE_BYTES.get(operand_type.dtype)
    shape = operand_type.shape
    if node.op != "slice" or size is None or not shape:
        return None
    axis = int_attr(node.attrs, "axis", 0)
    axis = axis + len(shape) if axis < 0 else axis
    start, end = int_attr(node.attrs, "start", 0), int_attr(node.attrs, "end", shape[axis])
    inner = math.prod(shape[axis + 1 :]) * size
    period, lo, run = shape[axis] * inner, start * inner, (end - start) * inner
    outer = math.prod(shape[:axis])
    if run == period:
        return None
    if outer == 0 or run == 0:
        return ByteSet(0, 0)
    if outer == 1:
        return ByteSet(lo, lo + run)
    return ByteSet(lo, (outer - 1) * period + lo + run, period, run)


def is_alias(node: Node, operand_type: TensorType) -> bool:
    return node.op in ALIAS_OPS and alias_offset(node, operand_type) is not None


def alias_roots(graph: Graph) -> dict[str, tuple[str, int]]:
    """For every value that aliases another buffer: (root buffer value, byte offset in it).

    Chains of aliasing views resolve to the buffer that owns the bytes (a node result, an input or
    a weight). Values that own their bytes are absent. Computed once per graph (graphs are
    immutable; a pass, its analyses and the report ask for the same graph's roots several times)
    and copied for each caller.
    """
    cached: dict[str, tuple[str, int]] | None = graph.__dict__.get(ALIAS_ROOTS)
    if cached is None:
        cached = graph.__dict__[ALIAS_ROOTS] = _alias_roots(graph)
    return dict(cached)


def alias_views(graph: Graph) -> dict[str, list[tuple[str, int]]]:
    """`alias_roots` inverted: for every buffer some value aliases, those values and their byte
    offsets in it, in issue order. O(V)."""
    views: dict[str, list[tuple[str, int]]] = {}
    for view, (root, offset) in alias_roots(graph).items():
        views.setdefault(root, []).append((view, offset))
    return views


# Where a graph keeps its alias roots, in its instance `__dict__` (outside the dataclass fields,
# like `functools.cached_property`: equality and `replace` never see it).
ALIAS_ROOTS = "_alias_roots"


def _alias_roots(graph: Graph) -> dict[str, tuple[str, int]]:
    types = graph.value_types()
    roots: dict[str, tuple[str, int]] = {}
    for node in graph.nodes:
        if node.op not in ALIAS_OPS or not node.operands:
            continue
        base = node.operands[0]
        offset = alias_offset(node, types[base])
        if offset is None:
            continue
        root, base_offset = roots.get(base, (base, 0))
        roots[node.name] = (root, base_offset + offset)
    return roots
