"""The merge of split-KV decode attention's key chunks (`decode_wide`).

Each block of a tile (a KV head and row tile of one batch row) holds its chunk's partial state
of every (row r, element dd): the maximum M of its scores, the sum L of exp(score - M) and the
accumulator A. `merge_chunks` returns the statements that write the block's state to a workspace
of `__device__` arrays named after the node (`og_ws_*`: A, `og_ml_*`: M and L), arrive at the
tile's counter (`og_arrive`: one release/acquire atomic a block), and in the block that arrives
last read the C partials (all loads first), merge them in chunk order (M = max, then L and A
weighted by exp(M_c - M)), store, and reset the counter for the next launch. Fixed order: the
result is bit-identical across launches.

    partial (each block):  og_ws[(tile·C + c)·rows + r][dd] = A;  og_ml[...] = (M, L)
    last block of a tile:  M = max_c M_c;  L = Σ_c L_c·w_c;  A = Σ_c A_c·w_c;  store(A / L)

Like the split-K products' workspaces, it lives in the compiled module, which the runtime shares
between programs of the same source: two such programs must not run concurrently.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from optgraph.codegen.cuda_source import f32_literal

NEG_INF = f32_literal(float("-inf"))


@dataclass(frozen=True)
class ChunkMerge:
    """`tiles` tiles of `chunks` blocks each, `rows` rows of `d` elements a block; `key` (the
    node's name and everything that shapes the kernel) names the workspace."""

    key: str
    tiles: int
    chunks: int
    rows: int
    d: int


def merge_chunks(
    m: ChunkMerge, loop: list[str], partial: list[str], maximum: str, write: list[str]
) -> tuple[list[str], str]:
    """(statements, file-scope declarations). `loop`: the opening lines of a loop of the block's
    threads over its (r, dd) pairs (closed here); `partial`: lines in it defining this block's
    `Ls` and `A`; `maximum`: the row's M (an expression of r); `write`: lines storing the row's
    result from `Ls` and `A`. The block's `tile` and chunk `c` must be defined."""
    digest = hashlib.sha1(m.key.encode()).hexdigest()[:12]
    ws, ml, cnt = f"og_ws_{digest}", f"og_ml_{digest}", f"og_cnt_{digest}"
    chunks, d = m.chunks, m.d
    decl = (
        f"__device__ float {ws}[{m.tiles * chunks * m.rows * d}];\n"
        f"__device__ float {ml}[{m.tiles * chunks * m.rows * 2}];\n"
        f"__device__ unsigned int {cnt}[{m.tiles}];\n"
    )
    part = f"(tile * {chunks}u + {{c}}) * {m.rows}u + r"
    own, other = part.format(c="c"), part.format(c="q")
    lines = [
        *loop,
        *partial,
        f"  {ws}[({own}) * {d}u + dd] = A;",
        f"  if (dd == 0u) {{ {ml}[({own}) * 2u] = {maximum}; {ml}[({own}) * 2u + 1u] = Ls; }}",
        "}",
        "__syncthreads();",
        "__shared__ bool og_last;",
        f"if (threadIdx.x == 0u) og_last = og_arrive(&{cnt}[tile]) == {chunks - 1}u;",
        "__syncthreads();",
        "if (!og_last) return;",
        *loop,
        *merged_sums(chunks, d, ws, ml, other),
        *write,
        "}",
        f"if (threadIdx.x == 0u) {cnt}[tile] = 0u;",
    ]
    return lines, decl


def merged_sums(chunks: int, d: int, ws: str, ml: str, other: str) -> list[str]:
    """Inside the last block's loop over (r, dd): chunk q's partial (M, L, A) read from the
    workspaces `ws` / `ml` at row index `other` (an expression of q and r), every load first (all
    in flight), then `Ls` and `A` summed in chunk order, each weighted by exp(M_q - max M)."""
    return [
        f"  float mq[{chunks}], lq[{chunks}], aq[{chunks}];",
        f"  #pragma unroll\n  for (unsigned int q = 0; q < {chunks}u; ++q) {{",
        f"    mq[q] = __ldcg(&{ml}[({other}) * 2u]);",
        f"    lq[q] = __ldcg(&{ml}[({other}) * 2u + 1u]);",
        f"    aq[q] = __ldcg(&{ws}[({other}) * {d}u + dd]);",
        "  }",
        f"  float M = {NEG_INF};",
        f"  #pragma unroll\n  for (int q = 0; q < {chunks}; ++q) M = og_max(M, mq[q]);",
        "  float Ls = 0.0f, A = 0.0f;",
        f"  #pragma unroll\n  for (int q = 0; q < {chunks}; ++q) {{",
        f"    const float wt = mq[q] == {NEG_INF} ? 0.0f : expf(mq[q] - M);",
        "    Ls += lq[q] * wt;",
        "    A += aq[q] * wt;",
        "  }",
    ]
