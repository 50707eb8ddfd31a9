"""Raising of partial rotary: a rope over the first rotary_dim entries of each head, joined with
the entries it leaves, becomes one rope with `rotary_dim` (runs after the rope rule of
`raising.py`, which raised the rotated part alone).

    %lo = slice(%x) {axis = 3, start = 0, end = 16}; %hi = slice(%x) {axis = 3, start = 16, end = 64}
    %r = rope(%lo, %pos) {theta = ...}; %y = concat(%r, %hi) {axis = 3}
    ->  %y = rope(%x, %pos) {theta = ..., rotary_dim = 16}

Also with x in `[B,H,S,D]`, where the raised rope sits between two transposes. Not handled: the
pass-through part first, or a slice that does not cover the rest of the head.
"""

from __future__ import annotations

from optgraph.frontends.draft import Draft
from optgraph.ir.graph import Node

_SWAP = (0, 2, 1, 3)


def _slice_of(node: Node | None, start: int, end: int) -> str | None:
    """The operand of `node` when it is x[..., start:end] of a 4-D x."""
    if node is None or node.op != "slice" or node.attrs.get("axis") not in (3, -1):
        return None
    if (node.attrs.get("start"), node.attrs.get("end")) != (start, end):
        return None
    return node.operands[0]


def _swapped(node: Node | None, producers: dict[str, Node]) -> Node | None:
    """The producer of `node`'s operand when `node` swaps axes 1 and 2."""
    if node is None or node.op != "transpose" or node.attrs.get("perm") != _SWAP:
        return None
    return producers.get(node.operands[0])


def partial_rope(draft: Draft, node: Node, producers: dict[str, Node]) -> list[Node] | None:
    if node.op != "concat" or len(node.operands) != 2 or node.type is None:
        return None
    if node.type.rank != 4 or node.attrs.get("axis") not in (3, -1):
        return None
    rotated, rest = (producers.get(o) for o in node.operands)
    swapped = rotated is not None and rotated.op == "transpose"
    rope = _swapped(rotated, producers) if swapped else rotated
    if rope is None or rope.op != "rope" or "rotary_dim" in rope.attrs or rope.type is None:
        return None
    rotary, head = rope.type.shape[3], node.type.shape[3]
    inner = producers.get(rope.operands[0])
    lower = _slice_of(_swapped(inner, producers) if swapped else inner, 0, rotary)
    if lower is None or lower != _slice_of(rest, rotary, head):
        return None
    if draft.type_of(lower) != node.type:
        return None
    attrs = {**rope.attrs, "rotary_dim": rotary}
    if not swapped:
        return [
            Node(node.name, "rope", (lower, rope.operands[1]), attrs, node.type, span=node.span)
        ]
    x_type = node.type.with_shape(node.type.shape[i] for i in _SWAP)
    xt, rt = draft.fresh(f"{node.name}.bshd"), draft.fresh(f"{node.name}.rope")
    perm = {"perm": _SWAP}
    return [
        Node(xt, "transpose", (lower,), perm, x_type, span=node.span),
        Node(rt, "rope", (xt, rope.operands[1]), attrs, x_type, span=node.span),
        Node(node.name, "transpose", (rt,), perm, node.type, span=node.span),
    ]
