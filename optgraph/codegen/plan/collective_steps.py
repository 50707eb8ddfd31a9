"""Lowering one rank's collective node to a `CollectiveStep` (an NCCL call the runtime issues).

A rank graph (`codegen/rank_programs.py`) keeps each collective node with this rank's operand
only and `device` set to this rank; `collective_step` turns it into the step the runtime issues
on the node's stream, with the operand and result at their planned locations:

    %s = all_reduce(%a.d1) {group = [0, 1]} : f32[4,64] !{device = 1, stream = 0, offset = 256}
    -> CollectiveStep("s", 0, "all_reduce", group=(0, 1), rank=1, "f32", count=256,
                      src=arena+<offset of %a.d1>, dst=arena+256)

- `all_reduce`: sum, `count` = the whole tensor's elements; `all_gather`: `count` = this rank's
  chunk, `rows` = the product of the result's dimensions before `axis` (1: NCCL's rank-major
  layout is already the concatenation);
- `send {to = t}`: group (this device, t), `dst` None (the result aliases the operand);
- `recv {from = f}`: group (f, this device), `src` None.
"""

from __future__ import annotations

from collections.abc import Mapping
from math import prod

from optgraph.codegen.cuda_source import CodegenError
from optgraph.codegen.plan.steps import CollectiveStep, Extent, Location
from optgraph.ir.graph import Node, TensorType

COLLECTIVE_OPS = frozenset({"all_reduce", "all_gather", "send", "recv"})


def first_device(node: Node) -> int:
    """The device a node's single-device view runs on (a rank graph's node: its rank)."""
    return node.devices[0]


def _int_list(node: Node, key: str) -> tuple[int, ...]:
    value = node.attr(key)
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, (list, tuple)) and all(isinstance(v, int) for v in value):
        return tuple(int(v) for v in value)
    raise CodegenError(f"{node.op}: '%{node.name}' needs an integer list '{key}'", node.span)


def _int(node: Node, key: str) -> int:
    value = node.attr(key)
    if not isinstance(value, int) or isinstance(value, bool):
        raise CodegenError(f"{node.op}: '%{node.name}' needs an integer '{key}'", node.span)
    return value


def _check_buffers(
    node: Node, rank: int, rows: int, src: Location, src_bytes: int, dst: Location, dst_bytes: int
) -> None:
    """NCCL reads the operand while it writes the result: they must not overlap, except in
    NCCL's in-place forms (an all_reduce on one buffer; an all_gather whose operand is this
    rank's chunk of the result) and a gather through scratch (rows > 1: the operand is read
    into scratch before the result is written)."""
    a = Extent(src.space, src.key, src.offset, src_bytes)
    if not a.overlaps(Extent(dst.space, dst.key, dst.offset, dst_bytes)):
        return
    if node.op == "all_reduce" and src == dst:
        return
    if node.op == "all_gather" and (rows > 1 or src == dst.shifted(rank * src_bytes)):
        return
    raise CodegenError(
        f"{node.op}: '%{node.name}' is planned over its operand '%{node.operands[0]}' "
        "(NCCL reads one while writing the other); plan memory again",
        node.span,
    )


def collective_step(
    node: Node, device: int, roles: Mapping[str, Location], types: Mapping[str, TensorType]
) -> CollectiveStep:
    """The step of collective `node` as issued by `device` (`roles`: "out", "in0" locations)."""
    assert node.type is not None
    out = node.type
    if node.op in ("all_reduce", "all_gather"):
        group = _int_list(node, "group")
        if device not in group:
            raise CodegenError(
                f"{node.op}: '%{node.name}' runs on device {device}, not in its group "
                f"{list(group)}",
                node.span,
            )
        src_type = types[node.operands[0]]
        rows = 1
        if node.op == "all_gather":
            axis = _int(node, "axis") % max(len(out.shape), 1)
            rows = prod(out.shape[:axis])
        rank = group.index(device)
        _check_buffers(node, rank, rows, roles["in0"], src_type.nbytes, roles["out"], out.nbytes)
        return CollectiveStep(
            node.name, node.stream, node.op, group, group.index(device), out.dtype,
            src_type.numel, roles["in0"], roles["out"], rows,
        )  # fmt: skip
    if node.op == "send":
        pair = (device, _int(node, "to"))
        return CollectiveStep(
            node.name, node.stream, "send", pair, 0, out.dtype, out.numel, roles["in0"], None
        )
    if node.op == "recv":
        pair = (_int(node, "from"), device)
        return CollectiveStep(
            node.name, node.stream, "recv", pair, 1, out.dtype, out.numel, None, roles["out"]
        )
    raise CodegenError(f"{node.op}: not a collective op", node.span)
