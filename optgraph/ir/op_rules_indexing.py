"""Shape and dtype rules of the indexing ops: `expand`, `tile`, `pad`, `cumsum`, `argmax`.

Same contract as `op_rules`: `rule(node, operand_types, attrs) -> TensorType`, raising
`VerifyError` at the node's span with a message naming the op and the conflicting facts:

    %y = expand(%x) {shape = [4, 3]} : f32[4,3]     (%x : f32[2,3])
    ->  expand: cannot broadcast f32[2,3] to [4,3]
"""

from __future__ import annotations

from optgraph.ir.graph import Node, TensorType
from optgraph.ir.op_rules import Attrs, Types, broadcast_shapes, fail, normalize_axis, shape_text


def _ints(attrs: Attrs, key: str) -> tuple[int, ...]:
    value = attrs[key]
    assert isinstance(value, tuple)
    return value


def expand(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """expand(x) {shape}: x broadcast (NumPy rules) to exactly `shape`."""
    x, shape = types[0], _ints(attrs, "shape")
    if min(shape, default=0) < 0:
        fail(node, f"attribute 'shape' has a negative size: {shape_text(shape)}")
    if len(shape) < x.rank or broadcast_shapes(x.shape, shape) != shape:
        fail(node, f"cannot broadcast {x} to {shape_text(shape)}")
    return x.with_shape(shape)


def tile(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """tile(x) {repeats}: one repeat count per axis of x; axis d grows to shape[d]·repeats[d]."""
    x, repeats = types[0], _ints(attrs, "repeats")
    if len(repeats) != x.rank:
        fail(node, f"attribute 'repeats' has {len(repeats)} values for {x} (one per axis)")
    if min(repeats, default=1) < 0:
        fail(node, f"attribute 'repeats' has a negative count: {shape_text(repeats)}")
    return x.with_shape(d * r for d, r in zip(x.shape, repeats))


def pad(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """pad(x) {pads, value}: pads = [before_0, .., before_n-1, after_0, .., after_n-1] (ONNX
    order), each >= 0; the new elements hold `value`."""
    x, pads = types[0], _ints(attrs, "pads")
    if len(pads) != 2 * x.rank:
        fail(node, f"attribute 'pads' has {len(pads)} values for {x} (2 per axis)")
    if min(pads, default=0) < 0:
        fail(node, f"attribute 'pads' has a negative count: {shape_text(pads)}")
    if x.dtype == "bool":
        fail(node, f"expected a numeric operand, got {x}")
    r = x.rank
    return x.with_shape(d + pads[i] + pads[r + i] for i, d in enumerate(x.shape))


def _numeric_axis(node: Node, x: TensorType, attrs: Attrs) -> int:
    """The normalized `axis` of a numeric operand of rank >= 1 (cumsum, argmax)."""
    if x.dtype == "bool":
        fail(node, f"expected a numeric operand, got {x}")
    if x.rank == 0:
        fail(node, f"expected an operand of rank >= 1, got {x}")
    axis = attrs["axis"]
    assert isinstance(axis, int)
    return normalize_axis(node, axis, x)


def cumsum(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """cumsum(x) {axis}: running sums along `axis`, like x (numeric)."""
    x = types[0]
    _numeric_axis(node, x, attrs)
    return x


def argmax(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """argmax(x) {axis, keepdims}: i64 index of the first maximum along `axis`."""
    x = types[0]
    a = _numeric_axis(node, x, attrs)
    if x.shape[a] == 0:
        fail(node, f"the empty axis {a} of {x} has no maximum")
    if attrs["keepdims"]:
        return TensorType("i64", tuple(1 if i == a else d for i, d in enumerate(x.shape)))
    return TensorType("i64", tuple(d for i, d in enumerate(x.shape) if i != a))
