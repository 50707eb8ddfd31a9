"""The rope matcher's other source of angles: cos and sin tables that folded to constants (a
prefill exported without position inputs computes its positions with an arange).

    %y = add(mul(%x, %cos_table), mul(concat(neg(%x2), %x1), %sin_table))   (tables: constants)
    ->  %y = rope(%x, %pos) {theta, scaling, ...} with %pos the constant s0, s0+1, ...

Positions are taken to be consecutive (an arange from s0): the angles, unwrapped along the
positions, give the frequencies (their slope) and s0; `rope_tables` names the scaling; the
tables must then equal that rope's for positions s0.. (to 1e-5 plus the f32 rounding of the
angles: `rope_tables.table_tolerance`), else nothing is raised. A single position (S = 1) is not
raised: one row does not separate frequencies from positions. A half-precision model's tables
are judged by their f32 values before the cast (`Draft.wide`).
"""

from __future__ import annotations

import numpy as np

from optgraph.frontends.draft import Draft
from optgraph.frontends.raising_probe import known_value
from optgraph.frontends.rope_tables import rope_attributes, table_tolerance
from optgraph.ir.graph import AttrValue, TensorType
from optgraph.ir.op_rules_rope import rope_frequencies


def constant_rope(
    draft: Draft, tables: tuple[str, str], rows: int, head_dim: int
) -> tuple[np.ndarray, dict[str, AttrValue]] | None:
    """(positions, rope attributes) when the constant tables `[..., rows, head_dim]` (one row
    per position, broadcast over the rest) are a rope's cos and sin."""
    found = [draft.wide[t] if t in draft.wide else known_value(draft, t) for t in tables]
    if found[0] is None or found[1] is None or rows < 2:
        return None
    cos, sin = (np.asarray(t, np.float64) for t in found)
    if cos.shape != sin.shape or cos.size != rows * head_dim:
        return None
    cos, sin = cos.reshape(rows, head_dim), sin.reshape(rows, head_dim)
    factor = float(np.median(np.hypot(cos, sin)))
    angles = np.unwrap(np.arctan2(sin, cos), axis=0)
    half = head_dim // 2
    slope = (angles[-1, :half] - angles[0, :half]) / (rows - 1)
    if not np.all(slope > 0):
        return None
    start = round(float(angles[0, half - 1] / slope[-1]))
    if start < 0:
        return None
    # The last row's absolute angles (its turns counted with the slope) divided by its position:
    # float32 tables give a small angle to its relative precision, which the slope loses.
    turns = np.round((start * slope - angles[0, :half]) / (2 * np.pi))
    last = start + rows - 1
    inv_freq = (angles[-1, :half] + 2 * np.pi * turns) / last if last else slope
    attrs = rope_attributes(inv_freq, factor)
    if attrs is None:
        return None
    positions = np.arange(start, start + rows, dtype=np.int64)
    freq = rope_frequencies(attrs, head_dim)
    expected = positions[:, None] * np.array(freq.inv_freq)[None, :]
    expected = np.concatenate([expected, expected], axis=-1)
    for table, fn in ((cos, np.cos), (sin, np.sin)):
        atol = table_tolerance(expected, freq.attention_factor)
        if not np.allclose(table, fn(expected) * freq.attention_factor, atol=atol):
            return None
    return positions, attrs


def rope_layout(x: TensorType, table: TensorType, positions: int) -> str | None:
    """ "bshd" or "bhsd": where the table's positions fall in x; None when it fits neither."""
    if x.rank != 4 or table.rank > 4:
        return None
    padded = (1,) * (4 - table.rank) + table.shape
    if padded[0] != 1 or padded[3] != x.shape[3]:
        return None
    if padded[1:3] == (positions, 1) and x.shape[1] == positions:
        return "bshd"
    if padded[1:3] == (1, positions) and x.shape[2] == positions:
        return "bhsd"
    return None


def constant_table_rope(
    draft: Draft, x_type: TensorType, tables: tuple[str, str]
) -> tuple[str, dict[str, AttrValue], str] | None:
    """(a constant pos, attrs, layout) when the tables folded to constants."""
    if x_type.rank != 4 or any(known_value(draft, t) is None for t in tables):
        return None
    for layout, rows in (("bshd", x_type.shape[1]), ("bhsd", x_type.shape[2])):
        if rope_layout(x_type, draft.type_of(tables[0]), rows) != layout:
            continue
        found = constant_rope(draft, tables, rows, x_type.shape[3])
        if found is not None:
            return draft.constant(found[0], "rope_pos"), found[1], layout
    return None
