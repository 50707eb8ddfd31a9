"""Norm statistics handed from a one-row product to the products whose prologue norm reads its row.

A decode layer's o-projection (or FFN down product) stores h = x @ w + residual; the next products
(gate/up, or the next layer's q/k/v) each compute rms_norm(h) in their prologue
(`cuda_row_prologue`), and without help every block of them first reads the whole row h and
reduces its sum of squares. Here the producer, which has h's values in registers anyway, also
stores each tile's partial sum of squares of the values *as stored* (rounded to h's dtype, read
back as float); a reader adds the P partials of its row in tile order and never reads the row for
its statistics:

    producer (tile t of P, the block that stores it):  stats[i * P + t] = sum over its columns of
                                                        float(round(h[i, col]))²
    reader (every thread):  ss = stats[i*P + 0] + ... + stats[i*P + P-1];  r = sqrtf(ss / K + eps)

Both sums run in a fixed order (a block reduction of a fixed shape, then t = 0 .. P-1), so a
replay gives the same bits. With split-K only the block that arrives last at a tile (the one
running the epilogue, `cuda_gemv_reduce.store_sums`) writes the tile's partial.

rms_norm only: layer_norm keeps the block reduction of its prologue (`_norm_statistics`), whose
shifted two-pass form cannot be rebuilt from per-tile sums without losing its precision guarantee.
Which values and readers take part, and where the partials live, is decided at lowering
(`norm_stats.place_norm_stats`). Complexity: O(1) statements; P loads a reader thread.
"""

from __future__ import annotations

from dataclasses import dataclass

from optgraph.codegen.cuda_source import STORAGE, f32_literal, load
from optgraph.ir.attrs import float_attr
from optgraph.ir.graph import Node
from optgraph.ir.ops import attrs_with_defaults

WRITE_ROLE = "stats_out"  # the producer's partials (float, m × P), a kernel parameter and role
READ_ROLE = "stats_in"  # the partials a reader's prologue norm adds up
HANDED_NORMS = frozenset({"rms_norm"})


@dataclass(frozen=True)
class RowStats:
    """A one-row product kernel's part in handing on norm statistics: `write`, it stores the
    per-tile partial sums of squares of its result (C parameter `stats_out`); `partials` > 0, its
    prologue norm reads its row's statistics from `partials` partials a row (`stats_in`)."""

    write: bool = False
    partials: int = 0

    def params(self) -> list[str]:
        """The extra C parameters, in this order: `stats_out`, then `stats_in`."""
        decls = [f"float* {WRITE_ROLE}"] if self.write else []
        return decls + ([f"const float* {READ_ROLE}"] if self.partials else [])

    def roles(self) -> tuple[str, ...]:
        return (WRITE_ROLE,) * self.write + (READ_ROLE,) * bool(self.partials)


NO_ROW_STATS = RowStats()


def stored_square(dtype: str, stored: str) -> str:
    """The statement adding the square of the stored value `stored` (storage type) to `og_ss[i]`."""
    return f"{{ const float og_sv = {load(dtype, stored)}; og_ss[i] += og_sv * og_sv; }}"


def declare_squares(m: int) -> str:
    return f"float og_ss[{m}] = {{}};"


def store_partials(m: int, tiles: int) -> list[str]:
    """Statements (every thread of the block) reducing `og_ss` over the block and storing row i's
    partial of tile `tile` at `stats_out[i * tiles + tile]`."""
    return [
        "__shared__ float og_ss_scratch[32];",
        f"#pragma unroll\nfor (int i = 0; i < {m}; ++i) {{",
        "  const float s = og_block_reduce(og_ss[i], og_ss_scratch, OgSum(), 0.0f);",
        f"  if (threadIdx.x == 0) {WRITE_ROLE}[i * {tiles}u + tile] = s;",
        "}",
    ]


def handed_statistics(norm: Node, k: int, m: int, partials: int) -> list[str]:
    """Statements computing `og_k`, `og_mu`, `og_r` (as `cuda_row_prologue._norm_statistics`
    names them) of an rms_norm from the producer's partials, added in tile order."""
    assert norm.op in HANDED_NORMS, norm.op
    eps = f32_literal(float_attr(attrs_with_defaults(norm), "eps"))
    return [
        f"float og_k[{m}], og_mu[{m}], og_r[{m}];",
        f"for (int i = 0; i < {m}; ++i) {{",
        "  float ss = 0.0f;",
        # every load in flight at once (a constant trip count), added in tile order
        f"  #pragma unroll\n  for (unsigned int t = 0; t < {partials}u; ++t)",
        f"    ss += {READ_ROLE}[i * {partials}u + t];",
        "  og_k[i] = 0.0f;",
        "  og_mu[i] = 0.0f;",
        f"  og_r[i] = sqrtf(ss / (float){k} + {eps});",
        "}",
    ]


def store_value(dtype: str, expr: str) -> list[str]:
    """Statements storing `expr` (storage type) at `out[oi]` and adding its square to `og_ss`."""
    return [
        f"const {STORAGE[dtype]} og_st = {expr};",
        "out[oi] = og_st;",
        stored_square(dtype, "og_st"),
    ]
