"""A `siblings` region (fuse-siblings) as ONE matrix-vector kernel: several weights, one input row.

    %qkv = fused(%x, %wq, %wk, %wv) body(...) { %q = matmul(%p0, %p1)  %k = matmul(%p0, %p2)
             %v = matmul(%p0, %p3)  %qkv = concat(%q, %k, %v) {axis = 1} }     (x : f16[1,512])
    ->  one launch, grid (tiles of q + tiles of k + tiles of v, S splits of K), 256 threads

The layout and inner loop are `product_kernel`'s one-row kernel's (`geometry`): a block owns
a tile of one segment's columns (the column threads × 16-byte loads) and a slice of K. Tiles are
numbered segment after segment, so a block finds its segment from `blockIdx.x` (a block-uniform
branch) and with it which weights and which epilogue apply. A segment of several products
(SwiGLU's gate and up) keeps one accumulator per product and issues the loads of all of them for
a batch of K rows before using any (8 loads in flight a thread, as for one product). The input
row is read once per block per K row for all of the segment's products (from L1, as in
`product_kernel`).

Each product is rounded to its dtype before the epilogue, as the unfused graph rounds it; the
segment's value is stored at its column offset in the concatenated result. With S > 1 (large K)
the partial sums go through a per-kernel workspace and the block that arrives last at a tile sums
them in a fixed split order: deterministic, bit-identical between replays.

Not handled: regions whose products have more than one row (fuse-siblings only makes one-row
ones); `ONE_ROW_MAX_M` does not apply (there is no cuBLAS fallback for a concatenated result).
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence

from optgraph.analysis.fusion_rules import RegionPlan, Segment
from optgraph.codegen.cuda_source import (
    LAUNCH_DEPENDENTS,
    CodegenError,
    Kernel,
    Launch,
    body_entry,
    in_param,
    kernel_template,
    load,
    out_param,
    store,
)
from optgraph.codegen.kernels.one_row import product_kernel
from optgraph.codegen.kernels.one_row.geometry import (
    BOUNDS,
    THREADS,
    VECTOR,
    first_batch,
    matrix_bytes,
    product_loop,
)
from optgraph.codegen.kernels.one_row.geometry import layout as one_row_layout
from optgraph.codegen.kernels.one_row.geometry import splits as one_row_splits
from optgraph.codegen.kernels.scalars import emit_scalars, load_params, used_values
from optgraph.ir.graph import Node, TensorType


def siblings_launch(
    node: Node,
    types: Sequence[TensorType],
    plan: RegionPlan,
    resident: frozenset[int] = frozenset(),
) -> Launch:
    """The one launch of a `siblings` region. `resident`: the operands (by index) that are
    weights no kernel writes; a segment whose weights all are loads its first batch of weight
    rows before the PDL wait, during the preceding kernel (as `product_kernel`'s one-row kernel
    does, under the same setting `product_kernel.EARLY_WEIGHTS`)."""
    assert node.body is not None and node.type is not None
    body = node.body
    by_name = {n.name: n for n in body.nodes}
    role = {p: f"in{j}" for j, p in enumerate(body.params)}
    ptype = dict(zip(body.params, types))
    first = by_name[plan.segments[0].products[0]]
    x = first.operands[0]
    if x not in role or node.type.numel != sum(s.cols for s in plan.segments):
        raise CodegenError("fused: siblings region is not one row", node.span)
    k = ptype[x].shape[-1]
    dtype = ptype[x].dtype
    vec = VECTOR[dtype]
    n_total = node.type.numel
    ct, _, splits, rows = one_row_layout(k, n_total, vec)
    tile_cols = ct * vec
    tiles = [-(-s.cols // tile_cols) for s in plan.segments]
    if splits > 1:
        splits, rows = one_row_splits(k, sum(tiles))
    width = max(len(s.products) for s in plan.segments)
    early = [
        product_kernel.EARLY_WEIGHTS
        and all(body.params.index(by_name[p].operands[1]) in resident for p in s.products)
        for s in plan.segments
    ]
    late = [  # a segment reading many weight bytes lets its dependents launch after its loop
        e and product_kernel.late_trigger(len(s.products) * matrix_bytes(k, s.cols, vec))
        for e, s in zip(early, plan.segments)
    ]
    warps, lanes = THREADS // 32, THREADS // ct
    salt = hashlib.sha1(f"{node.name}|{k},{n_total},{dtype}".encode()).hexdigest()[:12]
    ws, cnt = f"og_ws_{salt}", f"og_cnt_{salt}"
    lines = [
        "const unsigned int tile = blockIdx.x, split = blockIdx.y;",
        f"const unsigned int cg = threadIdx.x % {ct}u, rl = threadIdx.x / {ct}u;",
        f"const unsigned int k0 = split * {rows}u;",
        f"const unsigned int k1 = min({k}u, k0 + {rows}u);",
        "const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;",
        f"__shared__ float og_red[{warps}][{width}][{tile_cols}];",
    ]
    if splits > 1:
        lines.append("__shared__ bool og_last;")
    base, offset = 0, 0
    for s, (seg, count) in enumerate(zip(plan.segments, tiles)):
        cond = f"tile < {base + count}u"
        head = "if" if s == 0 else "} else if"
        lines.append(f"{head} ({cond}) {{" if s < len(tiles) - 1 or s == 0 else "} else {")
        seg_lines = _segment(
            seg, by_name, body.params, types, role, x, dtype, base, offset, n_total,
            (ct, tile_cols, lanes, warps, splits), (ws, cnt), (early[s], any(early), late[s]),
        )  # fmt: skip
        lines += ["  " + line for line in seg_lines]
        base += count
        offset += seg.cols
    lines.append("}")
    decl = ""
    if splits > 1:
        decl = (
            f"__device__ float {ws}[{splits * width * n_total}];\n"
            f"__device__ unsigned int {cnt}[{base}];\n"
        )
    decls = [out_param(node.type.dtype)] + [in_param(t.dtype, j) for j, t in enumerate(types)]
    text = "\n".join("  " + line for line in "\n".join(lines).split("\n"))
    template = kernel_template(decls, text, BOUNDS, self_wait=any(early))
    family = f"gemv_siblings|{node.name}" if splits > 1 else "gemv_siblings"  # in the name hash
    name = "og_gemvs_" + hashlib.sha1(f"{family}\n{decl}{template}".encode()).hexdigest()[:12]
    kernel = Kernel.assemble(name, decls, text, (decl,), BOUNDS, self_wait=any(early))
    args = ("out",) + tuple(f"in{j}" for j in range(len(types)))
    return Launch(kernel, (base, splits, 1), (THREADS, 1, 1), args)


def _segment(
    seg: Segment,
    by_name: dict[str, Node],
    params: Sequence[str],
    types: Sequence[TensorType],
    role: dict[str, str],
    x: str,
    dtype: str,
    base: int,
    offset: int,
    n_total: int,
    layout: tuple[int, int, int, int, int],
    workspace: tuple[str, str],
    early: tuple[bool, bool, bool] = (False, False, False),
) -> list[str]:
    """The code of one segment: its tiles' products, block reduction and epilogue stores.
    `early` = (this segment loads its first batch of weight rows before the PDL wait, the
    kernel runs the wait itself: each segment then runs it once, after those loads if any, the
    segment lets the dependents launch after its product loop rather than at its wait:
    `product_kernel.LATE_TRIGGER_BYTES`)."""
    ct, tile_cols, lanes, warps, splits = layout
    ws, cnt = workspace
    preload, self_wait, late = early
    vec, n, p = VECTOR[dtype], seg.cols, len(seg.products)
    weights = [f"{role[by_name[name].operands[1]]} + n0" for name in seg.products]
    xv = load(dtype, f"{role[x]}[kk]")
    lines = [
        f"const unsigned int lt = tile - {base}u;",
        f"const unsigned int n0 = lt * {tile_cols}u + cg * {vec}u;",
        *(first_batch(dtype, weights, n, lanes) if preload else []),
        *([body_entry(trigger=not late)] if self_wait else []),
        f"float acc[{p}][{vec}];",
        f"#pragma unroll\nfor (int j = 0; j < {p}; ++j) {{",
        f"  #pragma unroll\n  for (int v = 0; v < {vec}; ++v) acc[j][v] = 0.0f;",
        "}",
        f"if (n0 < {n}u) {{",
        *("  " + s for s in product_loop(dtype, weights, n, lanes, 1, xv, preload)),
        "}",
    ]
    lines += [LAUNCH_DEPENDENTS] if late else []  # a large segment's dependents launch now
    lines += _reduce_lanes(p, vec, ct)
    loop = (
        f"for (unsigned int c = threadIdx.x; c < {tile_cols}u; c += {THREADS}u) {{\n"
        f"  const unsigned int col = lt * {tile_cols}u + c;\n"
        f"  if (col >= {n}u) continue;"
    )
    block_sums = [
        f"  float val{j} = 0.0f;\n"
        f"  #pragma unroll\n  for (int w = 0; w < {warps}; ++w) val{j} += og_red[w][{j}][c];"
        for j in range(p)
    ]
    epi = ["  " + s for s in _epilogue(seg, by_name, params, types, dtype, offset)]
    if splits == 1:
        return [*lines, loop, *block_sums, *epi, "}"]
    slot = f"(split * {p}u + {{j}}u) * {n_total}u + {offset}u + col"
    return [
        *lines,
        loop,
        *block_sums,
        *(f"  {ws}[{slot.format(j=j)}] = val{j};" for j in range(p)),
        "}",
        "__syncthreads();",
        f"if (threadIdx.x == 0) og_last = og_arrive(&{cnt}[tile]) == {splits - 1}u;",
        "__syncthreads();",
        "if (!og_last) return;",
        loop,
        *(
            f"  float val{j} = 0.0f;\n"
            f"  for (unsigned int split = 0; split < {splits}u; ++split) "
            f"val{j} += __ldcg(&{ws}[{slot.format(j=j)}]);"
            for j in range(p)
        ),
        *epi,
        "}",
        f"if (threadIdx.x == 0) {cnt}[tile] = 0u;",
    ]


def _reduce_lanes(p: int, vec: int, ct: int) -> list[str]:
    """Sum the row lanes of one warp for each of the `p` products by shuffles, then write each
    warp's sums to `og_red[warp]` for the block reduction."""
    return [
        f"#pragma unroll\nfor (int j = 0; j < {p}; ++j) {{",
        f"  #pragma unroll\n  for (int v = 0; v < {vec}; ++v) {{",
        (
            f"    for (int o = {ct}; o < 32; o <<= 1) "
            "acc[j][v] += __shfl_xor_sync(0xffffffffu, acc[j][v], o);"
        ),
        "  }",
        "}",
        f"if (lane < {ct}u) {{",
        f"  #pragma unroll\n  for (int j = 0; j < {p}; ++j) {{",
        (
            f"    #pragma unroll\n    for (int v = 0; v < {vec}; ++v) "
            f"og_red[warp][j][lane * {vec}u + v] = acc[j][v];"
        ),
        "  }",
        "}",
        "__syncthreads();",
    ]


def _epilogue(
    seg: Segment,
    by_name: dict[str, Node],
    params: Sequence[str],
    types: Sequence[TensorType],
    dtype: str,
    offset: int,
) -> list[str]:
    """out[offset + col] = the segment's value at column `col` (val<j>: product j, float)."""
    env: dict[str, tuple[str, str]] = {}
    lines: list[str] = []
    for j, name in enumerate(seg.products):
        rounded = load(dtype, store(dtype, f"val{j}")) if dtype != "f32" else f"val{j}"
        lines.append(f"const float a{j} = {rounded};")
        env[name] = (f"a{j}", dtype)
    epilogue = [by_name[e] for e in seg.epilogue]
    value = by_name[seg.value]
    assert value.type is not None
    roles = [f"in{j}" for j in range(len(params))]
    used = used_values(epilogue, (seg.value,))
    lines += load_params(params, types, roles, used, "col", value.type.shape, env, "q")
    lines += emit_scalars(epilogue, env, "e")
    lines.append(f"out[{offset}u + col] = {store(value.type.dtype, env[seg.value][0])};")
    return lines
