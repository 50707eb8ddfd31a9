"""Shape and dtype rules of the mask and selection ops: comparisons, `not`, `where`, `clip`.

Same contract as `op_rules`: `rule(node, operand_types, attrs) -> TensorType`, raising
`VerifyError` at the node's span with a message naming the op and the conflicting facts:

    %m = less(%x, %i) : bool[4]     (%x : f32[4], %i : i32[4])
    ->  less: operand dtypes differ (f32 vs i32)
"""

from __future__ import annotations

from optgraph.ir.graph import FLOAT_DTYPES, Node, TensorType
from optgraph.ir.op_rules import Attrs, Types, broadcast_shapes, fail


def _broadcast_all(node: Node, types: Types) -> tuple[int, ...]:
    shape: tuple[int, ...] | None = types[0].shape
    for t in types[1:]:
        assert shape is not None
        merged = broadcast_shapes(shape, t.shape)
        if merged is None:
            others = " with ".join(str(u) for u in types)
            fail(node, f"cannot broadcast {others}")
        shape = merged
    assert shape is not None
    return shape


def compare(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """equal, less, greater, less_equal, greater_equal: operands of one dtype (any, bool included
    for equal), a bool result."""
    a, b = types
    if a.dtype != b.dtype:
        fail(node, f"operand dtypes differ ({a.dtype} vs {b.dtype})")
    if a.dtype == "bool" and node.op != "equal":
        fail(node, f"expected a numeric operand, got {a} (bools are only compared with equal)")
    return TensorType("bool", _broadcast_all(node, types))


def logical_not(node: Node, types: Types, attrs: Attrs) -> TensorType:
    if types[0].dtype != "bool":
        fail(node, f"expected a bool operand, got {types[0]}")
    return types[0]


def logical_binary(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """and, or: two bool operands, a bool result of their broadcast shape."""
    for t in types:
        if t.dtype != "bool":
            fail(node, f"expected bool operands, got {t}")
    return TensorType("bool", _broadcast_all(node, types))


def where(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """where(cond, a, b): cond is bool; a and b share a dtype; all three broadcast together."""
    cond, a, b = types
    if cond.dtype != "bool":
        fail(node, f"the condition must be bool, got {cond}")
    if a.dtype != b.dtype:
        fail(node, f"the two choices' dtypes differ ({a.dtype} vs {b.dtype})")
    return TensorType(a.dtype, _broadcast_all(node, types))


def clip(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """clip(x) {min, max}: a float x; at least one bound; min <= max when both are given."""
    x = types[0]
    if x.dtype not in FLOAT_DTYPES:
        fail(node, f"expected a float operand, got {x}")
    low, high = attrs.get("min"), attrs.get("max")
    if low is None and high is None:
        fail(node, "needs attribute 'min', 'max' or both")
    if low is not None and high is not None and float(low) > float(high):  # type: ignore[arg-type]
        fail(node, f"attribute 'min' ({low}) is greater than 'max' ({high})")
    return x
