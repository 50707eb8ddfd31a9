"""Raising of grouped-query attention: keys and values repeated to the query heads before the
attention (transformers' `repeat_kv`) are read by `attention` directly, which maps query head h to
kv head h // (Hq / Hkv), the same pairing as the repetition.

    %u = reshape(%k) {shape = [B, Hkv, 1, S, D]}
    %e = expand(%u) {shape = [B, Hkv, n, S, D]}
    %kr = reshape(%e) {shape = [B, Hkv·n, S, D]}
    %o = attention(%q, %kr, %vr, ...)
    ->  %o = attention(%q, %k, %v, ...)

Without it each step copies the whole cache n times over (for a KV cache of 1024 rows, 8 kv
heads of 128 and n = 4: 6 MB a layer for keys and values in f16). The repeat's nodes are left to
`dce`. Not handled: a repetition written another way (`repeat_interleave`, `cat` of copies); keys
and values must both be repeated the same way, else the attention is left as it is.
"""

from __future__ import annotations

from dataclasses import replace

from optgraph.frontends.draft import Draft
from optgraph.ir.graph import Node


def _repeated_heads(draft: Draft, name: str, producers: dict[str, Node]) -> str | None:
    """x when `name` is x `[B, H, S, D]` with each head repeated n times along axis 1."""
    merged = producers.get(name)
    if merged is None or merged.op != "reshape" or merged.type is None or merged.type.rank != 4:
        return None
    expanded = producers.get(merged.operands[0])
    if expanded is None or expanded.op != "expand" or expanded.type is None:
        return None
    unit = producers.get(expanded.operands[0])
    if unit is None or unit.op != "reshape" or unit.type is None:
        return None
    source = unit.operands[0]
    b, h, s, d = draft.type_of(source).shape if draft.type_of(source).rank == 4 else (0,) * 4
    if not h or unit.type.shape != (b, h, 1, s, d):
        return None
    n = expanded.type.shape[2] if expanded.type.rank == 5 else 0
    if expanded.type.shape != (b, h, n, s, d) or merged.type.shape != (b, h * n, s, d):
        return None
    return source


def shared_kv_heads(draft: Draft, node: Node, producers: dict[str, Node]) -> list[Node] | None:
    if node.op != "attention" or len(node.operands) < 3:
        return None
    operands = list(node.operands)
    changed = False
    for index in (1, 2):
        source = _repeated_heads(draft, operands[index], producers)
        if source is not None:
            operands[index] = source
            changed = True
    if not changed:
        return None
    k, v = (draft.type_of(operands[i]) for i in (1, 2))
    if k.shape != v.shape:  # only one of the two was repeated: keep the graph as it was
        return None
    return [replace(node, operands=tuple(operands))]


__all__ = ["shared_kv_heads"]
