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

Complexity O(rank) per node.
"""

from __future__ import annotations

import math

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
