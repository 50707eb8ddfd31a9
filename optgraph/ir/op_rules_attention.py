"""The attention op's operands, attributes and type rule.

Operands: `q [B,Hq,Sq,D]`, `k, v [B,Hkv,Skv,D]`, then optionally `kv_len` (`i32[1]` or `i32[B]`,
i64 too), then, with `sinks = true`, one sink logit per query head (`[Hq]`, f32 or q's dtype: a
key of that score and value zero in every row's softmax, gpt-oss), then, with `masked = true`,
the mask as the last operand (bool: true = attend, or q's float dtype: added to the scores),
broadcastable to `[B,Hq,Sq,Skv]`:

    %o = attention(%q, %k, %v, %len, %m) {masked = true, causal = true} : f16[2,8,1,64]
    %o = attention(%q, %k, %v, %len, %s) {sinks = true, causal = true} : f16[2,8,1,64]

Attributes: `causal`, `causal_align` ("bottom_right": query i sits at position L - Sq + i;
"top_left": at i), `window` (0: none; W > 0: position p sees keys p - W < j <= p, needs
`causal`), `softcap` (0: none; C > 0: scores -> C·tanh(scores / C) before the mask), `scale`, `masked`
and `sinks` (whether those operands are present).
Errors name the op and the conflicting facts:

    attention: mask f32[1,1,3,5] does not broadcast to [B,Hq,Sq,Skv] = [1,4,3,6]
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from optgraph.ir.graph import FLOAT_DTYPES, INT_DTYPES, Node, TensorType
from optgraph.ir.op_rules import Attrs, Types, fail, shape_text

ALIGNMENTS: tuple[str, ...] = ("bottom_right", "top_left")


@dataclass(frozen=True)
class AttentionOperands:
    """Positions of the optional operands of one attention node (None: absent)."""

    kv_len: int | None
    mask: int | None
    sinks: int | None = None


def attention_operands(count: int, masked: bool, sinks: bool = False) -> AttentionOperands:
    """Where kv_len, the sinks and the mask sit among `count` operands
    (q, k, v [, kv_len] [, sinks] [, mask])."""
    listed = 3 + int(sinks) + int(masked)  # the operands without kv_len
    kv_len = 3 if count == listed + 1 else None
    after = 3 if kv_len is None else 4
    return AttentionOperands(kv_len, count - 1 if masked else None, after if sinks else None)


def _check_count(node: Node, count: int, masked: bool, sinks: bool) -> None:
    listed = 3 + int(sinks) + int(masked)
    if count in (listed, listed + 1):
        return
    roles = "q, k, v [, kv_len]" + (", sinks" if sinks else "") + (", mask" if masked else "")
    flags = f"masked = {str(masked).lower()} and sinks = {str(sinks).lower()}"
    fail(node, f"{count} operands, but {flags} take {listed} or {listed + 1} ({roles})")


def _check_sinks(node: Node, t: TensorType, q: TensorType) -> None:
    heads = q.shape[1]
    if t.shape != (heads,) or t.dtype not in ("f32", q.dtype):
        dtypes = "f32" if q.dtype == "f32" else f"f32 or {q.dtype}"
        fail(node, f"sinks must be [Hq] = [{heads}] of {dtypes} (a logit per query head), got {t}")


def _check_kv_len(node: Node, t: TensorType, batch: int) -> None:
    if t.dtype not in INT_DTYPES or t.shape not in ((1,), (batch,)):
        fail(node, f"kv_len must be i32[1] or i32[B] = i32[{batch}] (or i64), got {t}")


def _check_mask(node: Node, mask: TensorType, q: TensorType, skv: int) -> None:
    if mask.dtype != "bool" and mask.dtype != q.dtype:
        fail(node, f"mask must be bool or {q.dtype} like q, got {mask}")
    b, hq, sq, _ = q.shape
    target = (b, hq, sq, skv)
    dims = mask.shape
    if len(dims) > 4 or any(d not in (1, t) for d, t in zip(reversed(dims), reversed(target))):
        fail(
            node,
            f"mask {mask} does not broadcast to [B,Hq,Sq,Skv] = {shape_text(target)}",
        )


def _check_attrs(node: Node, attrs: Attrs) -> None:
    window, softcap = attrs["window"], attrs["softcap"]
    assert isinstance(window, int) and isinstance(softcap, int | float)
    if window < 0:
        fail(node, f"window must be >= 0 (0: no window), got {window}")
    if window and not attrs["causal"]:
        fail(node, f"window = {window} needs causal = true")
    if not (math.isfinite(softcap) and softcap >= 0):
        fail(node, f"softcap must be a finite number >= 0 (0: none), got {softcap}")


def attention(node: Node, types: Types, attrs: Attrs) -> TensorType:
    q, k, v = types[:3]
    for t, role, layout in ((q, "q", "[B,Hq,Sq,D]"), (k, "k", "[B,Hkv,Skv,D]")):
        if t.rank != 4:
            fail(node, f"{role} must be {layout}, got {t}")
    if v.rank != 4:
        fail(node, f"v must be [B,Hkv,Skv,D], got {v}")
    for t in (k, v):
        if t.dtype != q.dtype:
            fail(node, f"operand dtypes differ ({q.dtype} vs {t.dtype})")
    if q.dtype not in FLOAT_DTYPES:
        fail(node, f"expected a float q, got {q}")
    if k.shape != v.shape:
        fail(node, f"k and v shapes differ ({k} vs {v})")
    if q.shape[0] != k.shape[0]:
        fail(node, f"batch sizes differ ({q.shape[0]} vs {k.shape[0]})")
    if q.shape[3] != k.shape[3]:
        fail(node, f"head dimensions differ ({q.shape[3]} vs {k.shape[3]})")
    if k.shape[1] == 0 or q.shape[1] % k.shape[1]:
        fail(node, f"query heads {q.shape[1]} are not a multiple of kv heads {k.shape[1]}")
    if k.shape[2] == 0:
        fail(node, f"attends over zero keys (k is {k})")
    masked, sinks = bool(attrs["masked"]), bool(attrs["sinks"])
    _check_count(node, len(types), masked, sinks)
    _check_attrs(node, attrs)
    roles = attention_operands(len(types), masked, sinks)
    if roles.kv_len is not None:
        _check_kv_len(node, types[roles.kv_len], q.shape[0])
    if roles.sinks is not None:
        _check_sinks(node, types[roles.sinks], q)
    if roles.mask is not None:
        _check_mask(node, types[roles.mask], q, k.shape[2])
    return q
