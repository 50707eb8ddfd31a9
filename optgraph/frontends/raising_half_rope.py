"""Rope written on two halves with half-width tables (gpt-oss's `_apply_rotary_emb`) rewritten
into the rotate-half spelling that the rope rule of `raising.py` raises (this rule runs before
it):

    %x1 = slice(%x) {axis = 3, start = 0, end = h}; %x2 = slice(%x) {axis = 3, start = h, end = 2h}
    %y = concat(sub(mul(%x1, %c), mul(%x2, %s)), add(mul(%x2, %c), mul(%x1, %s))) {axis = 3}
    ->  %y = add(mul(%x, concat(%c, %c)), mul(concat(neg(%x2), %x1), concat(%s, %s)))

The rewrite computes the same values bit for bit (`a - b` is `a + (-b)`; each half's products
and sums are the same, in the same order), so it stands even where the rope rule then finds no
rope in the tables. Known tables (constants) are concatenated at import, so the constant-table
matcher reads them; others through a `concat` node. The products may list their factors either
way round; the tables `c` and `s` must be of one shape whose last axis is h. Not handled:
a partial rotation (halves that do not cover the head), pairs interleaved (GPT-J). Cost: O(1)
nodes looked at per concat node, plus copying a known table once.
"""

from __future__ import annotations

import numpy as np

from optgraph.frontends.draft import Draft
from optgraph.frontends.raising_probe import known_value, producer_of
from optgraph.ir.graph import Node, TensorType

Producers = dict[str, Node]
Found = tuple[str, str, str]


def _slice(node: Node | None, start: int, end: int) -> str | None:
    """x when `node` is x[..., start:end] of a 4-D x."""
    if node is None or node.op != "slice" or node.attrs.get("axis") not in (3, -1):
        return None
    if (node.attrs.get("start"), node.attrs.get("end")) != (start, end):
        return None
    return node.operands[0]


def _products(node: Node | None, producers: Producers) -> list[tuple[str, str]] | None:
    """The factor pairs of the two products `node` (a sub or an add) combines, in order."""
    if node is None:
        return None
    products = [producer_of(producers, o, "mul") for o in node.operands]
    return [(p.operands[0], p.operands[1]) for p in products if p is not None] or None


def _split(pair: tuple[str, str], producers: Producers, start: int, end: int) -> list[Found]:
    """(x, its slice [start, end), the other factor) for each factor of `pair` that is a slice."""
    found = []
    for part, other in (pair, pair[::-1]):
        x = _slice(producers.get(part), start, end)
        if x is not None:
            found.append((x, part, other))
    return found


def _table(draft: Draft, table: str, node: Node, nodes: list[Node]) -> str:
    """concat(table, table) on the last axis: a constant when the table is known."""
    t = draft.type_of(table)
    doubled = t.with_shape((*t.shape[:-1], 2 * t.shape[-1]))
    value = known_value(draft, table)
    if value is not None:
        name = draft.constant(np.concatenate([value, value], axis=-1), f"{table}.doubled")
        if table in draft.wide:
            wide = draft.wide[table]
            draft.wide[name] = np.concatenate([wide, wide], axis=-1)
        return name
    name = draft.fresh(f"{table}.doubled")
    draft.types[name] = doubled
    nodes.append(Node(name, "concat", (table, table), {"axis": -1}, doubled, span=node.span))
    return name


def half_table_rope(draft: Draft, node: Node, producers: Producers) -> list[Node] | None:
    """The rewrite rule (see the module docstring); None where the node does not match."""
    if node.op != "concat" or len(node.operands) != 2 or node.type is None:
        return None
    if node.type.rank != 4 or node.attrs.get("axis") not in (3, -1) or node.type.shape[3] % 2:
        return None
    h = node.type.shape[3] // 2
    first = _products(producer_of(producers, node.operands[0], "sub"), producers)
    second = _products(producer_of(producers, node.operands[1], "add"), producers)
    if first is None or second is None or len(first) != 2 or len(second) != 2:
        return None
    for x, x1, c in _split(first[0], producers, 0, h):
        for x_again, x2, s in _split(first[1], producers, h, 2 * h):
            if x_again != x or draft.type_of(x) != node.type:
                continue
            # the upper half x2·c + x1·s (a sum and products: either order of each)
            wanted = {frozenset((x2, c)), frozenset((x1, s))}
            if {frozenset(p) for p in second} != wanted or len(wanted) != 2:
                continue
            ct, st = draft.type_of(c), draft.type_of(s)
            if ct != st or ct.rank > 4 or ct.shape[-1] != h:
                continue
            return _rotate_half(draft, node, x, x1, x2, (c, s))
    return None


def _rotate_half(
    draft: Draft, node: Node, x: str, x1: str, x2: str, tables: tuple[str, str]
) -> list[Node]:
    """add(mul(x, concat(c, c)), mul(concat(neg(x2), x1), concat(s, s))) named as `node`."""
    assert node.type is not None
    nodes: list[Node] = []
    cos, sin = (_table(draft, t, node, nodes) for t in tables)
    half = draft.type_of(x2)
    full = node.type

    def add_node(hint: str, op: str, operands: tuple[str, ...], t: TensorType, **attrs: int) -> str:
        name = draft.fresh(f"{node.name}.{hint}")
        draft.types[name] = t
        nodes.append(Node(name, op, operands, dict(attrs), t, span=node.span))
        return name

    negated = add_node("neg", "neg", (x2,), half)
    rotated = add_node("rotated", "concat", (negated, x1), full, axis=-1)
    plain = add_node("cos", "mul", (x, cos), full)
    turned = add_node("sin", "mul", (rotated, sin), full)
    return [*nodes, Node(node.name, "add", (plain, turned), {}, full, span=node.span)]


__all__ = ["half_table_rope"]
