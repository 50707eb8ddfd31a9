"""A product region with few rows as ONE kernel: matrix-vector product with its epilogue inside.

Decode steps multiply one token (M = 1) by every weight matrix: memory-bound products that cuBLAS
runs as a gemm plus, in a product region, a separate epilogue kernel (`cuda_elementwise`). For
`M ≤ GEMV_MAX_M` rows, `[M, K] @ [K, N]` with a 2-D, non-transposed `b`, this module emits one
kernel that computes the product and applies the region's epilogue before the only store:

    %y = fused(%x, %w, %b, %r) body(...) { %mm = matmul(%p0, %p1)  %t = add(%mm, %p2)
                                           %y = add(%p3, %t) }     (x : f16[1,4096])
    ->  one launch, grid (column tiles, S splits of K), 256 threads:
        acc[m][8 columns] over the block's K rows (16-byte loads of b, 8 in flight a thread,
        x from L1), reduced over the block, then y = epilogue(acc) at (m, n)

The layout (`cuda_gemv_layout`: tile width, S, the batched inner loop, launch bounds) is chosen
from measurements on an H100: a single pass when N alone gives every multiprocessor a tile, else
about one block a multiprocessor. With S > 1 each block writes its partial sums to a per-kernel
workspace (a `__device__` array) and bumps a per-tile counter (one release/acquire atomic a
block); the block that arrives last sums the S partials in a fixed order (so results are
deterministic), applies the epilogue, stores, and resets the counter for the next launch. Kernels
with a workspace carry the node's name in their text, so two nodes never share one (they may run
concurrently on different streams).

Small matrices (K ≤ 8 × 256, the decode steps of small models) skip split-K and its second,
dependent phase (workspace, counter, the last block's re-read): the tile narrows to 4, 2 or 1
column threads (32, 16 or 8 halves) so that the 256 threads' row lanes cover K with at most 4
(else 8) rows each, all loads of a thread in flight at once.

Accumulation is float32; the product is rounded to the matmul's dtype before the epilogue, as the
unfused graph would round it. Not handled (the caller falls back to cuBLAS + one epilogue
kernel): M > GEMV_MAX_M, transposed operands, batched `b`, N not a multiple of the vector width,
dtypes other than f32/f16/bf16.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from optgraph.analysis.fusion_rules import PRODUCT, plan_body
from optgraph.codegen.cuda_elementwise import emit_scalars, load_params, used_values
from optgraph.codegen.cuda_gemv_layout import BATCH, BOUNDS, THREADS, VECTOR, layout, product_loop
from optgraph.codegen.cuda_row_prologue import row_prologue, stage_row
from optgraph.codegen.cuda_source import (
    Kernel,
    Launch,
    in_param,
    kernel_template,
    load,
    out_param,
    store,
)
from optgraph.ir.graph import Node, TensorType
from optgraph.ir.ops import attrs_with_defaults

GEMV_MAX_M = 1  # rows up to which the fused matrix-vector kernel replaces cuBLAS (0: never)


def gemv_shape(
    anchor: Node, a: TensorType, b: TensorType, has_prologue: bool = False
) -> tuple[int, int, int] | None:
    """(M, K, N) when `anchor` (a matmul) qualifies for the fused kernel, else None.

    A product with a prologue always does where fusion built it (`fusion_rules.one_row_product`
    is the contract): cuBLAS cannot run a prologue, so `GEMV_MAX_M` (a tuning choice, 0 in the
    cuBLAS benchmark variant) only decides for products without one."""
    max_m = max(GEMV_MAX_M, 1) if has_prologue else GEMV_MAX_M
    if anchor.op != "matmul" or anchor.type is None or max_m <= 0:
        return None
    attrs = attrs_with_defaults(anchor)
    if attrs["transpose_a"] or attrs["transpose_b"] or b.rank != 2:
        return None
    dtype = a.dtype
    if dtype not in VECTOR or b.dtype != dtype:
        return None
    k, n = b.shape
    m = a.numel // k if k else 0
    if m < 1 or m > max_m or n % VECTOR[dtype] or anchor.type.numel != m * n:
        return None
    return m, k, n


def gemv_kernel(
    salt: str,
    params: Sequence[str],
    types: Sequence[TensorType],
    anchor: Node,
    epilogue: Sequence[Node],
    result: str,
    out_type: TensorType,
    prologue: Sequence[Node] = (),
) -> tuple[Kernel, tuple[int, int, int]] | None:
    """(kernel, grid) of the fused product, or None when the shape does not qualify.

    `params` name the region's operands in0, in1, ...; the anchor's weight is a param, its row
    a param or the value of `prologue` (see `row_prologue`).
    """
    index = {p: k for k, p in enumerate(params)}
    computed = {n.name: n.type for n in prologue if n.type is not None}
    if anchor.operands[1] not in index or (
        anchor.operands[0] not in index and anchor.operands[0] not in computed
    ):
        return None
    a_type = types[index[anchor.operands[0]]] if anchor.operands[0] in index else None
    a_type = a_type or computed[anchor.operands[0]]
    b_type = types[index[anchor.operands[1]]]
    shape = gemv_shape(anchor, a_type, b_type, bool(prologue))
    if shape is None:
        return None
    assert anchor.type is not None
    m, k, n = shape
    dtype, vec = a_type.dtype, VECTOR[a_type.dtype]
    ct, tiles, splits, rows = layout(k, n, vec)
    tile_cols = ct * vec
    b_role = f"in{index[anchor.operands[1]]}"
    warps = THREADS // 32
    lanes = THREADS // ct
    row_setup, row_value = row_prologue(params, types, prologue, anchor.operands[0], a_type, m)
    staged = stage_row(anchor.operands[0] in index, dtype, m, rows)
    if staged:
        row_value = load(dtype, f"og_xs[i * {rows}u + (kk - k0)]")
    body = [
        *row_setup,
        "const unsigned int tile = blockIdx.x, split = blockIdx.y;",
        f"const unsigned int cg = threadIdx.x % {ct}u, rl = threadIdx.x / {ct}u;",
        f"const unsigned int n0 = tile * {tile_cols}u + cg * {vec}u;",
        f"const unsigned int k0 = split * {rows}u;",
        f"const unsigned int k1 = min({k}u, k0 + {rows}u);",
        *staged,
        f"float acc[{m}][{vec}];",
        f"#pragma unroll\nfor (int i = 0; i < {m}; ++i) {{",
        f"  #pragma unroll\n  for (int v = 0; v < {vec}; ++v) acc[i][v] = 0.0f;",
        "}",
        f"if (n0 < {n}u) {{",
        *("  " + s for s in product_loop(dtype, [f"{b_role} + n0"], n, lanes, m, row_value)),
        "}",
        # reduce the row lanes of one warp (lane bits above the column group), then across warps
        f"#pragma unroll\nfor (int i = 0; i < {m}; ++i) {{",
        f"  #pragma unroll\n  for (int v = 0; v < {vec}; ++v) {{",
        (
            f"    for (int o = {ct}; o < 32; o <<= 1) "
            "acc[i][v] += __shfl_xor_sync(0xffffffffu, acc[i][v], o);"
        ),
        "  }",
        "}",
        f"__shared__ float og_red[{warps}][{m}][{tile_cols}];",
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
    epi = _epilogue(params, types, epilogue, anchor, result, out_type, n)
    reduce_block = [
        "float val = 0.0f;",
        f"#pragma unroll\nfor (int w = 0; w < {warps}; ++w) val += og_red[w][i][c];",
    ]
    loop = (
        f"for (unsigned int t = threadIdx.x; t < {m * tile_cols}u; t += {THREADS}u) {{\n"
        f"  const unsigned int i = t / {tile_cols}u, c = t % {tile_cols}u;\n"
        f"  const unsigned int col = tile * {tile_cols}u + c;\n"
        f"  if (col >= {n}u) continue;"
    )
    decl = ""
    if splits == 1:
        body += [loop, *("  " + s for s in reduce_block), *("  " + s for s in epi), "}"]
    else:
        digest = hashlib.sha1(f"{salt}|{m},{k},{n},{dtype}".encode()).hexdigest()[:12]
        ws, cnt = f"og_ws_{digest}", f"og_cnt_{digest}"
        decl = (
            f"__device__ float {ws}[{splits * m * n}];\n__device__ unsigned int {cnt}[{tiles}];\n"
        )
        body += [
            loop,
            *("  " + s for s in reduce_block),
            f"  {ws}[(split * {m}u + i) * {n}u + col] = val;",
            "}",
            "__syncthreads();",
            "__shared__ bool og_last;",
            f"if (threadIdx.x == 0) og_last = og_arrive(&{cnt}[tile]) == {splits - 1}u;",
            "__syncthreads();",
            "if (!og_last) return;",
            loop,
            "  float val = 0.0f;",
            (
                f"  for (unsigned int s = 0; s < {splits}u; ++s) "
                f"val += __ldcg(&{ws}[(s * {m}u + i) * {n}u + col]);"
            ),
            *("  " + s for s in epi),
            "}",
            f"if (threadIdx.x == 0) {cnt}[tile] = 0u;",
        ]
    decls = [out_param(out_type.dtype)] + [in_param(t.dtype, j) for j, t in enumerate(types)]
    text = "\n".join("  " + line for line in "\n".join(body).split("\n"))
    family = f"gemv|{salt}" if splits > 1 else "gemv"
    early = _prefetch_weights(b_role, n, k, rows, ct, tile_cols, vec, lanes) if PREFETCH else ""
    template = kernel_template(decls, text, BOUNDS, early)
    name = "og_gemv_" + hashlib.sha1(f"{family}\n{decl}{template}".encode()).hexdigest()[:12]
    kernel = Kernel.assemble(name, decls, text, (decl,), BOUNDS, early)
    return kernel, (tiles, splits, 1)


# Prefetch each thread's first batch of weight rows into L2 before the PDL wait. Off: on an H100
# (2026-11-21) the decodes with and without it differed less than two runs of one program did
# (llama_real 1,783.7 / 1,706.6 µs with, 1,690.6 without; llama_launch 360.0 / 318.2 with,
# 348.8 without), so no gain is established.
PREFETCH = False


def _prefetch_weights(
    b_role: str, n: int, k: int, rows: int, ct: int, tile_cols: int, vec: int, lanes: int
) -> str:
    """Statements (a block of their own) bringing the rows of `b` this thread loads first into
    L2: they run before the dependency wait, during the preceding kernel (a hint only: the
    loads after the wait read whatever is current)."""
    lines = [
        "{",
        f"  const unsigned int n0 = blockIdx.x * {tile_cols}u + (threadIdx.x % {ct}u) * {vec}u;",
        f"  const unsigned int k0 = blockIdx.y * {rows}u, k1 = min({k}u, k0 + {rows}u);",
        f"  if (n0 < {n}u) {{",
        "    #pragma unroll",
        f"    for (unsigned int j = 0; j < {BATCH}u; ++j) {{",
        f"      const unsigned int kk = k0 + threadIdx.x / {ct}u + j * {lanes}u;",
        f"      if (kk < k1) og_prefetch_l2({b_role} + (unsigned long long)kk * {n}u + n0);",
        "    }",
        "  }",
        "}",
    ]
    return "\n".join("  " + line for line in lines)


def _epilogue(
    params: Sequence[str],
    types: Sequence[TensorType],
    epilogue: Sequence[Node],
    anchor: Node,
    result: str,
    out_type: TensorType,
    n: int,
) -> list[str]:
    """Statements storing out[i * n + col] = epilogue(val) (val: the product, float)."""
    assert anchor.type is not None
    dtype = anchor.type.dtype
    lines = [f"const unsigned int oi = i * {n}u + col;"]
    rounded = f"{load(dtype, store(dtype, 'val'))}" if dtype != "f32" else "val"
    lines.append(f"const float a = {rounded};")
    env: dict[str, tuple[str, str]] = {anchor.name: ("a", dtype)}
    roles = [f"in{j}" for j in range(len(params))]
    used = used_values(epilogue, (result,))
    lines += load_params(params, types, roles, used, "oi", out_type.shape, env, "q")
    lines += emit_scalars(epilogue, env, "v")
    lines.append(f"out[oi] = {store(out_type.dtype, env[result][0])};")
    return lines


def _launch(kernel: Kernel, grid: tuple[int, int, int], arity: int) -> Launch:
    return Launch(kernel, grid, (THREADS, 1, 1), ("out",) + tuple(f"in{j}" for j in range(arity)))


def gemv_region(node: Node, types: Sequence[TensorType]) -> list[Launch] | None:
    """The one launch of a fused product region with few rows, or None (use cuBLAS)."""
    if node.body is None or node.type is None:
        return None  # GEMV_MAX_M is applied by gemv_shape: a prologue needs this kernel anyway
    try:
        plan = plan_body(node.body, types)
    except ValueError:
        return None
    if plan.kind != PRODUCT or plan.anchor is None:
        return None
    by_name = {inner.name: inner for inner in node.body.nodes}
    made = gemv_kernel(
        node.name,
        node.body.params,
        types,
        by_name[plan.anchor],
        [by_name[e] for e in plan.epilogue],
        node.body.result,
        node.type,
        [by_name[p] for p in plan.prologue],
    )
    if made is None:
        return None
    kernel, grid = made
    return [_launch(kernel, grid, len(types))]


def gemv_matmul(node: Node, types: Sequence[TensorType]) -> list[Launch] | None:
    """A plain matmul with few rows as the same kernel (no epilogue), or None."""
    if node.op != "matmul" or node.type is None or len(types) != 2:
        return None
    params = ("#a", "#b")  # cannot clash with IR names
    anchor = Node(node.name, "matmul", params, node.attrs, node.type)
    made = gemv_kernel(node.name, params, types, anchor, [], node.name, node.type)
    if made is None:
        return None
    kernel, grid = made
    return [_launch(kernel, grid, 2)]
