"""The sinks of attention written out (gpt-oss), for `raising_attention`: the softmax over the
scores and one more column, a logit per query head, its row maximum subtracted first, and that
column dropped after it:

    %c = concat(%scores, expand(reshape(%s))) {axis = -1}      (%s [Hq]: the column [B,Hq,Sq,1])
    %p = softmax(sub(%c, max(%c) {axes = [-1], keepdims = true}))
    %o = matmul(slice(%p) {axis = 3, start = 0, end = Skv}, %v)
    ->  %o = attention(%q, %k, %v, %s) {sinks = true}

`kept_keys` reads the slice (through casts), `sink_column` the softmax's input (the shift by the
row maximum passed over: softmax(c - max(c)) is softmax(c)), `sinks_operand` the column: an
`expand` of a value aligned with the head axis (the model's parameter read directly, reshaped to
`[Hq]` where it is not), or a known column equal along batch and queries (the ONNX importer
folds the reshape and expand into one initializer: its values per head become a constant). A
column that differs along the queries, or a slice that keeps the column, is left alone. Cost:
O(1) nodes followed, plus one pass over a known column.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from optgraph.errors import Span
from optgraph.frontends.draft import Draft
from optgraph.frontends.raising_probe import known_value, producer_of
from optgraph.ir.graph import AttrValue, Node, TensorType

Producers = dict[str, Node]


def _last_axis(attrs: Mapping[str, AttrValue], key: str, rank: int) -> bool:
    value = attrs.get(key)
    value = value[0] if isinstance(value, tuple) and len(value) == 1 else value
    return value in (-1, rank - 1)


def kept_keys(draft: Draft, name: str, producers: Producers) -> str | None:
    """The probabilities over the keys and one more column when `name` is their first Skv
    columns (a `slice` of the last axis from 0, through casts)."""
    while (cast := producer_of(producers, name, "cast")) is not None:
        name = cast.operands[0]
    kept = producer_of(producers, name, "slice")
    if kept is None or kept.type is None or kept.type.rank != 4:
        return None
    full = draft.type_of(kept.operands[0])
    skv = kept.type.shape[3]
    if not _last_axis(kept.attrs, "axis", 4) or kept.attrs.get("start", 0) != 0:
        return None
    if kept.attrs.get("end") not in (skv, skv - full.shape[3]) or full.shape[3] != skv + 1:
        return None
    return kept.operands[0]


def sink_column(draft: Draft, logits: str | None, producers: Producers) -> tuple[str, str] | None:
    """(the scores, the sink column) when the softmax input `logits` is their concatenation on
    the last axis, with or without the row maximum subtracted."""
    shifted = logits and producer_of(producers, logits, "sub")
    if shifted:  # softmax(c - max(c)) is softmax(c)
        top = producer_of(producers, shifted.operands[1], "max")
        if top and top.operands[0] == shifted.operands[0] and top.attrs.get("keepdims"):
            logits = shifted.operands[0] if _last_axis(top.attrs, "axes", 4) else None
    joined = logits and producer_of(producers, logits, "concat")
    if not joined or len(joined.operands) != 2 or not _last_axis(joined.attrs, "axis", 4):
        return None
    scores, column = joined.operands
    if draft.type_of(column).shape[3] != 1:
        return None
    return scores, column


def sinks_operand(
    draft: Draft, column: str, q: TensorType, producers: Producers, span: Span | None
) -> tuple[str, list[Node]] | None:
    """(the sinks [Hq], new nodes) when the column `[B,Hq,Sq,1]` repeats one value per query head
    (an `expand` of a value shaped `[1,Hq,1,1]` or `[Hq,1,1]`)."""
    hq = q.shape[1]
    while (grown := producer_of(producers, column, "expand")) is not None:
        column = grown.operands[0]
    t = draft.type_of(column)
    if t.dtype not in ("f32", q.dtype):
        return None
    if (1,) * (4 - t.rank) + t.shape != (1, hq, 1, 1):
        return _known_sinks(draft, column, hq)
    flat = producer_of(producers, column, "reshape")
    if flat is not None and draft.type_of(flat.operands[0]).shape == (hq,):
        return flat.operands[0], []
    if t.shape == (hq,):
        return column, []
    name = draft.fresh(f"{column}.sinks")
    sinks = TensorType(t.dtype, (hq,))
    draft.types[name] = sinks
    return name, [Node(name, "reshape", (column,), {"shape": (hq,)}, sinks, span=span)]


def _known_sinks(draft: Draft, column: str, hq: int) -> tuple[str, list[Node]] | None:
    """A known column `[B,Hq,Sq,1]` (the ONNX importer folds the sinks' reshape and expand into
    one initializer) equal along B and Sq: its values of batch row 0 and query 0 as a constant."""
    value = known_value(draft, column)
    if value is None or value.ndim != 4 or value.shape[1] != hq or value.shape[3] != 1:
        return None
    if not np.array_equal(value, np.broadcast_to(value[:1, :, :1], value.shape)):
        return None
    return draft.constant(value[0, :, 0, 0].copy(), f"{column}.sinks"), []


__all__ = ["kept_keys", "sink_column", "sinks_operand"]
