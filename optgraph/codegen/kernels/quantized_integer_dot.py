"""The integer-dot form of the wide quantized one-row product (`quantized_one_row.wide_body`
with `integer=True`): x is quantized once a block to int16 in shared memory, the weight's codes
are multiplied with it by `dp2a` (two int16 by two int8 into an int32, exact), and floats
appear only once a sub-block (its scales).

    %y = matmul(%x, %w) {transpose_b = true} : f16[1,4096]   (%w : q4_k[4096,4096])
    ->  prologue: each unit of 32 values of x (the block's row r) as int16 codes
        q = rn(x · 32767 / max|x|) with its scale dx = max|x| / 32767 and the codes' integer
        sums a 16 values, in shared memory; then the wide layout's staged tiles, where a lane
        turns its unit of the weight into 8 words of 4 int8 codes (q4_k: the nibbles, q6_k:
        the 6-bit codes, q8_0: the bytes) and sums Σ code · q by 16 `dp2a`, then
        acc += dx · (d · Σ code·q - m · Σ q)   (q4_k; q6_k: d·sc · (Σ code·q - 32 Σ q) a half)

Why: the float layout spends about seven instructions a value (decode to float, scale, fma),
so the products ran at the same values a second as f16 ones: bound by work, not bytes. Here a
value costs about one instruction. Numerics: x's int16 codes carry 2^-16 of each unit's largest
|x| (NMSE about 1e-10, four orders below the f16 bound), the integer sums are exact, so the
result is the reference's within the rounding of the per-unit float products.

Handled: q4_k, q6_k, q8_0 (the types of Q4_K_M and Q8_0 files) where the row is whole 16-byte
units and x's row fits the shared memory beside the stage (`fits`); other types and shapes take
the float layout. A weight not 16-byte aligned at run time is read in place by the float path
of the same kernel (x from global memory as before).
"""

from __future__ import annotations

from optgraph.codegen.cuda_source import load

INTEGER_TYPES = ("q4_k", "q6_k", "q8_0")
# Static shared memory a block may declare (the stage, x's codes, scales and sums).
SHARED_LIMIT = 48 * 1024


def shared_bytes(k: int, stage_bytes: int) -> int:
    """Shared memory of the integer layout: x's int16 codes, a float scale a 32 values, an
    int sum a 16 values, and the warps' stage."""
    return 2 * k + 4 * (k // 32) + 4 * (k // 16) + stage_bytes


def fits(dtype: str, k: int, row_bytes: int, stage_bytes: int) -> bool:
    """Whether the integer layout takes a product of `dtype` with `k` values a row."""
    return (
        dtype in INTEGER_TYPES
        and row_bytes % 16 == 0
        and k % 32 == 0
        and shared_bytes(k, stage_bytes) <= SHARED_LIMIT
    )


def prologue(xt: str, k: int) -> list[str]:
    """x's row (`x`, `xvec`) into shared int16 codes `og_xq`, scales `og_xd` (a 32 values) and
    integer sums `og_xs` (a 16 values); ends with the block barrier. Four threads a unit, eight
    values each; every thread reaches every shuffle."""
    chunks = k // 8
    return [
        f"__shared__ uint4 og_xq16[{k // 8}];  // 16-byte units of the int16 codes",
        "short* og_xq = reinterpret_cast<short*>(og_xq16);",
        f"__shared__ float og_xd[{k // 32}];",
        f"__shared__ int og_xs[{k // 16}];",
        f"for (unsigned int base = 0; base < {chunks}u; base += blockDim.x) {{",
        "  const unsigned int c = base + threadIdx.x;  // 8 values: c / 4 the unit",
        f"  const bool here = c < {chunks}u;",
        "  float v[8];",
        "#pragma unroll",
        f"  for (int j = 0; j < 8; ++j) v[j] = here ? {load(xt, 'x[8u * c + j]')} : 0.0f;",
        "  float top = 0.0f;",
        "#pragma unroll",
        "  for (int j = 0; j < 8; ++j) top = fmaxf(top, fabsf(v[j]));",
        "  top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));",
        "  top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));",
        "  const float inv = top > 0.0f ? 32767.0f / top : 0.0f;",
        "  int sum = 0;",
        "  short q[8];",
        "#pragma unroll",
        "  for (int j = 0; j < 8; ++j) {",
        "    const int code = __float2int_rn(v[j] * inv);",
        "    q[j] = (short)code;",
        "    sum += code;",
        "  }",
        "  sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // the 16 values of c and c ^ 1",
        "  if (here) {",
        "#pragma unroll",
        "    for (int j = 0; j < 8; ++j) og_xq[8u * c + j] = q[j];",
        "    if ((c & 1u) == 0u) og_xs[c >> 1] = sum;",
        "    if ((c & 3u) == 0u) og_xd[c >> 2] = top / 32767.0f;",
        "  }",
        "}",
        "__syncthreads();",
    ]


_X_WORDS = [
    "const uint4* xq4 = og_xq16 + (t + u) * 4u;",
    "unsigned int xw[16];",
    "#pragma unroll",
    "for (int c = 0; c < 4; ++c) {",
    "  const uint4 v = xq4[c];",
    "  xw[4 * c] = v.x; xw[4 * c + 1] = v.y; xw[4 * c + 2] = v.z; xw[4 * c + 3] = v.w;",
    "}",
    "const float dx = og_xd[t + u];",
]


def _dot(words: str, into: str, first: int, count: int) -> list[str]:
    """`into += Σ` codes · x over words `first`..`first + count` of `words` (4 codes each)."""
    return [
        "#pragma unroll",
        f"for (int j = {first}; j < {first + count}; ++j) {{",
        f"  {into} = __dp2a_lo((int)xw[2 * j], (int){words}[j], {into});",
        f"  {into} = __dp2a_hi((int)xw[2 * j + 1], (int){words}[j], {into});",
        "}",
    ]


def unit_lines(dtype: str) -> list[str]:
    """`acc +=` unit `u` of the staged tile (`sw` words, `sq` 16-byte units) times x's unit
    `t + u`, in the integer form."""
    if dtype == "q4_k":
        return [
            "const unsigned int s = u & 7u;",
            "const uint4* blk = sq + (u >> 3) * 9u;",
            "const uint4 h = blk[0], q0 = blk[1u + (s >> 1) * 2u], q1 = blk[2u + (s >> 1) * 2u];",
            "const unsigned int at = (s & 3u) * 8u;",
            "const unsigned int b0 = (h.y >> at) & 255u, b1 = (h.z >> at) & 255u, b2 = (h.w >> at) & 255u;",
            "const unsigned int sc = s < 4u ? b0 & 63u : (b2 & 15u) | ((b0 >> 2) & 48u);",
            "const unsigned int mn = s < 4u ? b1 & 63u : (b2 >> 4) | ((b1 >> 2) & 48u);",
            "const float d = __fmul_rn(og_f16_to_f32((og_f16)(h.x & 0xffffu)), (float)sc);",
            "const float m = __fmul_rn(og_f16_to_f32((og_f16)(h.x >> 16)), (float)mn);",
            "const unsigned int shift = (s & 1u) * 4u;",
            "const unsigned int raw[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};",
            "unsigned int cw[8];",
            "#pragma unroll",
            "for (int j = 0; j < 8; ++j) cw[j] = (raw[j] >> shift) & 0x0f0f0f0fu;",
            *_X_WORDS,
            "int dot = 0;",
            *_dot("cw", "dot", 0, 8),
            "const int xsum = og_xs[2u * (t + u)] + og_xs[2u * (t + u) + 1u];",
            "acc += dx * (d * (float)dot - m * (float)xsum);",
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
            "const float d = og_f16_to_f32((og_f16)db);",
            "const float d0 = __fmul_rn(d, (float)(signed char)(sc & 255u));",
            "const float d1 = __fmul_rn(d, (float)(signed char)((sc >> 8) & 255u));",
            "const unsigned int lo_shift = ((s >> 1) & 1u) * 4u, hi_shift = (s & 3u) * 2u;",
            "unsigned int cw[8];",
            "#pragma unroll",
            "for (int j = 0; j < 8; ++j)",
            "  cw[j] = ((ql[j] >> lo_shift) & 0x0f0f0f0fu) | (((qh[j] >> hi_shift) & 0x03030303u) << 4);",
            *_X_WORDS,
            "int dot0 = 0, dot1 = 0;",
            *_dot("cw", "dot0", 0, 4),
            *_dot("cw", "dot1", 4, 4),
            "dot0 -= 32 * og_xs[2u * (t + u)];",
            "dot1 -= 32 * og_xs[2u * (t + u) + 1u];",
            "acc += dx * (d0 * (float)dot0 + d1 * (float)dot1);",
        ]
    if dtype == "q8_0":
        return [
            "const unsigned int o = u * 34u;",
            "unsigned int cw[8];",
            "og_q_words8(sw, o + 2u, cw);",
            "const float d = og_f16_to_f32((og_f16)((sw[o >> 2] >> ((o & 3u) * 8u)) & 0xffffu));",
            *_X_WORDS,
            "int dot = 0;",
            *_dot("cw", "dot", 0, 8),
            "acc += dx * (d * (float)dot);",
        ]
    raise AssertionError(dtype)
