"""Raising a batch decode step's per-row position mask into attention's per-row `kv_len` (a rule
of `raising`, beside `raise_attention_masks`, which takes one position shared by every row).

A decode step of B rows, each at its own position (a checkpoint's batch step,
`hf_row_steps.py`), builds its mask from a position vector `pos [B]` and constants: `mask[b, j]
= j <= pos[b]` (and `j > pos[b] - W` on a sliding window). That is `attention {causal, window =
W}` over row b's first `pos[b] + 1` keys:

    %m = ... (%pos : i64[B], constants)                     (mask [B,1,1,Skv])
    %o = attention(%q, %k, %v, %m) {masked = true}         (q [B,H,1,D])
    ->  %pos.row_kv_len_1 = add(%pos, 1) : i64[B]           (shared by every layer's attention)
        %o = attention(%q, %k, %v, %pos.row_kv_len_1) {causal = true}

so each row's attention reads only its keys in use. Matched by evaluation: the mask must be
computed by IR ops from that one integer input of B elements and constants, and, at `PROBES`
position vectors (the boundaries and random positions, every row different), row b's pattern
(the same for every head) must be the causal one of `pos[b] + c` keys, c and W one constant
each. Not raised: more than one query a row (a prefill), one row (`raise_attention_masks`), masks
that depend on anything else. Cost: O(PROBES * B * Skv) mask evaluations per attention, the
cone at most `CONE_LIMIT` nodes.
"""

from __future__ import annotations

import numpy as np

from optgraph.frontends.attention_masks import causal_pattern, shared_pattern
from optgraph.frontends.draft import Draft
from optgraph.frontends.raise_attention_masks import (
    causal_with_kv_len,
    evaluate_cone,
    kv_len_of,
    masked_attention_roles,
    offset_and_window,
    position_cone,
)
from optgraph.ir.graph import Node
from optgraph.reference.kernels import numpy_dtype

PROBES = 8  # random position vectors checked besides the boundaries
CONE_LIMIT = 48  # nodes between the positions and the mask


def _rows_seen(mask: np.ndarray, batch: int, skv: int) -> list[np.ndarray] | None:
    """Each row's [Skv] pattern (the same for every head), or None."""
    if mask.ndim != 4 or mask.shape[0] != batch or mask.shape[2] != 1:
        return None
    rows = []
    for b in range(batch):
        seen = shared_pattern(mask[b : b + 1], 1, skv)
        if seen is None:
            return None
        rows.append(np.broadcast_to(seen, (1, skv))[0])
    return rows


def _probes(batch: int, skv: int) -> list[np.ndarray]:
    rng = np.random.default_rng(skv + batch)
    edges = [0, 1, 2, 3, skv // 2, skv - 3, skv - 2, skv - 1]
    # every boundary at every row, the rows at different ones
    vectors = [
        np.array([edges[(shift + b) % len(edges)] for b in range(batch)])
        for shift in range(len(edges))
    ]
    vectors += [rng.permutation(skv)[:batch] for _ in range(PROBES)] if skv >= batch else []
    return vectors


def _rule(draft: Draft, cone: list[Node], pos: str, batch: int, skv: int) -> tuple[int, int] | None:
    """(c, W) when row b's mask is causal over pos[b] + c keys with a window W (0: none)."""
    pos_type = draft.type_of(pos)
    seen_at: list[tuple[int, np.ndarray]] = []
    for vector in _probes(batch, skv):
        value = vector.astype(numpy_dtype(pos_type.dtype)).reshape(pos_type.shape)
        rows = _rows_seen(evaluate_cone(draft, cone, pos, value), batch, skv)
        if rows is None:
            return None
        seen_at += [(int(p), seen) for p, seen in zip(vector, rows)]
    found = offset_and_window(seen_at, skv)
    if found is None:
        return None
    offset, window = found
    for p, seen in seen_at:
        length = p + offset
        if 1 <= length <= skv and not np.array_equal(
            seen, causal_pattern(1, skv, False, window, length)[0]
        ):
            return None
    return offset, window


def row_attention_kv_len(draft: Draft, node: Node, producers: dict[str, Node]) -> list[Node] | None:
    """The raising rule (module docstring); None where the node does not match."""
    matched = masked_attention_roles(node)
    if matched is None or node.type is None:
        return None
    roles, mask = matched
    batch, sq = node.type.shape[0], node.type.shape[2]
    if batch < 2 or sq != 1:
        return None
    found = position_cone(draft, mask, producers, CONE_LIMIT)
    if found is None or draft.type_of(found[0]).numel != batch:
        return None
    pos, cone = found
    skv = draft.type_of(node.operands[1]).shape[2]
    rule = _rule(draft, cone, pos, batch, skv)
    if rule is None:
        return None
    offset, window = rule
    kv_len, nodes = kv_len_of(draft, pos, offset, node, producers, "row_kv_len")
    return [*nodes, causal_with_kv_len(node, roles, kv_len, window)]
