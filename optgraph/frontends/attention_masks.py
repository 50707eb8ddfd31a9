"""Attention masks that are a pure function of positions, raised into attention's attributes.

A model that builds its mask from positions alone (transformers' causal and sliding-window masks
in a prefill without padding, `torch.ones(L, S).tril()`, ONNX exports' constant causal masks)
reaches the importer as a constant once shapes are static. When that constant says exactly what
`causal`, `causal_align` and `window` say, the mask operand is dropped:

    attn_mask = (j <= i) & (j > i - 4)     (a constant bool[Sq, Skv], Sq = Skv)
    ->  attention(q, k, v) {causal = true, window = 4}

The mask must be the same for every batch row and head (leading axes of size 1, or all equal), and
bool (true = attend) or float with only 0 and hiding values: -inf, or finite ones at or below
`HIDDEN` (transformers fills with the dtype's lowest value, -65504 in f16). A finite hiding value
gives a key the weight exp(s + m - max) = 0 exactly in f32 as long as the row sees some key, which
every causal pattern does. Anything else stays a mask operand: correct, and the kernels read it.
"""

from __future__ import annotations

import numpy as np

from optgraph.ir.graph import AttrValue

HIDDEN = -65504.0  # float16's lowest value: a float mask at or below it hides the key


def shared_pattern(mask: np.ndarray, sq: int, skv: int) -> np.ndarray | None:
    """The [Sq, Skv] bool pattern of a constant mask shared by every batch row and head."""
    if mask.ndim > 4 or mask.ndim == 0:
        return None
    if mask.dtype == np.bool_:
        seen = mask
    elif np.all((mask == 0) | (mask <= HIDDEN)):
        seen = mask == 0
    else:
        return None
    lead = seen.reshape((-1,) + seen.shape[-2:]) if seen.ndim >= 2 else seen[None, None, :]
    if not np.all(lead == lead[:1]):
        return None
    return np.broadcast_to(lead[0], (sq, skv))


def causal_pattern(
    sq: int, skv: int, top_left: bool, window: int, length: int | None = None
) -> np.ndarray:
    """[Sq, Skv]: the keys attention {causal, window} shows each row, `length` (L) valid keys."""
    rows = np.arange(sq)[:, None]
    keys = np.arange(skv)[None, :]
    length = skv if length is None else length
    position = rows if top_left else length - sq + rows
    seen = (keys <= position) & (keys < length)
    if window:
        seen = seen & (keys > position - window)
    return seen


def raised_mask_attrs(mask: np.ndarray, sq: int, skv: int) -> dict[str, AttrValue] | None:
    """The attributes that replace a constant mask, or None when none says the same.

    {} for a mask that hides nothing; `causal` (with `causal_align = "top_left"` where only that
    alignment fits and Sq != Skv) and `window` for causal and sliding-window masks.
    """
    seen = shared_pattern(mask, sq, skv)
    if seen is None:
        return None
    if seen.all():
        return {}
    for top_left in (False, True):
        align: dict[str, AttrValue] = {"causal_align": "top_left"} if top_left else {}
        if top_left and sq == skv:
            continue
        if np.array_equal(seen, causal_pattern(sq, skv, top_left, 0)):
            return {"causal": True, **align}
        window = int(seen.sum(axis=1).max())
        if 0 < window and np.array_equal(seen, causal_pattern(sq, skv, top_left, window)):
            return {"causal": True, "window": window, **align}
    return None
