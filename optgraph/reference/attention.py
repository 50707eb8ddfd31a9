# NumPy's stubs type most array expressions as Any; returning them is the point of a kernel.
# mypy: disable-error-code="no-any-return"
"""NumPy kernel of `attention`: the semantics of docs/ir.md, with the signature of
`kernels.KERNELS` (f16/bf16 q, k, v and a float mask arrive widened to float32).

For batch row b, query i and key j (query heads h read kv head h / (Hq / Hkv)):

- `L_b = kv_len[b]` (or `kv_len[0]`, or Skv without kv_len); keys j >= L_b are not seen;
- query i sits at position `p = L_b - Sq + i` (`causal_align = "bottom_right"`) or `p = i`
  ("top_left"); `causal` hides keys j > p, and `window = W` also keys j <= p - W;
- a bool mask hides keys where it is false;
- the score `s = (q·k)·scale`, then `C·tanh(s / C)` with `softcap = C`, then `+ mask[b,h,i,j]`
  for a float mask; a softmax over the seen keys (a score of -inf counts as weight 0);
- with `sinks`, query head h's softmax also counts a key of score `sinks[h]` (not scaled,
  capped or masked) and value zero: its weight `exp(sinks[h] - m)` joins the denominator
  (gpt-oss; transformers concatenates the sinks to the scores and drops that column after the
  softmax);
- a row whose seen keys all have weight 0, or that sees none, yields zeros.

kv_len values outside [0, Skv] raise `InputError`: bad run-time data, not a malformed graph.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from optgraph.errors import InputError
from optgraph.ir.graph import AttrValue, Node
from optgraph.ir.op_rules_attention import attention_operands

Attrs = Mapping[str, AttrValue]
F32 = np.float32


def _lengths(node: Node, value: np.ndarray | None, batch: int, skv: int) -> np.ndarray:
    """L_b for every batch row, shape [B, 1, 1, 1]."""
    if value is None:
        return np.full((batch, 1, 1, 1), skv, dtype=np.int64)
    flat = value.reshape(-1).astype(np.int64)
    for length in flat:
        if not 0 <= length <= skv:
            raise InputError(f"{node.op}: kv_len {length} out of range [0, {skv}]", node.span)
    return np.broadcast_to(flat, (batch,)).reshape(batch, 1, 1, 1)


def visible_keys(
    attrs: Attrs, lengths: np.ndarray, sq: int, skv: int, mask: np.ndarray | None
) -> np.ndarray:
    """Which keys each query row sees, broadcastable to [B, Hq, Sq, Skv] (bool)."""
    keys = np.arange(skv)[None, None, None, :]
    rows = np.arange(sq)[None, None, :, None]
    visible = keys < lengths
    position = rows if attrs["causal_align"] == "top_left" else lengths - sq + rows
    if attrs["causal"]:
        visible = visible & (keys <= position)
    window = attrs["window"]
    assert isinstance(window, int)
    if window:
        visible = visible & (keys > position - window)
    if mask is not None and mask.dtype == np.bool_:
        visible = visible & mask
    return visible


def attention(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    q, k, v = args[:3]
    batch, sq, d = q.shape[0], q.shape[2], q.shape[3]
    skv = k.shape[2]
    group = q.shape[1] // k.shape[1]
    k = np.repeat(k, group, axis=1)
    v = np.repeat(v, group, axis=1)
    roles = attention_operands(len(args), bool(attrs["masked"]), bool(attrs["sinks"]))
    scale_value = attrs.get("scale")
    assert scale_value is None or isinstance(scale_value, int | float)
    factor = 1.0 / math.sqrt(d) if scale_value is None else float(scale_value)
    scores = np.matmul(q, np.swapaxes(k, -1, -2)) * F32(factor)  # [B, Hq, Sq, Skv]
    softcap = attrs["softcap"]
    assert isinstance(softcap, int | float)
    if softcap:
        scores = F32(softcap) * np.tanh(scores / F32(softcap))
    mask = None if roles.mask is None else args[roles.mask]
    if mask is not None and mask.dtype != np.bool_:
        scores = scores + mask.astype(F32)
    kv_len = None if roles.kv_len is None else args[roles.kv_len]
    lengths = _lengths(node, kv_len, batch, skv)
    visible = visible_keys(attrs, lengths, sq, skv, mask)
    scores = np.where(visible, scores, F32(-np.inf))
    row_max = np.max(scores, axis=-1, keepdims=True)
    sink = None
    if roles.sinks is not None:
        sink = args[roles.sinks].astype(F32).reshape(1, -1, 1, 1)
        row_max = np.maximum(row_max, sink)
    row_max = np.where(np.isfinite(row_max), row_max, F32(0))
    e = np.where(visible, np.exp(scores - row_max), F32(0))
    total = np.sum(e, axis=-1, keepdims=True)
    if sink is not None:
        total = total + np.exp(sink - row_max)
    probs = e / np.where(total > 0, total, F32(1))
    return np.matmul(probs, v)
