"""Prefill attention (many query rows): K/V tiles in shared memory, a warp per two query rows.

    %o = attention(%q, %k, %v) {causal = true} : f16[1,32,512,128]
    ->  grid (512 / 16 query tiles, 32 heads, 1), 256 threads (8 warps x 2 rows)

A block owns `ROWS_PER_WARP` x 8 consecutive query rows of one head. It walks the keys in tiles
of 32: all threads copy the tile's K and V rows into shared memory (float32, coalesced), then each
warp, for its rows:

1. every lane forms partial dot products of its slice of D (elements lane + 32·e, bank-conflict
   free) with all 32 keys of the tile; one butterfly reduce-scatter (31 shuffles for 32 keys instead
   of 5 per key) leaves lane j holding the score of key j;
2. online softmax: the tile's row max by warp shuffles, the running max m and each lane's share of
   the running sum l rescaled, p = exp(s − m);
3. acc[slice] += Σ_j p_j · V[j][slice], with p broadcast through shared memory.

With `causal`, tiles past the block's last visible key are never loaded and a warp skips tiles
its rows cannot see; the last query tiles (the most keys) are the first blocks, so the short ones
fill the tail. The next tile's K/V rows are loaded into registers (16-byte units, when the pointers
allow) while the warps work on the current one. Scores, sums and accumulators are float32; every sum has a fixed order.
Not handled (the caller uses the row kernel): D > `MAX_D`.
"""

from __future__ import annotations

from optgraph.codegen.cuda_source import (
    Launch,
    f32_literal,
    in_param,
    load,
    make_kernel,
    out_param,
    store,
)
from optgraph.codegen.kernels.attention.head_rows import (
    ELEMENT_BYTES,
    VECTOR_TYPES,
    AttentionShape,
    operand_args,
    operand_decls,
    unpack,
    warp_max,
    warp_sum,
)

MAX_D = 160  # two float32 tiles of 32 x D stay within 48 KiB of shared memory
WARPS = 8
ROWS_PER_WARP = 2
KEYS = 32  # keys per tile: one per lane after the reduce-scatter
NEG_INF = f32_literal(float("-inf"))


def fits(shape: AttentionShape) -> bool:
    return shape.d <= MAX_D


def _reduce_scatter(rw: int) -> list[str]:
    """part[r][0..32) per lane -> part[r][0] = the warp's sum for key `lane`."""
    lines: list[str] = []
    for o in (16, 8, 4, 2, 1):
        lines += [
            f"{{ const bool up = (lane & {o}) != 0;",
            f"  #pragma unroll\n  for (int r = 0; r < {rw}; ++r) {{",
            f"    #pragma unroll\n    for (int i = 0; i < {o}; ++i) {{",
            f"      const float send = up ? part[r][i] : part[r][i + {o}];",
            f"      const float keep = up ? part[r][i + {o}] : part[r][i];",
            f"      part[r][i] = keep + __shfl_xor_sync(0xffffffffu, send, {o});",
            "    }",
            "  }",
            "}",
        ]
    return lines


def _vector_units(shape: AttentionShape) -> int:
    """Elements per 16-byte unit when a tile can be loaded in such units, else 0."""
    size = ELEMENT_BYTES.get(shape.dtype, 0)
    epu = 16 // size if size else 0
    if not epu or shape.d % epu or (shape.skv * shape.d * size) % 16:
        return 0
    return epu


def _tile_loader(shape: AttentionShape, threads: int) -> list[str]:
    """`vec_ok` and `fetch(k0)`: the K/V tile at key k0 (KEYS contiguous rows) into registers
    (kr, vr: 16-byte units, zeros past kend), issued a tile ahead of its use."""
    epu = _vector_units(shape)
    if not epu:
        return ["const bool vec_ok = false;"]
    first = "kfirst" if shape.window else "0u"
    units = KEYS * shape.d // epu
    upt = -(-units // threads)
    zero = "uint4{0u, 0u, 0u, 0u}"
    return [
        "const bool vec_ok = (((unsigned long long)in1 | (unsigned long long)in2) & 15ull) == 0ull;",
        f"uint4 kr[{upt}], vr[{upt}];",
        "auto fetch = [&](unsigned int k0) {",
        f"  #pragma unroll\n  for (int p = 0; p < {upt}; ++p) {{",
        f"    const unsigned int x = threadIdx.x + p * {threads}u;",
        f"    const bool ok = x < {units}u && k0 + x / {shape.d // epu}u < kend;",
        (
            f"    const unsigned long long g = kvoff + (unsigned long long)k0 * {shape.d}u"
            f" + (unsigned long long)x * {epu}u;"
        ),
        f"    kr[p] = ok ? *reinterpret_cast<const uint4*>(in1 + g) : {zero};",
        f"    vr[p] = ok ? *reinterpret_cast<const uint4*>(in2 + g) : {zero};",
        "  }",
        "};",
        f"if (vec_ok && kend > {first}) fetch({first});",
    ]


def _tile_store(shape: AttentionShape, threads: int) -> list[str]:
    """The tile at k0 into shared memory as float32: from the registers fetched ahead (then the
    next tile's fetch), or element by element when the pointers are not aligned."""
    d, dt = shape.d, shape.dtype
    scalar = [
        f"for (unsigned int x = threadIdx.x; x < {KEYS * d}u; x += {threads}u) {{",
        f"  const unsigned int j = x / {d}u, t = x % {d}u;",
        f"  const unsigned long long g = kvoff + (unsigned long long)(k0 + j) * {d}u + t;",
        "  const bool ok = k0 + j < kend;",
        f"  og_k[j][t] = ok ? {load(dt, 'in1[g]')} : 0.0f;",
        f"  og_v[j][t] = ok ? {load(dt, 'in2[g]')} : 0.0f;",
        "}",
    ]
    epu = _vector_units(shape)
    if not epu:
        return scalar
    units = KEYS * d // epu
    upr = d // epu
    parts = VECTOR_TYPES[16][1]
    lines = [
        "if (vec_ok) {",
        f"  #pragma unroll\n  for (int p = 0; p < {-(-units // threads)}; ++p) {{",
        f"    const unsigned int x = threadIdx.x + p * {threads}u;",
        f"    if (x >= {units}u) break;",
        f"    const unsigned int j = x / {upr}u, t = (x % {upr}u) * {epu}u;",
        f"    float f[{epu}];",
    ]
    for src, dst in (("kr[p]", "og_k"), ("vr[p]", "og_v")):
        lines += ["    " + x for x in unpack(dt, src, parts, "f")]
        for q in range(0, epu, 4):
            lines.append(
                f"    *reinterpret_cast<float4*>(&{dst}[j][t + {q}u]) = "
                f"float4{{f[{q}], f[{q + 1}], f[{q + 2}], f[{q + 3}]}};"
            )
    lines += [
        "  }",
        f"  if (k0 + {KEYS}u < kend) fetch(k0 + {KEYS}u);",
        "} else {",
        *("  " + x for x in scalar),
        "}",
    ]
    return lines


def tiled_attention(shape: AttentionShape) -> Launch:
    """The launch of the tiled kernel for `shape`. Phases: the block's query rows (`_rows`), the
    K/V tile loads (`_tile_loader`, `_tile_store`), per tile the scores (`_scores`), the online
    softmax step (`_softmax_step`) and the weighted sum of V (`_accumulate`), then the rows'
    store (`_store_rows`)."""
    s, dt = shape, shape.dtype
    threads = WARPS * 32
    qtiles = -(-s.sq // (WARPS * ROWS_PER_WARP))
    lines = [
        *_rows(s, qtiles),
        *_tile_loader(s, threads),
        f"for (unsigned int k0 = {'kfirst' if s.window else '0'}; k0 < kend; k0 += {KEYS}u) {{",
        "  __syncthreads();",
        *("  " + x for x in _tile_store(s, threads)),
        "  __syncthreads();",
        "  if (k0 >= wlim) continue;",  # this warp's rows see none of the tile (uniform)
        *_scores(s),
        *_softmax_step(s),
        "  __syncwarp();",
        *_accumulate(s),
        "  __syncwarp();",
        "}",
        *_store_rows(s),
    ]
    decls = [out_param(dt), in_param(dt, 0), in_param(dt, 1), in_param(dt, 2)]
    decls += operand_decls(s)
    kernel = make_kernel("attention_tiled", decls, "\n".join("  " + x for x in lines))
    args = ("out", "in0", "in1", "in2") + operand_args(s)
    return Launch(kernel, (qtiles, s.hq, s.b), (threads, 1, 1), args)


def _rows(s: AttentionShape, qtiles: int) -> list[str]:
    """The block's query tile (the last first), head and offsets, its shared tiles, `kend` (the
    keys any of its rows sees), and for each of the warp's rows the lane's slice of q and an
    empty online softmax state; `wlim` the keys the warp's rows see."""
    e, d, rw = s.per_lane, s.d, ROWS_PER_WARP
    rows = WARPS * rw
    limit = "og_min((long long)L, (long long)L - SQ + (long long)i + 1LL)" if s.causal else "L"
    if s.causal and s.top_left:
        limit = s.causal_limit("L", "i")
    return [
        f"const long long SQ = {s.sq}LL;",
        f"const unsigned int qt = {qtiles - 1}u - blockIdx.x, h = blockIdx.y, bz = blockIdx.z;",
        f"const unsigned int hk = h / {s.group}u;",
        "const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;",
        f"long long L = {s.length_expr()};",
        "if (L < 0) L = 0;",
        f"const unsigned long long kvoff = (unsigned long long)(bz * {s.hkv}u + hk) * {s.skv * d}ull;",
        f"const unsigned long long qbase = (unsigned long long)(bz * {s.hq}u + h) * {s.sq * d}ull;",
        f"alignas(16) __shared__ float og_k[{KEYS}][{d}];",
        f"alignas(16) __shared__ float og_v[{KEYS}][{d}];",
        f"__shared__ float og_p[{WARPS}][{rw}][{KEYS}];",
        # the block's key range: the last row's limit (causal) or L
        f"const long long last = og_min((long long)(qt + 1u) * {rows}LL, SQ) - 1LL;",
        "long long kend_l;",
        "{ const long long i = last; kend_l = " + limit + "; }",
        "const unsigned int kend = kend_l > 0 ? (unsigned int)kend_l : 0u;",
        *_first_tile(s, rows),
        f"float qv[{rw}][{e}], acc[{rw}][{e}], m[{rw}], l[{rw}];",
        f"unsigned int lim[{rw}];",
        *([f"long long lo[{rw}];"] if s.window else []),
        *([f"unsigned long long moff[{rw}];"] if s.mask is not None else []),
        "unsigned int wlim = 0u;",
        f"#pragma unroll\nfor (int r = 0; r < {rw}; ++r) {{",
        f"  const long long i = (long long)qt * {rows}LL + warp * {rw} + r;",
        "  long long lm = i < SQ ? (long long)(" + limit + ") : 0LL;",
        "  lim[r] = lm > 0 ? (unsigned int)lm : 0u;",
        *([f"  lo[r] = {s.window_low('L', 'i')};"] if s.window else []),
        *([f"  moff[r] = {s.mask_offset('bz', 'h', 'i')};"] if s.mask is not None else []),
        "  wlim = og_max(wlim, lim[r]);",
        f"  m[r] = {NEG_INF}; l[r] = 0.0f;",
        f"  #pragma unroll\n  for (int k = 0; k < {e}; ++k) {{",
        "    const unsigned int t = (unsigned int)lane + 32u * k;",
        "    acc[r][k] = 0.0f;",
        (
            f"    qv[r][k] = (i < SQ && t < {d}u) ? "
            f"{load(s.dtype, 'in0[qbase + (unsigned long long)i * ' + str(d) + 'u + t]')} : 0.0f;"
        ),
        "  }",
        "}",
    ]


def _first_tile(s: AttentionShape, rows: int) -> list[str]:
    """With a window, `kfirst`: the tile holding the first key the block's first row (the one
    with the earliest window) sees; the tiles before it are not read."""
    if not s.window:
        return []
    return [
        "long long kfirst_l;",
        f"{{ const long long i = (long long)qt * {rows}LL; kfirst_l = {s.window_low('L', 'i')}; }}",
        f"const unsigned int kfirst = kfirst_l > 0 ? (unsigned int)(kfirst_l / {KEYS}) * {KEYS}u : 0u;",
    ]


def _scores(s: AttentionShape) -> list[str]:
    """Each lane's partial dot products of its slice of q with the tile's keys, then the
    reduce-scatter: part[r][0] = the score of key `lane` for row r. (Lines of the key loop's
    body, indented as such.)"""
    e, d, rw = s.per_lane, s.d, ROWS_PER_WARP
    return [
        f"  float part[{rw}][{KEYS}];",
        f"  #pragma unroll\n  for (int j = 0; j < {KEYS}; ++j) {{",
        f"    float kf[{e}];",
        f"    #pragma unroll\n    for (int k = 0; k < {e}; ++k) {{",
        "      const unsigned int t = (unsigned int)lane + 32u * k;",
        f"      kf[k] = t < {d}u ? og_k[j][t] : 0.0f;",
        "    }",
        f"    #pragma unroll\n    for (int r = 0; r < {rw}; ++r) {{",
        "      float dot = 0.0f;",
        f"      #pragma unroll\n      for (int k = 0; k < {e}; ++k) dot += qv[r][k] * kf[k];",
        "      part[r][j] = dot;",
        "    }",
        "  }",
        *("  " + x for x in "\n".join(_reduce_scatter(rw)).split("\n")),
    ]


def _softmax_step(s: AttentionShape) -> list[str]:
    """The online softmax over the tile for each row: the new max, the rescaled sum and
    accumulator, and p = exp(score - max) of key `lane` into og_p (0 where masked). (Lines of
    the key loop's body.)"""
    e, rw = s.per_lane, ROWS_PER_WARP
    return [
        "  const unsigned int key = k0 + (unsigned int)lane;",
        f"  #pragma unroll\n  for (int r = 0; r < {rw}; ++r) {{",
        _score_line(s),
        "    float mx = sc;",
        f"    {warp_max('mx')}",
        "    mx = og_max(mx, m[r]);",
        "    float p = 0.0f;",
        f"    if (mx != {NEG_INF}) {{",  # uniform over the warp
        "      const float corr = expf(m[r] - mx);",
        f"      p = sc == {NEG_INF} ? 0.0f : expf(sc - mx);",
        "      l[r] = l[r] * corr + p;",
        f"      #pragma unroll\n      for (int k = 0; k < {e}; ++k) acc[r][k] *= corr;",
        "      m[r] = mx;",
        "    }",
        "    og_p[warp][r][lane] = p;",
        "  }",
    ]


def _score_line(s: AttentionShape) -> str:
    """sc: the score of key `key` for row r, -inf where the row does not see it."""
    scaled = f"part[r][0] * {f32_literal(s.scale)}"
    if not s.has_extras:
        return f"    const float sc = key < lim[r] ? {scaled} : {NEG_INF};"
    seen = s.seen_and("key < lim[r]", "key", "lo[r]", "moff[r]")
    score = s.score_expr(scaled, "key", "moff[r]")
    return f"    const float sc = ({seen}) ? {score} : {NEG_INF};"


def _accumulate(s: AttentionShape) -> list[str]:
    """acc[r][slice] += p_j · V[j][slice] over the tile's keys j. (Lines of the key loop's
    body.)"""
    e, d, rw = s.per_lane, s.d, ROWS_PER_WARP
    return [
        f"  #pragma unroll 8\n  for (int j = 0; j < {KEYS}; ++j) {{",
        f"    float vf[{e}];",
        f"    #pragma unroll\n    for (int k = 0; k < {e}; ++k) {{",
        "      const unsigned int t = (unsigned int)lane + 32u * k;",
        f"      vf[k] = t < {d}u ? og_v[j][t] : 0.0f;",
        "    }",
        f"    #pragma unroll\n    for (int r = 0; r < {rw}; ++r) {{",
        "      const float pj = og_p[warp][r][j];",
        f"      #pragma unroll\n      for (int k = 0; k < {e}; ++k) acc[r][k] += pj * vf[k];",
        "    }",
        "  }",
    ]


def _store_rows(s: AttentionShape) -> list[str]:
    """Each row's accumulator divided by its sum (the lanes' shares added), 0 for a row that
    sees no key."""
    e, d, rw = s.per_lane, s.d, ROWS_PER_WARP
    denominator = s.denominator("ls", "m[r]", "h")  # m[r]: the same in every lane of the warp
    return [
        f"#pragma unroll\nfor (int r = 0; r < {rw}; ++r) {{",
        f"  const long long i = (long long)qt * {WARPS * rw}LL + warp * {rw} + r;",
        "  float ls = l[r];",
        f"  {warp_sum('ls')}",
        "  if (i >= SQ) continue;",
        f"  #pragma unroll\n  for (int k = 0; k < {e}; ++k) {{",
        "    const unsigned int t = (unsigned int)lane + 32u * k;",
        (
            f"    if (t < {d}u) out[qbase + (unsigned long long)i * {d}u + t] = "
            f"{store(s.dtype, f'ls > 0.0f ? acc[r][k] / {denominator} : 0.0f')};"
        ),
        "  }",
        "}",
    ]
