"""Norm statistics handed from a one-row product to the products whose prologue norm reads its row.

A decode layer's o-projection (or FFN down product) stores h = x @ w + residual; the next products
(gate/up, or the next layer's q/k/v) each compute a norm of h in their prologue
(`cuda_row_prologue`), and without help every block of them first reads the whole row h and
reduces it. Here the producer, once its block has stored a tile of h, reads the tile's values
back *as stored* (rounded to h's dtype, as float) and stores the tile's partials; a reader
combines the P partials of its row in tile order and never reads the row for its statistics.

rms_norm, one partial a tile, the sum of squares:

    producer (tile t of P):  stats[i·P + t] = Σ over the tile's columns of h[i, col]²
    reader (every thread):   ss = stats[i·P + 0] + ... + stats[i·P + P-1];  r = sqrtf(ss / K + eps)

layer_norm, four a tile, all of them about a value of the row (a row far from zero keeps its
precision, as `cuda_row_prologue._norm_statistics`' shifted form does): the tile's column count
n_t, its first value k_t, s_t = Σ (h - k_t) and M2_t = Σ (h - k_t - s_t / n_t)² (two passes over
the tile). The reader shifts every tile by the row's first value k_0 (k_t - k_0 is exact for
nearby values) and combines them as Chan et al.'s parallel variance does:

    m_t = (k_t - k_0) + s_t / n_t;   mu = Σ_t n_t · m_t / K   (the mean less k_0)
    M2 = Σ_t (M2_t + n_t · (m_t - mu)²);   r = sqrtf(M2 / K + eps);   x̂ = ((x - k_0) - mu) / r

Every sum runs in a fixed order (block reductions of a fixed shape, then t = 0 .. P-1), so a
replay gives the same bits. With split-K only the block that arrives last at a tile (the one
running the epilogue, `cuda_gemv_reduce.store_sums`) writes the tile's partials. Which values
and readers take part, and where the partials live, is decided at lowering
(`norm_stats.place_norm_stats`). Complexity: O(1) statements; the producer's block reads its
tile twice more (once for rms_norm), a reader thread loads P (3·P) floats.
"""

from __future__ import annotations

from dataclasses import dataclass

from optgraph.codegen.cuda_gemv_layout import THREADS
from optgraph.codegen.cuda_source import f32_literal, load
from optgraph.ir.attrs import float_attr
from optgraph.ir.graph import Node
from optgraph.ir.ops import attrs_with_defaults

WRITE_ROLE = "stats_out"  # the producer's partials (floats), a kernel parameter and role
READ_ROLE = "stats_in"  # the partials a reader's prologue norm combines
WIDTH = {"rms_norm": 1, "layer_norm": 4}  # floats a (row, tile): see the module docstring
HANDED_NORMS = frozenset(WIDTH)


@dataclass(frozen=True)
class RowStats:
    """A one-row product kernel's part in handing on norm statistics: `write` (a norm op, ""
    for none), it stores its result's per-tile partials for that norm (C parameter
    `stats_out`); `partials` > 0, its prologue norm combines that many tiles' partials a row
    (`stats_in`), stored for its own op."""

    write: str = ""
    partials: int = 0

    def params(self) -> list[str]:
        """The extra C parameters, in this order: `stats_out`, then `stats_in`."""
        decls = [f"float* {WRITE_ROLE}"] if self.write else []
        return decls + ([f"const float* {READ_ROLE}"] if self.partials else [])

    def roles(self) -> tuple[str, ...]:
        return (WRITE_ROLE,) * bool(self.write) + (READ_ROLE,) * bool(self.partials)


NO_ROW_STATS = RowStats()


def store_partials(op: str, dtype: str, m: int, n: int, tiles: int, tile_cols: int) -> list[str]:
    """Statements (every thread of the block that stored the tile, after its stores) reading
    the tile's values of `out` (`dtype`, rows of n) back and storing row i's partials for `op`
    at `stats_out[(i · tiles + tile) · WIDTH[op] + j]`."""
    width = WIDTH[op]
    value = load(dtype, f"out[i * {n}u + col]")

    def tile_sum(term: str) -> list[str]:
        return [
            f"  for (unsigned int c = threadIdx.x; c < {tile_cols}u; c += {THREADS}u) {{",
            f"    const unsigned int col = tile * {tile_cols}u + c;",
            f"    if (col < {n}u) {{ const float v = {value}; og_acc += {term}; }}",
            "  }",
            "  og_acc = og_block_reduce(og_acc, og_ss_scratch, OgSum(), 0.0f);",
        ]

    at = f"{WRITE_ROLE}[(i * {tiles}u + tile) * {width}u"
    lines = [
        "__syncthreads();  // the tile's stores, visible to the whole block",
        "__shared__ float og_ss_scratch[32];",
        f"for (unsigned int i = 0; i < {m}u; ++i) {{",
        "  float og_acc = 0.0f;",
    ]
    if op == "rms_norm":
        return lines + [*tile_sum("v * v"), f"  if (threadIdx.x == 0) {at}] = og_acc;", "}"]
    first = load(dtype, f"out[i * {n}u + tile * {tile_cols}u]")
    return lines + [
        f"  const float og_kt = {first};",
        *tile_sum("(v - og_kt)"),
        f"  const float og_nt = (float)min({tile_cols}u, {n}u - tile * {tile_cols}u);",
        "  const float og_st = og_acc, og_mt = og_acc / og_nt;",
        "  og_acc = 0.0f;",
        *tile_sum("((v - og_kt) - og_mt) * ((v - og_kt) - og_mt)"),
        "  if (threadIdx.x == 0) {",
        f"    {at}] = og_nt; {at} + 1u] = og_kt; {at} + 2u] = og_st; {at} + 3u] = og_acc;",
        "  }",
        "}",
    ]


def handed_statistics(norm: Node, k: int, m: int, partials: int) -> list[str]:
    """Statements computing `og_k`, `og_mu`, `og_r` (as `cuda_row_prologue._norm_statistics`
    names them) of `norm` from the producer's partials, combined in tile order."""
    eps = f32_literal(float_attr(attrs_with_defaults(norm), "eps"))
    width = WIDTH[norm.op]
    at = f"{READ_ROLE}[(i * {partials}u + t) * {width}u"
    each = f"  #pragma unroll\n  for (unsigned int t = 0; t < {partials}u; ++t)"
    lines = [f"float og_k[{m}], og_mu[{m}], og_r[{m}];", f"for (int i = 0; i < {m}; ++i) {{"]
    if norm.op == "rms_norm":  # every load in flight at once (unrolled), added in tile order
        return lines + [
            "  float ss = 0.0f;",
            f"{each} ss += {at}];",
            "  og_k[i] = 0.0f;",
            "  og_mu[i] = 0.0f;",
            f"  og_r[i] = sqrtf(ss / (float){k} + {eps});",
            "}",
        ]
    mean = f"(({at} + 1u] - k0) + {at} + 2u] / {at}])"  # the tile's mean less k0
    return lines + [
        f"  const float k0 = {READ_ROLE}[i * {partials * width}u + 1u];",
        "  float s = 0.0f;",
        f"{each} s += {at}] * {mean};",
        f"  const float mu = s / (float){k};",
        "  float ss = 0.0f;",
        f"{each} {{ const float d = {mean} - mu; ss += {at} + 3u] + {at}] * d * d; }}",
        "  og_k[i] = k0;",
        "  og_mu[i] = mu;",
        f"  og_r[i] = sqrtf(ss / (float){k} + {eps});",
        "}",
    ]
