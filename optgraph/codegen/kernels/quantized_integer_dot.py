"""The integer-dot one-row product of q4_k weights: x quantized once a block to int16 codes in
shared memory, the weight's 4-bit codes multiplied with them by `dp2a` (two int16 by two int8
into an int32, exact), floats only once a sub-block of 32 values (its scales).

    %y = matmul(%x, %w) {transpose_b = true} : f16[1,4096]   (%w : q4_k[4096,4096])
    ->  a block of 8 warps a 16 output columns (x's row r = blockIdx.y):
        prologue: each 32 values of x as int16 codes q = rn(x · 32767 / max|x|), their scale
        dx = max|x| / 32767 and the codes' integer sum, in shared memory;
        then a lane a (column pair, quarter of a q4_k block): its 32 bytes of codes (64 values:
        the low nibbles are sub-block 2j, the high ones 2j+1) and the block's 16-byte head for
        each of its two columns, the 64 codes of x once for both; Σ code · q by 32 `dp2a`,
        acc += dx · (d·sc · Σ code·q - dmin·m · Σ q) a sub-block; the warps take the blocks of K
        in turn, their sums meet in shared memory in warp order (deterministic)

Why: the float form decodes every value to a float and multiplies it by x read again for every
column: seven instructions and two bytes of x traffic a value, against 0.56 bytes of weight. So
the products ran at the values a second of f16 ones. Here a value costs about one instruction,
x's codes are read once for two columns, by 8 lanes at a time (one shared-memory broadcast),
from a layout padded one 16-byte unit in 9 so the four quarters of a block hit distinct banks.

Numerics: x's codes carry 2^-16 of each unit's largest |x| (NMSE about 1e-10, four orders below
the f16 bound); the integer sums are exact; the result is the reference's within that and the
per-sub-block float products.

Handled: q4_k, any number of columns, K a multiple of 256 whose codes fit the shared memory
(`fits`: 14336 values a row, the down product of a Llama layer, do), rows of x one a block (the
weight is read again for each of up to `quantized.KERNEL_MAX_ROWS` rows). Other types take the
float form of `quantized_one_row`.
"""

from __future__ import annotations

from optgraph.codegen.cuda_source import STORAGE, load, store

# Static shared memory a block may declare: x's padded codes, a scale and a sum a 32 values.
SHARED_LIMIT = 48 * 1024
COLUMNS = 16  # output columns a block (8 a lane pair's first, 8 its second)
WARPS = 8


# Bytes of 256 values of each type the integer form takes: a q4_k or q6_k block, 8 q8_0 blocks.
GROUP_BYTES = {"q4_k": 144, "q6_k": 210, "q8_0": 272}


def shared_bytes(k: int) -> int:
    """x's int16 codes (one 16-byte unit of padding in 9), a float scale a 32 values and an int
    sum a 16, and the warps' partial sums."""
    return (k // 8) * 9 // 8 * 16 + 16 + 4 * (k // 32) + 4 * (k // 16) + 4 * WARPS * COLUMNS


def fits(dtype: str, k: int) -> bool:
    """Whether the integer form takes a product of `dtype` with `k` values a row: 256-value
    groups, rows of whole 4-byte words (q6_k: an even number of blocks), x's codes in 48 KiB."""
    if dtype not in GROUP_BYTES or k % 256:
        return False
    return (k // 256 * GROUP_BYTES[dtype]) % 4 == 0 and shared_bytes(k) <= SHARED_LIMIT


def prologue(xt: str, k: int) -> list[str]:
    """x's row (`x`) into shared int16 codes `og_xq16` (16-byte unit c at c + c / 8), scales
    `og_xd` (a 32 values) and the codes' integer sums `og_xs` (a 16 values). Four threads a unit, eight values each;
    every thread reaches every shuffle; ends with the block barrier."""
    chunks = k // 8
    return [
        f"__shared__ uint4 og_xq16[{chunks * 9 // 8 + 1}];  // 16-byte units of int16 codes",
        f"__shared__ float og_xd[{k // 32}];",
        f"__shared__ int og_xs[{k // 16}];",
        f"for (unsigned int base = 0; base < {chunks}u; base += blockDim.x) {{",
        "  const unsigned int c = base + threadIdx.x;  // 8 values; c / 4 the unit",
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
        "  unsigned int packed[4];",
        "#pragma unroll",
        "  for (int j = 0; j < 4; ++j) {",
        "    const int lo = __float2int_rn(v[2 * j] * inv), hi = __float2int_rn(v[2 * j + 1] * inv);",
        "    packed[j] = ((unsigned int)lo & 0xffffu) | ((unsigned int)hi << 16);",
        "    sum += lo + hi;",
        "  }",
        "  sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // the 16 values of c and c ^ 1",
        "  if (here) {",
        "    og_xq16[c + (c >> 3)] = uint4{packed[0], packed[1], packed[2], packed[3]};",
        "    if ((c & 1u) == 0u) og_xs[c >> 1] = sum;",
        "    if ((c & 3u) == 0u) og_xd[c >> 2] = top / 32767.0f;",
        "  }",
        "}",
        "__syncthreads();",
    ]


_DECLS = r"""// 16 bytes of the weight: one streaming load where the weight is 16-byte aligned, else bytes.
__device__ __forceinline__ uint4 og_q_load16(const uint4* p, bool aligned) {
  if (aligned) return og_load_stream(p);
  const unsigned char* b = reinterpret_cast<const unsigned char*>(p);
  unsigned int w[4];
#pragma unroll
  for (int i = 0; i < 4; ++i)
    w[i] = b[4 * i] | (b[4 * i + 1] << 8) | (b[4 * i + 2] << 16) | ((unsigned int)b[4 * i + 3] << 24);
  return uint4{w[0], w[1], w[2], w[3]};
}
// q4_k's scale and min of sub-block s from the 12 scale bytes (h.y, h.z, h.w of the head).
__device__ __forceinline__ void og_q4k_scale_min(uint4 h, unsigned int s, unsigned int* sc, unsigned int* mn) {
  const unsigned int at = (s & 3u) * 8u;
  const unsigned int b0 = (h.y >> at) & 255u, b1 = (h.z >> at) & 255u, b2 = (h.w >> at) & 255u;
  *sc = s < 4u ? b0 & 63u : (b2 & 15u) | ((b0 >> 2) & 48u);
  *mn = s < 4u ? b1 & 63u : (b2 >> 4) | ((b1 >> 2) & 48u);
}
// Σ over a q4_k quarter (head h, codes q[8]: sub-blocks 2j low nibbles, 2j+1 high) times x's
// 64 codes xw[32] (scales dx, integer sums xs of its two units).
__device__ __forceinline__ float og_q4k_quarter(uint4 h, const unsigned int* q, const unsigned int* xw, unsigned int j, float dx0, float dx1, int xs0, int xs1) {
  int dot0 = 0, dot1 = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int lo = (int)(q[i] & 0x0f0f0f0fu), hi = (int)((q[i] >> 4) & 0x0f0f0f0fu);
    dot0 = __dp2a_lo((int)xw[2 * i], lo, dot0);
    dot0 = __dp2a_hi((int)xw[2 * i + 1], lo, dot0);
    dot1 = __dp2a_lo((int)xw[16 + 2 * i], hi, dot1);
    dot1 = __dp2a_hi((int)xw[16 + 2 * i + 1], hi, dot1);
  }
  unsigned int sc0, mn0, sc1, mn1;
  og_q4k_scale_min(h, 2u * j, &sc0, &mn0);
  og_q4k_scale_min(h, 2u * j + 1u, &sc1, &mn1);
  const float d = og_f16_to_f32((og_f16)(h.x & 0xffffu)), m = og_f16_to_f32((og_f16)(h.x >> 16));
  const float t0 = __fmul_rn(d, (float)sc0) * (float)dot0 - __fmul_rn(m, (float)mn0) * (float)xs0;
  const float t1 = __fmul_rn(d, (float)sc1) * (float)dot1 - __fmul_rn(m, (float)mn1) * (float)xs1;
  return dx0 * t0 + dx1 * t1;
}
"""


_WORD_DECLS = r"""// N little-endian words from byte `at`: aligned word loads, shifted where `at` is not
// 4-byte aligned (reading at most the word holding the last byte); bytes where `aligned` is
// false (the weight's base not 4-byte aligned).
template <int N> __device__ __forceinline__ void og_q_words(const unsigned char* at, bool aligned, unsigned int* v) {
  if (!aligned) {
#pragma unroll
    for (int i = 0; i < N; ++i)
      v[i] = at[4 * i] | (at[4 * i + 1] << 8) | (at[4 * i + 2] << 16) | ((unsigned int)at[4 * i + 3] << 24);
    return;
  }
  const unsigned long long a = reinterpret_cast<unsigned long long>(at);
  const unsigned int* w = reinterpret_cast<const unsigned int*>(a & ~3ull);
  const unsigned int shift = (unsigned int)(a & 3ull) * 8u;
  if (shift == 0u) {
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = __ldg(w + i);
    return;
  }
  unsigned int lo = __ldg(w);
#pragma unroll
  for (int i = 0; i < N; ++i) {
    const unsigned int hi = __ldg(w + i + 1);
    v[i] = (unsigned int)((((unsigned long long)hi << 32) | lo) >> shift);
    lo = hi;
  }
}
// The f16 at byte `at` (2-byte aligned) as a float.
__device__ __forceinline__ float og_q_half_at(const unsigned char* at, bool aligned) {
  if (!aligned) return og_f16_to_f32((og_f16)(at[0] | (at[1] << 8)));
  const unsigned long long a = reinterpret_cast<unsigned long long>(at);
  const unsigned int w = __ldg(reinterpret_cast<const unsigned int*>(a & ~3ull));
  return og_f16_to_f32((og_f16)((w >> ((unsigned int)(a & 3ull) * 8u)) & 0xffffu));
}
// Σ codes · x's codes over 8 words of 4 int8 codes (`c`) and x's 16 words from `xw`.
__device__ __forceinline__ int og_q_dot8(const unsigned int* c, const unsigned int* xw) {
  int dot = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    dot = __dp2a_lo((int)xw[2 * i], (int)c[i], dot);
    dot = __dp2a_hi((int)xw[2 * i + 1], (int)c[i], dot);
  }
  return dot;
}
"""
_Q8_0 = r"""// Σ over a q8_0 quarter: the two 34-byte blocks at `g` + 68 j of a group of 8 (4-byte
// aligned), times x's 64 codes (scales dx0, dx1 of its two units).
__device__ __forceinline__ float og_q8_0_quarter(const unsigned char* g, unsigned int j, bool aligned, const unsigned int* xw, float dx0, float dx1) {
  unsigned int v[17];
  og_q_words<17>(g + 68u * j, aligned, v);
  unsigned int c0[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) c0[i] = (unsigned int)((((unsigned long long)v[i + 1] << 32) | v[i]) >> 16);
  const float d0 = og_f16_to_f32((og_f16)(v[0] & 0xffffu)), d1 = og_f16_to_f32((og_f16)(v[8] >> 16));
  return dx0 * (d0 * (float)og_q_dot8(c0, xw)) + dx1 * (d1 * (float)og_q_dot8(v + 9, xw + 16));
}
"""
_Q6_K = r"""// Σ over a q6_k quarter j of the block at `b` (2-byte aligned): values 32 g + l of half
// j / 2, g = 2 (j & 1) and the next, each 16 with its scale; times x's 64 codes (scales dx0,
// dx1 of its two units, integer sums xs[4] a 16).
__device__ __forceinline__ float og_q6_k_quarter(const unsigned char* b, unsigned int j, bool aligned, const unsigned int* xw, float dx0, float dx1, const int* xs) {
  const unsigned int h = j >> 1, odd = j & 1u;
  unsigned int ql[16], qh[8], sw[1];
  og_q_words<16>(b + 64u * h, aligned, ql);
  og_q_words<8>(b + 128u + 32u * h, aligned, qh);
  og_q_words<1>(b + 192u + 8u * h + 4u * odd, aligned, sw);
  const float d = og_q_half_at(b + 208u, aligned);
  const unsigned int ns = 4u * odd, hs = 4u * odd;
  unsigned int c0[8], c1[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    c0[i] = ((ql[i] >> ns) & 0x0f0f0f0fu) | (((qh[i] >> hs) & 0x03030303u) << 4);
    c1[i] = ((ql[8 + i] >> ns) & 0x0f0f0f0fu) | (((qh[i] >> (hs + 2u)) & 0x03030303u) << 4);
  }
  int dot[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    dot[0] = __dp2a_lo((int)xw[2 * i], (int)c0[i], dot[0]);
    dot[0] = __dp2a_hi((int)xw[2 * i + 1], (int)c0[i], dot[0]);
    dot[1] = __dp2a_lo((int)xw[8 + 2 * i], (int)c0[4 + i], dot[1]);
    dot[1] = __dp2a_hi((int)xw[8 + 2 * i + 1], (int)c0[4 + i], dot[1]);
    dot[2] = __dp2a_lo((int)xw[16 + 2 * i], (int)c1[i], dot[2]);
    dot[2] = __dp2a_hi((int)xw[16 + 2 * i + 1], (int)c1[i], dot[2]);
    dot[3] = __dp2a_lo((int)xw[24 + 2 * i], (int)c1[4 + i], dot[3]);
    dot[3] = __dp2a_hi((int)xw[24 + 2 * i + 1], (int)c1[4 + i], dot[3]);
  }
  float t[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float sc = (float)(signed char)((sw[0] >> (8 * i)) & 255u);
    t[i] = __fmul_rn(d, sc) * (float)(dot[i] - 32 * xs[i]);
  }
  return dx0 * (t[0] + t[1]) + dx1 * (t[2] + t[3]);
}
"""


def decls(dtype: str = "q4_k") -> tuple[str, ...]:
    """File-scope text of the kernel of `dtype` (after the decoders of `quantized.decls`)."""
    own = {"q4_k": _DECLS, "q8_0": _Q8_0, "q6_k": _Q6_K}[dtype]
    return (_WORD_DECLS, own) if dtype != "q4_k" else (own,)


_LOAD_NAMES = ("h0", "a0", "a1", "h1", "c0", "c1")


def _loads(prefix: str, block: str) -> list[str]:
    """Block `block`'s head and the lane's quarter of codes, for both columns, into
    `<prefix>h0 .. <prefix>c1` (declared before)."""
    p = prefix
    return [
        f"{{ const uint4* p0 = reinterpret_cast<const uint4*>(w0 + ({block}) * 144u);",
        f"  const uint4* p1 = reinterpret_cast<const uint4*>(w1 + ({block}) * 144u);",
        f"  {p}h0 = og_q_load16(p0, aligned); {p}h1 = og_q_load16(p1, aligned);",
        f"  {p}a0 = og_q_load16(p0 + 1u + 2u * j, aligned);",
        f"  {p}a1 = og_q_load16(p0 + 2u + 2u * j, aligned);",
        f"  {p}c0 = og_q_load16(p1 + 1u + 2u * j, aligned);",
        f"  {p}c1 = og_q_load16(p1 + 2u + 2u * j, aligned); }}",
    ]


_X_CODES = [
    "  const unsigned int unit = b * 8u + 2u * j;  // x's first unit of 32 of the quarter",
    "  unsigned int xw[32];",
    "#pragma unroll",
    "  for (int i = 0; i < 8; ++i) {",
    "    const unsigned int c = unit * 4u + i;",
    "    const uint4 v = og_xq16[c + (c >> 3)];",
    "    xw[4 * i] = v.x; xw[4 * i + 1] = v.y; xw[4 * i + 2] = v.z; xw[4 * i + 3] = v.w;",
    "  }",
    "  const float dx0 = og_xd[unit], dx1 = og_xd[unit + 1u];",
]


def _q4_k_loop(groups: int) -> tuple[list[str], list[str]]:
    """(early, loop) of q4_k: each warp's first block loaded before the PDL wait, the next
    block's loads in flight while the current one is multiplied."""
    cur = ", ".join(_LOAD_NAMES)
    nxt = ", ".join("n" + name for name in _LOAD_NAMES)
    early = [
        f"uint4 {cur};",
        f"if (warp < {groups}u)",
        *("  " + line for line in _loads("", "warp")),
    ]
    loop = [
        f"for (unsigned int b = warp; b < {groups}u; b += {WARPS}u) {{",
        f"  uint4 {nxt};",
        f"  if (b + {WARPS}u < {groups}u)  // the next block's loads, in flight meanwhile",
        *("    " + line for line in _loads("n", f"b + {WARPS}u")),
        *_X_CODES,
        "  const int xs0 = og_xs[2u * unit] + og_xs[2u * unit + 1u];",
        "  const int xs1 = og_xs[2u * unit + 2u] + og_xs[2u * unit + 3u];",
        "  const unsigned int q0[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};",
        "  const unsigned int q1[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};",
        "  acc0 += og_q4k_quarter(h0, q0, xw, j, dx0, dx1, xs0, xs1);",
        "  acc1 += og_q4k_quarter(h1, q1, xw, j, dx0, dx1, xs0, xs1);",
        *(f"  {name} = n{name};" for name in _LOAD_NAMES),
        "}",
    ]
    return early, loop


def _word_loop(dtype: str, groups: int) -> list[str]:
    """The loop of q8_0 and q6_k: a quarter's words loaded and multiplied by one function."""
    size = GROUP_BYTES[dtype]
    tail = "aligned, xw, dx0, dx1" + (", og_xs + 2u * unit" if dtype == "q6_k" else "")
    return [
        f"for (unsigned int b = warp; b < {groups}u; b += {WARPS}u) {{",
        *_X_CODES,
        f"  acc0 += og_{dtype}_quarter(w0 + b * {size}u, j, {tail});",
        f"  acc1 += og_{dtype}_quarter(w1 + b * {size}u, j, {tail});",
        "}",
    ]


def body(xt: str, dtype: str, out_dtype: str, n: int, k: int) -> tuple[list[str], list[str]]:
    """(early, body) of the kernel: grid (ceil(n / COLUMNS), rows), `WARPS` warps a block.
    `early`: the body's statements before its PDL wait (they read only the weight)."""
    groups = k // 256
    row_bytes = groups * GROUP_BYTES[dtype]
    half = COLUMNS // 2
    alignment = 15 if dtype == "q4_k" else 3
    early = [
        "const unsigned int warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;",
        "const unsigned int j = lane & 3u, col = lane >> 2;  // quarter of a group, column",
        f"const unsigned int n0 = blockIdx.x * {COLUMNS}u + col, n1 = n0 + {half}u;",
        f"const unsigned char* w0 = in1 + (unsigned long long)(n0 < {n}u ? n0 : 0u) * {row_bytes}ull;",
        f"const unsigned char* w1 = in1 + (unsigned long long)(n1 < {n}u ? n1 : 0u) * {row_bytes}ull;",
        f"const bool aligned = (reinterpret_cast<unsigned long long>(in1) & {alignment}ull) == 0ull;",
    ]
    if dtype == "q4_k":
        first, loop = _q4_k_loop(groups)
        early += first
    else:
        loop = _word_loop(dtype, groups)
    lines = [
        f"const {STORAGE[xt]}* x = in0 + (unsigned long long)blockIdx.y * {k}ull;",
        *prologue(xt, k),
        "float acc0 = 0.0f, acc1 = 0.0f;",
        *loop,
        "acc0 += __shfl_xor_sync(0xffffffffu, acc0, 1);",
        "acc0 += __shfl_xor_sync(0xffffffffu, acc0, 2);",
        "acc1 += __shfl_xor_sync(0xffffffffu, acc1, 1);",
        "acc1 += __shfl_xor_sync(0xffffffffu, acc1, 2);",
        f"__shared__ float og_part[{WARPS}][{COLUMNS}];",
        "if (j == 0u) {",
        "  og_part[warp][col] = acc0;",
        f"  og_part[warp][col + {half}u] = acc1;",
        "}",
        "__syncthreads();",
        f"if (threadIdx.x < {COLUMNS}u) {{  // the warps' sums in warp order",
        f"  const unsigned int c = blockIdx.x * {COLUMNS}u + threadIdx.x;",
        "  float sum = og_part[0][threadIdx.x];",
        f"  for (unsigned int w = 1; w < {WARPS}u; ++w) sum += og_part[w][threadIdx.x];",
        f"  if (c < {n}u) out[(unsigned long long)blockIdx.y * {n}u + c] = {store(out_dtype, 'sum')};",
        "}",
    ]
    return early, lines
