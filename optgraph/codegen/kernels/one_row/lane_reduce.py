"""The reductions and the store loop of a one-row product kernel (`product_kernel.one_row_kernel`).

After the product loop each thread holds `acc[i][v]`, its row lanes' partial sums of the tile's
columns. `reduce_lanes` sums the lanes of a warp by shuffles and leaves each warp's sums in
shared memory; `store_sums` adds the warps' sums of each (row, column) and runs the epilogue
statements on `val`, in one pass, or with S splits of K through a per-kernel workspace: every
block writes its sums, the block that arrives last at a tile adds the S partials in split
order (deterministic) and stores. With a rope fold (`epilogues`) the sum of each
column's partner, `pval`, is formed alike.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from optgraph.codegen.kernels.one_row.epilogues import partner_global, partner_local
from optgraph.codegen.kernels.one_row.geometry import THREADS, Geometry


def reduce_lanes(g: Geometry) -> list[str]:
    """Sum the row lanes of one warp (lane bits above the column group) by shuffles, then write
    each warp's sums to `og_red[warp]` for the block reduction."""
    m, vec, ct = g.m, g.vec, g.ct
    return [
        f"#pragma unroll\nfor (int i = 0; i < {m}; ++i) {{",
        f"  #pragma unroll\n  for (int v = 0; v < {vec}; ++v) {{",
        (
            f"    for (int o = {ct}; o < 32; o <<= 1) "
            "acc[i][v] += __shfl_xor_sync(0xffffffffu, acc[i][v], o);"
        ),
        "  }",
        "}",
        f"__shared__ float og_red[{g.warps}][{m}][{g.tile_cols}];",
        "const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;",
        f"if (lane < {ct}u) {{",
        f"  #pragma unroll\n  for (int i = 0; i < {m}; ++i) {{",
        (
            f"    #pragma unroll\n    for (int v = 0; v < {vec}; ++v) "
            f"og_red[warp][i][lane * {vec}u + v] = acc[i][v];"
        ),
        "  }",
        "}",
        "__syncthreads();",
    ]


def workspace_digest(salt: str, g: Geometry) -> str:
    """The digest naming the split-K workspace and counters of node `salt`'s kernel."""
    return hashlib.sha1(f"{salt}|{g.m},{g.k},{g.n},{g.dtype}".encode()).hexdigest()[:12]


def store_sums(g: Geometry, salt: str, epi: Sequence[str]) -> tuple[list[str], str]:
    """(statements, file-scope declarations): the block sums of each (row, column) of the tile,
    then `epi` (the epilogue and store). With S splits of K, each block first writes its sums to
    the kernel's workspace; the block that arrives last at the tile adds the S partials in split
    order, runs `epi` and resets the tile's counter for the next launch."""
    m, n, tile_cols = g.m, g.n, g.tile_cols
    reduce_block = [
        "float val = 0.0f;",
        f"#pragma unroll\nfor (int w = 0; w < {g.warps}; ++w) val += og_red[w][i][c];",
    ]
    loop = (
        f"for (unsigned int t = threadIdx.x; t < {m * tile_cols}u; t += {THREADS}u) {{\n"
        f"  const unsigned int i = t / {tile_cols}u, c = t % {tile_cols}u;\n"
        f"  const unsigned int col = {g.column('c')};\n"
        f"  if (col >= {n}u) continue;"
    )
    rope = g.fold is not None and g.fold.rope is not None
    if g.splits == 1:
        if rope:
            assert g.fold is not None
            pc = partner_local(g.pairing, g.fold, tile_cols)
            reduce_block += [
                "float pval = 0.0f;",
                f"#pragma unroll\nfor (int w = 0; w < {g.warps}; ++w) pval += og_red[w][i][{pc}];",
            ]
        return [loop, *("  " + s for s in [*reduce_block, *epi]), "}"], ""
    digest = workspace_digest(salt, g)
    ws, cnt = f"og_ws_{digest}", f"og_cnt_{digest}"
    decl = (
        f"__device__ float {ws}[{g.splits * m * n}];\n__device__ unsigned int {cnt}[{g.tiles}];\n"
    )
    lines = [
        loop,
        *("  " + s for s in reduce_block),
        f"  {ws}[(split * {m}u + i) * {n}u + col] = val;",
        "}",
        "__syncthreads();",
        "__shared__ bool og_last;",
        f"if (threadIdx.x == 0) og_last = og_arrive(&{cnt}[tile]) == {g.splits - 1}u;",
        "__syncthreads();",
        "if (!og_last) return;",
        loop,
        "  float val = 0.0f;",
        (
            f"  for (unsigned int s = 0; s < {g.splits}u; ++s) "
            f"val += __ldcg(&{ws}[(s * {m}u + i) * {n}u + col]);"
        ),
        *(_partner_sum(g, ws) if rope else []),
        *("  " + s for s in epi),
        "}",
        f"if (threadIdx.x == 0) {cnt}[tile] = 0u;",
    ]
    return lines, decl


def _partner_sum(g: Geometry, ws: str) -> list[str]:
    """`pval`: the split-K sum of the rope partner of column `col` (the same tile's)."""
    assert g.fold is not None
    pcol = partner_global(g.fold)
    return [
        "  float pval = 0.0f;",
        (
            f"  for (unsigned int s = 0; s < {g.splits}u; ++s) "
            f"pval += __ldcg(&{ws}[(s * {g.m}u + i) * {g.n}u + {pcol}]);"
        ),
    ]
