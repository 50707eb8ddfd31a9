"""Shape, dtype and cost rules of the collective ops: `all_reduce`, `all_gather`, `send`, `recv`.

Same contract as `op_rules`: `rule(node, operand_types, attrs) -> TensorType`, raising
`VerifyError` at the node's span. These rules see one node only; where each operand and the node
live (operand i on `group[i]`, the recv on the send's `to`) is checked by `verify_devices`:

    %s = all_reduce(%a, %b) {group = [0, 1]} : f32[4]     (%a : f32[4], %b : f32[8])
    ->  all_reduce: operand types differ (f32[4] vs f32[8])

Costs are per participating device: what one device reads and writes (the bytes it sends or
receives over the link are the same order), no flops except the reduction's adds.
"""

from __future__ import annotations

from optgraph.ir.graph import Node, TensorType
from optgraph.ir.op_costs import Cost
from optgraph.ir.op_rules import Attrs, Types, fail, normalize_axis


def _group(node: Node, types: Types, attrs: Attrs) -> tuple[int, ...]:
    group = attrs["group"]
    assert isinstance(group, tuple)
    for device in group:
        if device < 0:
            fail(node, f"group member {device} is negative")
    if len(set(group)) != len(group):
        twice = next(d for d in group if group.count(d) > 1)
        fail(node, f"group member {twice} is listed twice")
    if len(group) != len(types):
        fail(node, f"group {list(group)} has {len(group)} members but {len(types)} operands")
    return group


def _same_types(node: Node, types: Types) -> TensorType:
    first = types[0]
    for t in types[1:]:
        if t != first:
            fail(node, f"operand types differ ({first} vs {t})")
    return first


def all_reduce(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """all_reduce(op_0, ..., op_n-1) {group}: operand i on group[i]; their sum, same type."""
    _group(node, types, attrs)
    first = _same_types(node, types)
    if first.dtype == "bool":
        fail(node, f"expected a numeric operand, got {first}")
    return first


def all_gather(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """all_gather(op_0, ..., op_n-1) {group, axis}: operands of one type, concatenated."""
    _group(node, types, attrs)
    first = _same_types(node, types)
    if first.rank == 0:
        fail(node, f"cannot gather scalars {first}")
    axis_attr = attrs["axis"]
    assert isinstance(axis_attr, int)
    axis = normalize_axis(node, axis_attr, first)
    return first.with_shape(d * len(types) if i == axis else d for i, d in enumerate(first.shape))


def _point_to_point(node: Node, types: Types, attrs: Attrs, key: str) -> TensorType:
    peer = attrs[key]
    assert isinstance(peer, int)
    if peer < 0:
        fail(node, f"attribute '{key}' must be a device id, got {peer}")
    return types[0]


def send(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """send(x) {to}: the result aliases x (no new buffer); one recv on device `to` reads it."""
    return _point_to_point(node, types, attrs, "to")


def recv(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """recv(t) {from}: t is a send's result; a new buffer on the receiving device."""
    return _point_to_point(node, types, attrs, "from")


def all_reduce_cost(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    """A ring all-reduce: each device reads and writes about 2x its buffer, one add per element."""
    return Cost(4 * result.nbytes, result.numel)


def all_gather_cost(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    """Each device writes the whole result and reads its own part."""
    return Cost(result.nbytes + types[0].nbytes, 0)


def point_to_point_cost(node: Node, types: Types, result: TensorType, attrs: Attrs) -> Cost:
    """The buffer read on the sender, written on the receiver."""
    return Cost(result.nbytes, 0)
