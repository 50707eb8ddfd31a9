"""Decode attention (few query rows): split-KV ("flash-decoding") in one kernel.

    %o = attention(%q, %k, %v, %len) : f16[1,32,1,128]    (k, v : f16[1,8,1024,128])
    ->  grid (C = 16 key chunks, 8 KV heads x 1 row tile, 1), 256 threads

A block owns one KV head, one tile of up to `ROWS` query rows of that head's group (the group's
q heads x the Sq queries: with GQA the K/V rows are read once per group, not once per q head) and
one chunk of the keys. Each warp takes a strided set of the chunk's keys, `UNROLL` at a time: one
key row is one coalesced access (each lane a slice of D, vector loads when aligned, see
`head_rows`), the dot products are finished with warp shuffles, and each row keeps an online
softmax (max m, sum l, accumulator acc[D]). The warps' states are merged in shared memory in warp
order. With C > 1 chunks the block writes its (m, l, acc) to a per-kernel workspace (`__device__`
arrays, like `product_kernel`'s split-K) and bumps the tile's counter; the block that arrives last
merges the C partials in chunk order, writes the rows and resets the counter. Every sum is taken
in a fixed order, so results are deterministic. C is chosen to give about `TARGET_BLOCKS` blocks.

Kernels with a workspace carry the node's name in their text (two nodes never share one). Not
handled (the caller uses another kernel): D > `MAX_D`, more than `MAX_ROWS` rows per KV head.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from optgraph.codegen.cuda_source import (
    Kernel,
    Launch,
    f32_literal,
    in_param,
    kernel_template,
    load,
    out_param,
    store,
)
from optgraph.codegen.kernels.attention.chunk_merge import NEG_INF, merged_sums
from optgraph.codegen.kernels.attention.head_rows import (
    AttentionShape,
    contiguous_rows,
    operand_args,
    operand_decls,
    query_rows_start,
    vector_check,
    warp_sum,
)

MAX_D = 256
MAX_SQ = 4
MAX_ROWS = 16  # query rows per KV head (group x Sq)
ROWS = 4  # rows per block
# Keys a warp has in flight (half that for D > 128). Fewer keys a warp means smaller key chunks,
# so more chunks and blocks read the cache in parallel: 4 keys beat 8 on a long cache, and on a
# short one (up to SHORT_CACHE keys) 2 beat 4 and 8 (benchmarks/bench_kernels.py on an H100; see
# docs/benchmarks.md).
UNROLL = 4
SHORT_CACHE = 256  # caches up to this many keys use SHORT_CACHE_UNROLL
SHORT_CACHE_UNROLL = 2
TARGET_BLOCKS = 132 * 2
MAX_CHUNKS = 16


def fits(shape: AttentionShape) -> bool:
    return shape.d <= MAX_D and shape.sq <= MAX_SQ and shape.group * shape.sq <= MAX_ROWS


def _unroll(shape: AttentionShape) -> int:
    keys = SHORT_CACHE_UNROLL if shape.skv <= SHORT_CACHE else UNROLL
    return keys if shape.per_lane <= 4 else max(1, keys // 2)


def _layout(shape: AttentionShape) -> tuple[int, int, int, int, int]:
    """(rows per block, row tiles, warps, chunks, keys per chunk)."""
    rows = shape.group * shape.sq
    rb = min(rows, ROWS)
    rt = -(-rows // rb)
    warps = 8 if shape.d <= 128 else 4
    base = shape.b * shape.hkv * rt
    min_chunk = warps * _unroll(shape)
    chunks = max(1, min(-(-TARGET_BLOCKS // base), -(-shape.skv // min_chunk), MAX_CHUNKS))
    per_chunk = -(-shape.skv // chunks)
    return rb, rt, warps, -(-shape.skv // per_chunk), per_chunk


@dataclass(frozen=True)
class _Layout:
    """`rb` query rows a block of `rt` row tiles, `warps` warps taking `un` keys at a time,
    `chunks` chunks of `per_chunk` keys (see `_layout`)."""

    rb: int
    rt: int
    warps: int
    chunks: int
    per_chunk: int
    un: int


def decode_attention(shape: AttentionShape, salt: str) -> Launch:
    """The launch of the split-KV kernel for `shape`; `salt` (the node's name) names its
    workspace when it has more than one key chunk. Phases: the block's query rows (`_rows`), the
    warps' walk over the chunk's keys (`_walk_keys`, with `_consume` for each batch of keys),
    the merge of the warps' states in shared memory (`_share_warps`), then the store, directly
    or through the workspace and the last block of the tile (`_store`)."""
    s, dt = shape, shape.dtype
    lay = _Layout(*_layout(s), _unroll(s))
    lines = [*_rows(s, lay), *_walk_keys(s, lay), *_share_warps(s, lay)]
    stores, decl = _store(s, lay, salt)
    lines += stores
    decls = [out_param(dt), in_param(dt, 0), in_param(dt, 1), in_param(dt, 2)]
    decls += operand_decls(s)
    text = "\n".join("  " + line for line in "\n".join(lines).split("\n"))
    family = f"attention_decode|{salt}" if lay.chunks > 1 else "attention_decode"
    template = kernel_template(decls, text)
    name = "og_attention_decode_"
    name += hashlib.sha1(f"{family}\n{decl}{template}".encode()).hexdigest()[:12]
    kernel = Kernel.assemble(name, decls, text, (decl,))
    args = ("out", "in0", "in1", "in2") + operand_args(s)
    return Launch(kernel, (lay.chunks, s.hkv * lay.rt, s.b), (lay.warps * 32, 1, 1), args)


def _rows(s: AttentionShape, lay: _Layout) -> list[str]:
    """The block's coordinates, the visible length L, and for each of its query rows the slice
    `qv[r]` of q this lane holds and `lim[r]`, the keys the row sees; `kend` the most of them."""
    rb, rt, e, d = lay.rb, lay.rt, s.per_lane, s.d
    lines = [
        "const unsigned int c = blockIdx.x, hr = blockIdx.y, bz = blockIdx.z;",
        f"const unsigned int hk = hr / {rt}u, rt = hr % {rt}u;",
        "const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;",
        f"long long Lx = {s.length_expr()};",
        "if (Lx < 0) Lx = 0;",
        "const unsigned int L = (unsigned int)Lx;",
        f"const unsigned long long kvoff = (unsigned long long)(bz * {s.hkv}u + hk) * {s.skv * d}ull;",
        *vector_check(s, ("in1", "in2")),
        *query_rows_start(s, rb, e, kbeg=True),
    ]
    if s.causal and s.top_left:
        lines += [
            f"  if (active) lm = og_min(lm, {s.causal_limit('L', f'gr % {s.sq}u')});",
            "  if (lm < 0) lm = 0;",
        ]
    elif s.causal:
        lines += [
            f"  if (active) lm = og_min(lm, (long long)L - {s.sq}LL + (long long)(gr % {s.sq}u) + 1LL);",
            "  if (lm < 0) lm = 0;",
        ]
    lines += _row_extras(s)
    return lines + [
        "  lim[r] = (unsigned int)lm;",
        "  kend = og_max(kend, lim[r]);",
        "  const unsigned long long qo = active ? qoff_of(gr) : 0ull;",
        f"  #pragma unroll\n  for (int k = 0; k < {e}; ++k) {{",
        f"    const unsigned int t = (unsigned int)lane * {e}u + k;",
        f"    qv[r][k] = (active && t < {d}u) ? {load(s.dtype, 'in0[qo + t]')} : 0.0f;",
        "  }",
        "}",
    ]


def _row_extras(s: AttentionShape) -> list[str]:
    """Row r's window start lo[r] and mask offset moff[r], where the node has them."""
    lines = []
    if s.window:
        lines.append(f"  lo[r] = {s.window_low('L', f'gr % {s.sq}u')};")
        # the block's first key any row sees in its window: keys before it are not read
        lines.append("  if (active) kbeg = og_min(kbeg, (unsigned int)og_max(lo[r], 0LL));")
    if s.mask is not None:
        offset = s.mask_offset("bz", f"hk * {s.group}u + gr / {s.sq}u", f"gr % {s.sq}u")
        lines.append(f"  moff[r] = active ? {offset} : 0ull;")
    return lines


def _walk_keys(s: AttentionShape, lay: _Layout) -> list[str]:
    """Each warp's online softmax state (m, l, acc per row) over its keys of the block's chunk,
    `un` keys a step."""
    rb, un, e, per_chunk = lay.rb, lay.un, s.per_lane, lay.per_chunk
    return [
        f"const unsigned int k0 = c * {per_chunk}u;",
        # kc1 bounds the chunk's rows (always valid memory), k1 the visible ones: the loop and its
        # first loads do not wait for kv_len, they are issued alongside its read
        f"const unsigned int kc1 = og_min(k0 + {per_chunk}u, {s.skv}u);",
        "const unsigned int k1 = og_min(kc1, kend);",
        f"float m[{rb}], l[{rb}], acc[{rb}][{e}];",
        f"#pragma unroll\nfor (int r = 0; r < {rb}; ++r) {{",
        f"  m[r] = {NEG_INF}; l[r] = 0.0f;",
        f"  #pragma unroll\n  for (int k = 0; k < {e}; ++k) acc[r][k] = 0.0f;",
        "}",
        (
            f"for (unsigned int j0 = k0 + (unsigned int)warp * {un}u; j0 < kc1;"
            f" j0 += {lay.warps * un}u) {{"
        ),
        *([f"  if (j0 + {un}u <= kbeg) continue;"] if s.window else []),
        # rows past kc1 read row j0 (valid: j0 < kc1); rows past k1 are masked in `consume`
        *(
            "  " + x
            for x in contiguous_rows(
                s, un, "(j0 + u < kc1 ? j0 + u : j0)", ["if (j0 >= k1) break;", *_consume(s, lay)]
            )
        ),
        "}",
    ]


def _consume(s: AttentionShape, lay: _Layout) -> list[str]:
    """The online softmax step of every row over the `un` keys in kf/vf (keys past k1 or the
    row's limit masked)."""
    rb, un, e = lay.rb, lay.un, s.per_lane
    return [
        f"#pragma unroll\nfor (int r = 0; r < {rb}; ++r) {{",
        f"  float sc[{un}];",
        "  float mx = m[r];",
        f"  #pragma unroll\n  for (int u = 0; u < {un}; ++u) {{",
        "    float dot = 0.0f;",
        f"    #pragma unroll\n    for (int k = 0; k < {e}; ++k) dot += qv[r][k] * kf[u][k];",
        f"    {warp_sum('dot')}",
        _score_line(s),
        "    mx = og_max(mx, sc[u]);",
        "  }",
        f"  if (mx == {NEG_INF}) continue;",  # nothing visible yet (uniform over the warp)
        "  const float corr = expf(m[r] - mx);",
        "  l[r] *= corr;",
        f"  #pragma unroll\n  for (int k = 0; k < {e}; ++k) acc[r][k] *= corr;",
        f"  #pragma unroll\n  for (int u = 0; u < {un}; ++u) {{",
        f"    const float p = sc[u] == {NEG_INF} ? 0.0f : expf(sc[u] - mx);",
        "    l[r] += p;",
        f"    #pragma unroll\n    for (int k = 0; k < {e}; ++k) acc[r][k] += p * vf[u][k];",
        "  }",
        "  m[r] = mx;",
        "}",
    ]


def _score_line(s: AttentionShape) -> str:
    """sc[u]: the score of key j0 + u for row r, -inf where the row does not see it."""
    scaled = f"dot * {f32_literal(s.scale)}"
    if not s.has_extras:
        return f"    sc[u] = (j0 + u < k1 && j0 + u < lim[r]) ? {scaled} : {NEG_INF};"
    seen = s.seen_and("j0 + u < k1 && j0 + u < lim[r]", "j0 + u", "lo[r]", "moff[r]")
    score = s.score_expr(scaled, "j0 + u", "moff[r]")
    return f"    sc[u] = ({seen}) ? {score} : {NEG_INF};"


def _share_warps(s: AttentionShape, lay: _Layout) -> list[str]:
    """Every warp's (m, l, acc) into shared memory, for the merge in warp order."""
    rb, warps, e, d = lay.rb, lay.warps, s.per_lane, s.d
    return [
        f"__shared__ float og_m[{warps}][{rb}], og_l[{warps}][{rb}];",
        f"__shared__ float og_a[{warps}][{rb}][{d}];",
        f"#pragma unroll\nfor (int r = 0; r < {rb}; ++r) {{",
        "  if (lane == 0) { og_m[warp][r] = m[r]; og_l[warp][r] = l[r]; }",
        f"  #pragma unroll\n  for (int k = 0; k < {e}; ++k) {{",
        f"    const unsigned int t = (unsigned int)lane * {e}u + k;",
        f"    if (t < {d}u) og_a[warp][r][t] = acc[r][k];",
        "  }",
        "}",
        "__syncthreads();",
    ]


def _store(s: AttentionShape, lay: _Layout, salt: str) -> tuple[list[str], str]:
    """(statements, file-scope declarations): merge the warps' states in warp order for each
    (row, element) of the block and store the rows; with C > 1 chunks, write the merged state to
    the workspace, and let the block that arrives last at the tile merge the C partials in chunk
    order, store, and reset the tile's counter."""
    rb, rt, warps, chunks, d = lay.rb, lay.rt, lay.warps, lay.chunks, s.d
    merge_warps = [
        f"  const unsigned int r = t / {d}u, dd = t % {d}u;",
        f"  float M = {NEG_INF};",
        f"  for (int w = 0; w < {warps}; ++w) M = og_max(M, og_m[w][r]);",
        "  float Ls = 0.0f, A = 0.0f;",
        f"  for (int w = 0; w < {warps}; ++w) {{",
        f"    const float wt = og_m[w][r] == {NEG_INF} ? 0.0f : expf(og_m[w][r] - M);",
        "    Ls += og_l[w][r] * wt;",
        "    A += og_a[w][r][dd] * wt;",
        "  }",
    ]
    loop = f"for (unsigned int t = threadIdx.x; t < {rb * d}u; t += {warps * 32}u) {{"
    head = f"hk * {s.group}u + gr / {s.sq}u"
    quotient = f"Ls > 0.0f ? A / {s.denominator('Ls', 'M', head)} : 0.0f"
    write = [
        f"  const unsigned int gr = rt * {rb}u + r;",
        f"  if (gr < {s.group * s.sq}u) out[qoff_of(gr) + dd] = {store(s.dtype, quotient)};",
    ]
    if chunks == 1:
        return [loop, *merge_warps, *write, "}"], ""
    layout = (rb, rt, warps, chunks, lay.per_chunk, lay.un)
    extras = f"|{s.extras_key()}" if s.has_extras else ""
    digest = hashlib.sha1(f"{salt}|attention|{s}|{layout}{extras}".encode()).hexdigest()[:12]
    ws, ml, cnt = f"og_ws_{digest}", f"og_ml_{digest}", f"og_cnt_{digest}"
    tiles = s.b * s.hkv * rt
    decl = (
        f"__device__ float {ws}[{tiles * chunks * rb * d}];\n"
        f"__device__ float {ml}[{tiles * chunks * rb * 2}];\n"
        f"__device__ unsigned int {cnt}[{tiles}];\n"
    )
    part = f"(tile * {chunks}u + {{c}}) * {rb}u + r"
    lines = [
        f"const unsigned int tile = bz * {s.hkv * rt}u + hr;",
        loop,
        *merge_warps,
        f"  {ws}[({part.format(c='c')}) * {d}u + dd] = A;",
        (
            f"  if (dd == 0u) {{ {ml}[({part.format(c='c')}) * 2u] = M; "
            f"{ml}[({part.format(c='c')}) * 2u + 1u] = Ls; }}"
        ),
        "}",
        "__threadfence();",
        "__syncthreads();",
        "__shared__ bool og_last;",
        f"if (threadIdx.x == 0) og_last = atomicAdd(&{cnt}[tile], 1u) == {chunks - 1}u;",
        "__syncthreads();",
        "if (!og_last) return;",
        "__threadfence();",
        loop,
        f"  const unsigned int r = t / {d}u, dd = t % {d}u;",
        *merged_sums(chunks, d, ws, ml, part.format(c="q")),
        *write,
        "}",
        f"if (threadIdx.x == 0) {cnt}[tile] = 0u;",
    ]
    return lines, decl
