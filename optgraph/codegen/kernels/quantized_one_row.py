"""The wide layout of the quantized one-row product (`quantized.one_row_launch` when
`quantized.WIDE_ONE_ROW`): the same products, decoded values and sums per lane as the layout
before it, with fewer memory instructions and more bytes in flight.

    %y = matmul(%x, %w) {transpose_b = true} : f16[1,1024]   (%w : q4_k[1024,4096])
    ->  8 warps a block: 4 output columns x 2 parts of K (parts: `parts`, until the grid holds
        `TARGET_WARPS` warps); each warp stages its tiles of the weight row (`TILE_BYTES` or
        more) in shared memory, the next tile's 16-byte loads issued before the current tile is
        decoded; a lane reads
        its unit of 32 values from the stage as 16-byte (q4_k) or 4-byte words (q6_k, q8_0),
        decodes them in registers (`WORD_DECODERS`: the values `og_dq32_<type>` gives, bit for
        bit), and reads its 32 values of x in 16-byte loads; the parts' sums meet in shared
        memory, added in part order (deterministic)

What changed against the layout before (a warp a column, one tile in flight, byte loads from
the stage, one load of x a value), by the instructions a unit of 32 values costs a lane:
q4_k's 38 shared byte loads become 3 16-byte loads, q8_0's 34 and q6_k's 68 become 9 and 20
word loads (and funnel shifts), x's 32 loads become 4 (f16, bf16) or 8 (f32). Other types keep
their byte decoders on the stage. A weight row that is not whole 16-byte units, or not
16-byte aligned, is read in place as before. Measured on an H200: 4.7-4.9x the layout before it
on the realistic decode, still bound by work per value rather than bytes (docs/results/
2026-12-02-h200-quantized-weights.md).
"""

from __future__ import annotations

from optgraph.codegen.cuda_source import STORAGE, load, store

# Warps of the grid the parts of K aim for: 132 multiprocessors x 64 resident warps is 8448.
TARGET_WARPS = 8192
# Bytes of a warp's tile at least: the bytes each warp has in flight while it decodes.
TILE_BYTES = 1024

# `q - bias` as a float, exactly (q < 2^23, bias <= q + 2^23): 2^23 + q spelled as bits, less
# 2^23 + bias. No int-to-float conversion: sm_90 converts at a quarter of its float rate, and
# the decoders convert every value.
INT_TO_FLOAT = r"""__device__ __forceinline__ float og_q_int(unsigned int q, unsigned int bias) {
  return __fsub_rn(__uint_as_float(0x4b000000u | q), __uint_as_float(0x4b000000u | bias));
}
"""
# Decoders of a unit from words already in registers, each giving what `og_dq32_<type>` gives.
WORD_DECODERS: dict[str, str] = {
    "q4_k": r"""// q4_k sub-block s from the block's first 16 bytes h (d, dmin, 12 bytes of scales) and
// the 32 bytes of quants it shares with sub-block s ^ 1 (q0, q1).
__device__ __forceinline__ void og_dq32w_q4_k(uint4 h, uint4 q0, uint4 q1, unsigned int s, float* w) {
  const unsigned int at = (s & 3u) * 8u;
  const unsigned int a = (h.y >> at) & 255u, b = (h.z >> at) & 255u, c = (h.w >> at) & 255u;
  const unsigned int sc = s < 4u ? a & 63u : (c & 15u) | ((a >> 2) & 48u);
  const unsigned int mn = s < 4u ? b & 63u : (c >> 4) | ((b >> 2) & 48u);
  const float d = __fmul_rn(og_f16_to_f32((og_f16)(h.x & 0xffffu)), (float)sc);
  const float m = __fmul_rn(og_f16_to_f32((og_f16)(h.x >> 16)), (float)mn);
  const unsigned int q[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
  const unsigned int shift = (s & 1u) * 4u;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const unsigned int v = (q[j >> 2] >> ((j & 3) * 8 + shift)) & 15u;
    w[j] = __fsub_rn(__fmul_rn(d, og_q_int(v, 0u)), m);
  }
}
""",
    "q6_k": r"""// q6_k sub-block s from its 32 bytes of low bits (ql), 32 bytes of high bits (qh), its two
// int8 scales (sc, low byte first) and the block's d (f16 bits).
__device__ __forceinline__ void og_dq32w_q6_k(const unsigned int* ql, const unsigned int* qh, unsigned int sc, unsigned int dbits, unsigned int s, float* w) {
  const float d = og_f16_to_f32((og_f16)dbits);
  const float d0 = __fmul_rn(d, (float)(signed char)(sc & 255u));
  const float d1 = __fmul_rn(d, (float)(signed char)((sc >> 8) & 255u));
  const unsigned int lo_shift = ((s >> 1) & 1u) * 4u, hi_shift = (s & 3u) * 2u;
#pragma unroll
  for (int j = 0; j < 32; ++j) {
    const unsigned int lo = (ql[j >> 2] >> ((j & 3) * 8 + lo_shift)) & 15u;
    const unsigned int hi = (qh[j >> 2] >> ((j & 3) * 8 + hi_shift)) & 3u;
    w[j] = __fmul_rn(j < 16 ? d0 : d1, og_q_int(lo | (hi << 4), 32u));
  }
}
""",
    "q8_0": r"""// q8_0 from its block's 34 bytes as words (v[8]: the last two bytes low).
__device__ __forceinline__ void og_dq32w_q8_0(const unsigned int* v, float* w) {
  const float d = og_f16_to_f32((og_f16)(v[0] & 0xffffu));
#pragma unroll
  for (int j = 0; j < 32; ++j)
    w[j] = __fmul_rn(og_q_int(((v[(j + 2) >> 2] >> (((j + 2) & 3) * 8)) & 255u) ^ 128u, 128u), d);
}
""",
}
_WORDS = r"""// Eight 4-byte words from byte `at` (2-byte aligned) of a staged tile `sw`.
__device__ __forceinline__ void og_q_words8(const unsigned int* sw, unsigned int at, unsigned int* v) {
  const unsigned int base = at >> 2, shift = (at & 3u) * 8u;
#pragma unroll
  for (int k = 0; k < 8; ++k)
    v[k] = (unsigned int)((((unsigned long long)sw[base + k + 1] << 32) | sw[base + k]) >> shift);
}
"""


def parts(n: int, rows: int, rounds: int, warps: int) -> int:
    """Warps a column (a power of two dividing `warps`): doubled while the grid holds fewer than
    `TARGET_WARPS` warps and every part still gets a tile (`rounds` tiles a row)."""
    p = 1
    while 2 * p <= warps and n * rows * p < TARGET_WARPS and rounds >= 2 * p:
        p *= 2
    return p


def tile_lanes(per: int, tile_bytes: int) -> int:
    """Units a lane decodes a tile: the fewest multiple of `per` (whose tile is `tile_bytes`)
    giving tiles of `TILE_BYTES` or more."""
    times = max(1, -(-TILE_BYTES // tile_bytes))
    return per * times


def bounds(dtype: str) -> tuple[int, int]:
    """`__launch_bounds__` of the wide kernel: 4 blocks of 256 threads a multiprocessor (64
    registers a thread: none spilled by ptxas for sm_90), q6_k 3 (its decode needs more)."""
    return (256, 3 if dtype == "q6_k" else 4)


def word_decls(dtype: str) -> tuple[str, ...]:
    """File-scope text of the wide layout's decoder of `dtype` (none for byte-decoded types)."""
    if dtype not in WORD_DECODERS:
        return ()
    words = (_WORDS,) if dtype in ("q6_k", "q8_0") else ()
    return (INT_TO_FLOAT, WORD_DECODERS[dtype], *words)


def _decode_staged(dtype: str, nbytes: int, sub: int) -> list[str]:
    """Decode unit `u` of the warp's stage into `w` (`tile`: the stage's bytes, `sw` its
    words, `sq` its 16-byte units)."""
    if dtype == "q4_k":
        return [
            "const unsigned int s = u & 7u;",
            "const uint4* blk = sq + (u >> 3) * 9u;",
            "og_dq32w_q4_k(blk[0], blk[1u + (s >> 1) * 2u], blk[2u + (s >> 1) * 2u], s, w);",
        ]
    if dtype == "q6_k":
        return [
            "const unsigned int s = u & 7u, o = (u >> 3) * 210u;",
            "unsigned int ql[8], qh[8];",
            "og_q_words8(sw, o + (s >> 2) * 64u + (s & 1u) * 32u, ql);",
            "og_q_words8(sw, o + 128u + (s >> 2) * 32u, qh);",
            "const unsigned int sc_at = o + 192u + 2u * s, d_at = o + 208u;",
            "const unsigned int sc = (sw[sc_at >> 2] >> ((sc_at & 3u) * 8u)) & 0xffffu;",
            "const unsigned int db = (sw[d_at >> 2] >> ((d_at & 3u) * 8u)) & 0xffffu;",
            "og_dq32w_q6_k(ql, qh, sc, db, s, w);",
        ]
    if dtype == "q8_0":
        return [
            "const unsigned int o = u * 34u;",
            "unsigned int v[9];",
            "og_q_words8(sw, o, v);",
            "v[8] = sw[(o >> 2) + 8u] >> ((o & 3u) * 8u);",
            "og_dq32w_q8_0(v, w);",
        ]
    return [f"og_dq32_{dtype}(tile + (u / {sub}u) * {nbytes}u, u % {sub}u, w);"]


def dot_lines(xt: str) -> list[str]:
    """`acc += x · w` over the 32 values of x at `xs`: 16-byte loads where `xvec` (x's rows
    16-byte aligned), else one load a value; the same sums in the same order either way."""
    storage = STORAGE[xt]
    if xt == "f32":
        words, value = 32, "__uint_as_float(xw[j])"
    else:
        words, value = 16, load(xt, f"({storage})(xw[j >> 1] >> ((j & 1) * 16))")
    return [
        "if (xvec) {",
        "  const uint4* xq = reinterpret_cast<const uint4*>(xs);",
        f"  unsigned int xw[{words}];",
        "#pragma unroll",
        f"  for (int c = 0; c < {words // 4}; ++c) {{",
        "    const uint4 v = xq[c];",
        "    xw[4 * c] = v.x; xw[4 * c + 1] = v.y; xw[4 * c + 2] = v.z; xw[4 * c + 3] = v.w;",
        "  }",
        "#pragma unroll",
        f"  for (int j = 0; j < 32; ++j) acc += {value} * w[j];",
        "} else {",
        "#pragma unroll",
        f"  for (int j = 0; j < 32; ++j) acc += {load(xt, 'xs[j]')} * w[j];",
        "}",
    ]


def _indent(lines: list[str], by: int) -> list[str]:
    return [line if line.startswith("#") else " " * by + line for line in lines]


def wide_body(
    xt: str,
    wtype: str,
    out_dtype: str,
    geometry: tuple[int, int, int, int, int],
    per: int,
    split: int,
) -> list[str]:
    """The body of the wide one-row kernel (8 warps a block). `geometry` = (n, k, block bytes,
    sub-blocks a block, row bytes); `per`: units a lane decodes a tile
    (`quantized.lanes_per_tile`); `split`: the parts of K (`parts`)."""
    n, k, nbytes, sub, row_bytes = geometry
    units, tile_units = k // 32, 32 * per
    tile_bytes = tile_units // sub * nbytes
    chunks = tile_bytes // 16
    per_lane = -(-chunks // 32)
    step = f"{split * tile_units}u"
    lines = [
        "const unsigned int warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;",
        f"const unsigned int part = warp % {split}u, r = blockIdx.y;",
        f"const unsigned int n = blockIdx.x * {8 // split}u + warp / {split}u;",
        f"if (n >= {n}u) return;  // the whole warp: no shuffle waits for it"
        if split == 1
        else f"const bool active = n < {n}u;  // every warp reaches the block's barrier",
        f"const unsigned char* row = in1 + (unsigned long long)(n < {n}u ? n : 0u) * {row_bytes}ull;",
        f"const {STORAGE[xt]}* x = in0 + (unsigned long long)r * {k}ull;",
        "const bool xvec = (reinterpret_cast<unsigned long long>(in0) & 15ull) == 0ull;",
        "float acc = 0.0f;",
    ]

    def units_of_tile(decode: list[str]) -> list[str]:
        """Each unit `u` of the tile at `t` a lane takes: decode into `w`, then the dot."""
        return [
            "#pragma unroll",
            f"for (unsigned int i = 0; i < {per}u; ++i) {{",
            "  const unsigned int u = lane + 32u * i;",
            f"  if (t + u < {units}u) {{",
            "    float w[32];",
            *_indent(decode, 4),
            f"    const {STORAGE[xt]}* xs = x + (t + u) * 32u;",
            *_indent(dot_lines(xt), 4),
            "  }",
            "}",
        ]

    active = "active" if split > 1 else "true"
    if row_bytes % 16 == 0:

        def fill(at: str) -> list[str]:
            """The 16-byte units of the tile of units from `at` into og_next."""
            left = f"{row_bytes}u - ({at}) / {sub}u * {nbytes}u"  # the row's bytes from it on
            return [
                f"const unsigned int avail = min({tile_bytes}u, {left}) / 16u;",
                f"const unsigned char* from = row + ({at}) / {sub}u * {nbytes}u;",
                "#pragma unroll",
                f"for (unsigned int i = 0; i < {per_lane}u; ++i) {{",
                "  const unsigned int c = lane + 32u * i;",
                "  og_next[i] = c < avail ? og_load_stream(from + 16u * c) : og_zero;",
                "}",
            ]

        lines += [
            f"__shared__ uint4 og_stage[8][{chunks}];",
            "const bool staged = (reinterpret_cast<unsigned long long>(in1) & 15ull) == 0ull;",
            f"if ({active} && staged) {{",
            "  const unsigned char* tile = reinterpret_cast<const unsigned char*>(og_stage[warp]);",
            "  const unsigned int* sw = reinterpret_cast<const unsigned int*>(og_stage[warp]);",
            "  const uint4* sq = og_stage[warp];",
            "  (void)tile; (void)sw; (void)sq;",
            "  const uint4 og_zero = {0u, 0u, 0u, 0u};",
            f"  uint4 og_next[{per_lane}];",
            f"  for (unsigned int t = part * {tile_units}u; t < {units}u; t += {step}) {{",
            f"    if (t == part * {tile_units}u) {{  // the first tile's loads",
            *_indent(fill("t"), 6),
            "    }",
            "    __syncwarp();  // every lane has read the tile before",
            "#pragma unroll",
            f"    for (unsigned int i = 0; i < {per_lane}u; ++i)",
            f"      if (lane + 32u * i < {chunks}u) og_stage[warp][lane + 32u * i] = og_next[i];",
            "    __syncwarp();",
            f"    if (t + {step} < {units}u) {{  // the next tile's loads, in flight meanwhile",
            *_indent(fill(f"t + {step}"), 6),
            "    }",
            *_indent(units_of_tile(_decode_staged(wtype, nbytes, sub)), 4),
            "  }",
            f"}} else if ({active}) {{",
        ]
    else:
        lines += [f"if ({active}) {{"]
    in_place = f"og_dq32_{wtype}(row + ((t + u) / {sub}u) * {nbytes}u, (t + u) % {sub}u, w);"
    lines += [
        f"  for (unsigned int t = part * {tile_units}u; t < {units}u; t += {step}) {{",
        *_indent(units_of_tile([in_place]), 4),
        "  }",
        "}",
        "acc = og_warp_sum(acc);",
    ]
    at = f"out[(unsigned long long)r * {n}u + n]"
    if split == 1:
        return [*lines, f"if (lane == 0u) {at} = {store(out_dtype, 'acc')};"]
    return [
        *lines,
        "__shared__ float og_part[8];",
        "if (lane == 0u) og_part[warp] = acc;",
        "__syncthreads();",
        "if (part == 0u && lane == 0u && active) {  // the parts' sums in part order",
        "  float sum = og_part[warp];",
        f"  for (unsigned int q = 1u; q < {split}u; ++q) sum += og_part[warp + q];",
        f"  {at} = {store(out_dtype, 'sum')};",
        "}",
    ]
