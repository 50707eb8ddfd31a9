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


def shared_bytes(k: int) -> int:
    """x's int16 codes (one 16-byte unit of padding in 9), a float scale and an int sum a 32."""
    return (k // 8) * 9 // 8 * 16 + 16 + 8 * (k // 32)


def fits(dtype: str, k: int) -> bool:
    """Whether the integer form takes a product of `dtype` with `k` values a row (a q4_k row is
    whole 144-byte blocks, so whole 16-byte units: the 16-byte loads need only the base aligned,
    which the kernel tests at run time)."""
    return dtype == "q4_k" and k % 256 == 0 and shared_bytes(k) <= SHARED_LIMIT


def prologue(xt: str, k: int) -> list[str]:
    """x's row (`x`) into shared int16 codes `og_xq16` (16-byte unit c at c + c / 8), scales
    `og_xd` and integer sums `og_xs` (a 32 values each). Four threads a unit, eight values each;
    every thread reaches every shuffle; ends with the block barrier."""
    chunks = k // 8
    return [
        f"__shared__ uint4 og_xq16[{chunks * 9 // 8 + 1}];  // 16-byte units of int16 codes",
        f"__shared__ float og_xd[{k // 32}];",
        f"__shared__ int og_xs[{k // 32}];",
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
        "  sum += __shfl_xor_sync(0xffffffffu, sum, 1);",
        "  sum += __shfl_xor_sync(0xffffffffu, sum, 2);",
        "  if (here) {",
        "    og_xq16[c + (c >> 3)] = uint4{packed[0], packed[1], packed[2], packed[3]};",
        "    if ((c & 3u) == 0u) {",
        "      og_xd[c >> 2] = top / 32767.0f;",
        "      og_xs[c >> 2] = sum;",
        "    }",
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


def decls() -> tuple[str, ...]:
    """File-scope text of the kernel (after the q4_k decoders of `quantized.decls`)."""
    return (_DECLS,)


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


def body(xt: str, out_dtype: str, n: int, k: int) -> tuple[list[str], list[str]]:
    """(early, body) of the kernel: grid (ceil(n / COLUMNS), rows), `WARPS` warps a block.
    `early` (the body's statements before its PDL wait: they read only the weight) loads each
    warp's first block; the loop loads the next block while it multiplies the current one."""
    blocks = k // 256
    row_bytes = blocks * 144
    half = COLUMNS // 2
    cur = ", ".join(_LOAD_NAMES)
    nxt = ", ".join("n" + name for name in _LOAD_NAMES)
    early = [
        "const unsigned int warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;",
        "const unsigned int j = lane & 3u, col = lane >> 2;  // quarter of a block, column",
        f"const unsigned int n0 = blockIdx.x * {COLUMNS}u + col, n1 = n0 + {half}u;",
        f"const unsigned char* w0 = in1 + (unsigned long long)(n0 < {n}u ? n0 : 0u) * {row_bytes}ull;",
        f"const unsigned char* w1 = in1 + (unsigned long long)(n1 < {n}u ? n1 : 0u) * {row_bytes}ull;",
        "const bool aligned = (reinterpret_cast<unsigned long long>(in1) & 15ull) == 0ull;",
        f"uint4 {cur};",
        f"if (warp < {blocks}u)",
        *("  " + line for line in _loads("", "warp")),
    ]
    lines = [
        f"const {STORAGE[xt]}* x = in0 + (unsigned long long)blockIdx.y * {k}ull;",
        *prologue(xt, k),
        "float acc0 = 0.0f, acc1 = 0.0f;",
        f"for (unsigned int b = warp; b < {blocks}u; b += {WARPS}u) {{",
        f"  uint4 {nxt};",
        f"  if (b + {WARPS}u < {blocks}u)  // the next block's loads, in flight meanwhile",
        *("    " + line for line in _loads("n", f"b + {WARPS}u")),
        "  const unsigned int unit = b * 8u + 2u * j;  // x's first unit of 32 of the quarter",
        "  unsigned int xw[32];",
        "#pragma unroll",
        "  for (int i = 0; i < 8; ++i) {",
        "    const unsigned int c = unit * 4u + i;",
        "    const uint4 v = og_xq16[c + (c >> 3)];",
        "    xw[4 * i] = v.x; xw[4 * i + 1] = v.y; xw[4 * i + 2] = v.z; xw[4 * i + 3] = v.w;",
        "  }",
        "  const float dx0 = og_xd[unit], dx1 = og_xd[unit + 1u];",
        "  const int xs0 = og_xs[unit], xs1 = og_xs[unit + 1u];",
        "  const unsigned int q0[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};",
        "  const unsigned int q1[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};",
        "  acc0 += og_q4k_quarter(h0, q0, xw, j, dx0, dx1, xs0, xs1);",
        "  acc1 += og_q4k_quarter(h1, q1, xw, j, dx0, dx1, xs0, xs1);",
        *(f"  {name} = n{name};" for name in _LOAD_NAMES),
        "}",
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
