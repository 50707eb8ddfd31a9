"""The integer-dot one-row product of q4_k, q6_k and q8_0 weights: x quantized once a block to
int16 codes in shared memory, the weight's codes multiplied with them by `dp2a` (two int16 by two
int8 into an int32, exact), floats only once a sub-block (q4_k: 32 values), a scale (q6_k: 16) or
a block (q8_0: 32).

    %y = matmul(%x, %w) {transpose_b = true} : f16[1,4096]   (%w : q4_k[4096,4096])
    ->  a block of 8 warps a 16 output columns (x's row r = blockIdx.y):
        prologue: each 32 values of x as int16 codes q = rn(x · 32767 / max|x|), their scale
        dx = max|x| / 32767 and the codes' integer sum (q6_k: a sum a 16), in shared memory;
        then a lane a (column pair, quarter of a block): its 32 bytes of codes (64 values:
        the low nibbles are sub-block 2j, the high ones 2j+1) and the block's 16-byte head for
        each of its two columns, the 64 codes of x once for both; Σ code · q by 32 `dp2a`,
        acc += dx · (d·sc · Σ code·q - dmin·m · Σ q) a sub-block; the warps take the blocks of K
        in turn, their sums meet in shared memory in warp order (deterministic)
    %y = matmul(%x, %w) {transpose_b = true} : f16[1,4096]   (%w : q6_k[4096,14336])
    ->  the same block, prologue and sums; a q6_k quarter j is half h = j / 2 of the block and
        the 16 positions 16m.. of each 32 (m = j % 2): 48 bytes of codes a column, all used (ql
        at 64h + 16m and 64h + 32 + 16m, low nibbles runs 0 and 1, high ones 2 and 3; qh at
        128 + 32h + 16m, bits 2r run r), its 4 scales and d; codes 0..63 by 32 `dp2a`, then
        acc += dx · (d·sc · (Σ code·q - 32 Σ q)) a run of 16
    %y = matmul(%x, %w) {transpose_b = true} : f16[1,4096]   (%w : q8_0[4096,4096])
    ->  the same block and sums, the prologue without integer sums (no offset or minimum to
        take off) over K rounded up to 256; a group of 8 blocks (256 values) takes a q4_k
        block's place: quarter j is its blocks 2j and 2j + 1 (x's 64 codes as q4_k's quarter
        reads them), for each column 32 int8 codes a block and its d; Σ code · q by 16 `dp2a`
        a block, acc += dx · (d · Σ code·q) a block. K any multiple of 32: the last group's
        blocks past the row load zeros, x's codes past K are zeros with scale 0

Why: the float form decodes every value to a float and multiplies it by x read again for every
column: seven instructions and two bytes of x traffic a value, against 0.56 (q4_k) or 0.82
(q6_k) bytes of weight. So the products ran at the values a second of f16 ones. Here a value
costs about one instruction (q6_k: about two, its high bits put in place), x's codes are read
once for two columns, by 8 lanes at a time (one shared-memory broadcast), from a layout padded
one 16-byte unit in 9 so the four quarters of a block hit distinct banks (q6_k's halves take
their runs in the order r = g ^ 2h for that).

Loads: q4_k's 144-byte blocks are whole 16-byte units, read with 16-byte loads (bytes where the
weight's base is not 16-byte aligned, tested at run time). q6_k's 210-byte blocks are only
2-byte aligned (every other one 4-byte aligned): a lane reads its chunks as the aligned 4-byte
words from the chunk's start rounded down, a fifth word where the block starts 2 bytes past a
4-byte boundary (every byte read is the block's), and shifts the pairs by 16 bits where it
multiplies them, so the next block's loads stay in flight while the current one is multiplied;
bytes where the weight's base is not 4-byte aligned. 120 registers a thread for q6_k (ptxas,
sm_90, none spilled; q4_k 85), within the kernel's `__launch_bounds__(256, 2)`. q8_0's 34-byte
blocks likewise: block 2j of a group starts 68 (4b + j) bytes into its row, so in the row's
4-byte phase, block 2j + 1 in the other; a lane reads a block as the 8 aligned 4-byte words from
its first 4-byte boundary (its start, then d and codes 0..29 are in them, the codes shifted by 16
bits; or its codes, 2 bytes in) and one 2-byte load of the rest (codes 30, 31 or d): every byte
read is the block's; bytes where the weight's base is not 4-byte aligned. 120 registers a thread
(ptxas, sm_90, K = 4096, none spilled), 72 where K is not whole groups.

Numerics: x's codes carry 2^-16 of each unit's largest |x| (NMSE about 1e-10, four orders below
the f16 bound); the integer sums are exact; the result is the reference's within that and the
per-sub-block (per-run) float products.

Handled: q4_k, q6_k and q8_0 (`quantized.INTEGER_DOT_TYPES`), any number of columns, K a
multiple of 256 (q8_0: of 32) whose codes fit the shared memory (`fits`: 14336 values a row, the
down product of a Llama layer, do; 20480 do not), rows of x one a block (the weight is read
again for each of up to `quantized.KERNEL_MAX_ROWS` rows). Other types take the float form of
`quantized_one_row`. q8_0's form is opt-in and not measured on a GPU. Not measured on a GPU yet
for q6_k: an earlier q6_k integer form (4f70244, reverted in 7b5d6a7:
a quarter loaded its half's 64 ql and 32 qh bytes and used half of each, 125 registers, no
block's loads in flight during another's) was slower than the float form on the 32000-column
logits head, faster on 4096x14336.
"""

from __future__ import annotations

from optgraph.codegen.cuda_source import STORAGE, load, store

# Static shared memory a block may declare: x's padded codes, a scale a 32 values, sums.
SHARED_LIMIT = 48 * 1024
COLUMNS = 16  # output columns a block (8 a lane pair's first, 8 its second)
WARPS = 8


# Values of x each integer sum of its codes covers: a q4_k sub-block's 32, a q6_k scale's 16.
SUM_VALUES = {"q4_k": 32, "q6_k": 16}


def shared_bytes(k: int, sum_values: int = 32) -> int:
    """x's int16 codes (one 16-byte unit of padding in 9), a float scale a 32 values, an int sum
    a `sum_values` (0: none) and the warps' column sums (`og_part`, 512 bytes: before they were
    counted, K = 19456 in q4_k and 18688 in q6_k passed `fits` and ptxas refused the kernel)."""
    sums = 4 * (k // sum_values) if sum_values else 0
    return (k // 8) * 9 // 8 * 16 + 16 + 4 * (k // 32) + sums + 4 * WARPS * COLUMNS


def fits(dtype: str, k: int) -> bool:
    """Whether the integer form takes a product of `dtype` with `k` values a row (a q4_k row is
    whole 144-byte blocks, so whole 16-byte units: the 16-byte loads need only the base aligned,
    which the kernel tests at run time; q6_k's 210-byte blocks are read in 4-byte words, see
    `og_q6k_load`; q8_0: any whole blocks of 32, x's codes over K rounded up to 256)."""
    if dtype == "q8_0":  # any whole blocks: x's codes cover K rounded up to 256, no sums
        return k % 32 == 0 and shared_bytes(-(-k // 256) * 256, 0) <= SHARED_LIMIT
    if dtype not in SUM_VALUES or k % 256:
        return False
    return shared_bytes(k, SUM_VALUES[dtype]) <= SHARED_LIMIT


def _x_quarter() -> list[str]:
    """The loop body's statements reading x's 64 codes of the quarter from unit `unit` (words
    `xw`) and the scales of its two units of 32 (`dx0`, `dx1`)."""
    return [
        "  unsigned int xw[32];",
        "#pragma unroll",
        "  for (int i = 0; i < 8; ++i) {",
        "    const unsigned int c = unit * 4u + i;",
        "    const uint4 v = og_xq16[c + (c >> 3)];",
        "    xw[4 * i] = v.x; xw[4 * i + 1] = v.y; xw[4 * i + 2] = v.z; xw[4 * i + 3] = v.w;",
        "  }",
        "  const float dx0 = og_xd[unit], dx1 = og_xd[unit + 1u];",
    ]


def prologue(xt: str, k: int, sum_values: int = 32, padded: int | None = None) -> list[str]:
    """x's row (`x`) into shared int16 codes `og_xq16` (16-byte unit c at c + c / 8), scales
    `og_xd` (a 32 values) and integer sums `og_xs` (a `sum_values`: 32 or 16; 0: none, q8_0
    needs none). Four threads a unit, eight values each; every thread reaches every shuffle;
    ends with the block barrier. `padded` (a multiple of 32, at least `k`): the codes and scales
    cover that many values, those past `k` zero codes with scale 0."""
    assert sum_values in (0, 16, 32)
    padded = k if padded is None else padded
    assert padded >= k and padded % 32 == 0
    chunks, stored = k // 8, padded // 8
    if sum_values == 32:
        sums = [
            "  sum += __shfl_xor_sync(0xffffffffu, sum, 1);",
            "  sum += __shfl_xor_sync(0xffffffffu, sum, 2);",
        ]
        store_sum = ["      og_xs[c >> 2] = sum;"]
        store_sum16: list[str] = []
    elif sum_values == 16:
        sums = ["  sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // the 16 values of c and c ^ 1"]
        store_sum = []
        store_sum16 = ["    if ((c & 1u) == 0u) og_xs[c >> 1] = sum;"]
    else:
        sums, store_sum, store_sum16 = [], [], []
    if stored == chunks:
        here, live = [f"  const bool here = c < {chunks}u;"], "here"
    else:  # values past k: zeros
        here, live = [f"  const bool here = c < {stored}u, live = c < {chunks}u;"], "live"
    sum_decl = [f"__shared__ int og_xs[{k // sum_values}];"] if sum_values else []
    if sum_values:
        pack = [
            "  int sum = 0;",
            "  unsigned int packed[4];",
            "#pragma unroll",
            "  for (int j = 0; j < 4; ++j) {",
            "    const int lo = __float2int_rn(v[2 * j] * inv), hi = __float2int_rn(v[2 * j + 1] * inv);",
            "    packed[j] = ((unsigned int)lo & 0xffffu) | ((unsigned int)hi << 16);",
            "    sum += lo + hi;",
            "  }",
        ]
    else:
        pack = [
            "  unsigned int packed[4];",
            "#pragma unroll",
            "  for (int j = 0; j < 4; ++j) {",
            "    const int lo = __float2int_rn(v[2 * j] * inv), hi = __float2int_rn(v[2 * j + 1] * inv);",
            "    packed[j] = ((unsigned int)lo & 0xffffu) | ((unsigned int)hi << 16);",
            "  }",
        ]
    return [
        f"__shared__ uint4 og_xq16[{stored * 9 // 8 + 1}];  // 16-byte units of int16 codes",
        f"__shared__ float og_xd[{padded // 32}];",
        *sum_decl,
        f"for (unsigned int base = 0; base < {stored}u; base += blockDim.x) {{",
        "  const unsigned int c = base + threadIdx.x;  // 8 values; c / 4 the unit",
        *here,
        "  float v[8];",
        "#pragma unroll",
        f"  for (int j = 0; j < 8; ++j) v[j] = {live} ? {load(xt, 'x[8u * c + j]')} : 0.0f;",
        "  float top = 0.0f;",
        "#pragma unroll",
        "  for (int j = 0; j < 8; ++j) top = fmaxf(top, fabsf(v[j]));",
        "  top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 1));",
        "  top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, 2));",
        "  const float inv = top > 0.0f ? 32767.0f / top : 0.0f;",
        *pack,
        *sums,
        "  if (here) {",
        "    og_xq16[c + (c >> 3)] = uint4{packed[0], packed[1], packed[2], packed[3]};",
        *store_sum16,
        "    if ((c & 3u) == 0u) {",
        "      og_xd[c >> 2] = top / 32767.0f;",
        *store_sum,
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


_Q6K_DECLS = r"""// The N 4-byte words of the weight from byte p (2-byte aligned) as raw words w[N + 1]: where
// the weight's base is 4-byte aligned, the aligned words from p rounded down, a fifth where p
// is not 4-byte aligned (then 2 bytes past the N words are read); else bytes (w[N] = 0).
// og_q6k_word puts a word together where it is used, so the loads stay in flight until then.
template <int N> __device__ __forceinline__ void og_q6k_words(const unsigned char* p, bool aligned, unsigned int* w) {
  if (!aligned) {
#pragma unroll
    for (int i = 0; i < N; ++i)
      w[i] = p[4 * i] | (p[4 * i + 1] << 8) | (p[4 * i + 2] << 16) | ((unsigned int)p[4 * i + 3] << 24);
    w[N] = 0u;
    return;
  }
  const unsigned long long at = reinterpret_cast<unsigned long long>(p);
  const unsigned int* a = reinterpret_cast<const unsigned int*>(at & ~3ull);
#pragma unroll
  for (int i = 0; i < N; ++i) w[i] = __ldg(a + i);
  w[N] = (at & 2ull) != 0ull ? __ldg(a + N) : 0u;
}
// Word i of raw words w shifted right by `shift` bits (16 where they start 2 bytes early).
__device__ __forceinline__ unsigned int og_q6k_word(const unsigned int* w, int i, unsigned int shift) {
  return (unsigned int)((((unsigned long long)w[i + 1] << 32) | w[i]) >> shift);
}
// A q6_k quarter j (half h = j / 2, m = j % 2) of the block at `blk` into w[19], raw: its three
// 16-byte chunks of codes (ql at 64h + 16m, ql at 64h + 32 + 16m, qh at 128 + 32h + 16m; 5
// words each), the 8 scale bytes of half h (3 words) and d's bits. Every byte read is the
// block's (the last at 209).
__device__ __forceinline__ void og_q6k_load(const unsigned char* blk, unsigned int j, bool aligned, unsigned int* w) {
  const unsigned int h = j >> 1, m = j & 1u;
  og_q6k_words<4>(blk + 64u * h + 16u * m, aligned, w);
  og_q6k_words<4>(blk + 64u * h + 32u + 16u * m, aligned, w + 5);
  og_q6k_words<4>(blk + 128u + 32u * h + 16u * m, aligned, w + 10);
  og_q6k_words<2>(blk + 192u + 8u * h, aligned, w + 15);
  w[18] = aligned ? (unsigned int)__ldg(reinterpret_cast<const unsigned short*>(blk + 208))
                  : (unsigned int)(blk[208] | (blk[209] << 8));
}
// Σ over a q6_k quarter (w from og_q6k_load, `shift` 16 where its block is not 4-byte aligned;
// half h, m) times x's 64 codes xw[32]. Run r of 16 values (half h's values 32r + 16m + e) has
// ql's low nibbles (r = 0, 1: chunks a, b) or high ones (r = 2, 3), qh's bits 2r, scale byte
// 8h + 2r + m. Slot g holds run r = g ^ 2h (so the quarters' reads of x meet distinct banks):
// its codes, x's codes xw[8g .. 8g + 7], their unit's scale dx[g] and integer sum xs[g]. The
// codes are 0..63 (int8 for dp2a); their offset of 32 is taken off as 32 · xs.
__device__ __forceinline__ float og_q6k_quarter(const unsigned int* w, unsigned int shift, unsigned int h, unsigned int m, const unsigned int* xw, const float* dx, const int* xs) {
  const unsigned int sa = 4u * h, sb = 4u - sa;  // slots 0, 1 take nibbles at sa, 2, 3 at sb
  int dot[4] = {0, 0, 0, 0};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const unsigned int a = og_q6k_word(w, i, shift), b = og_q6k_word(w + 5, i, shift);
    const unsigned int q = og_q6k_word(w + 10, i, shift);
    const int c[4] = {(int)(((a >> sa) & 0x0f0f0f0fu) | (((q >> sa) << 4) & 0x30303030u)),
                      (int)(((b >> sa) & 0x0f0f0f0fu) | (((q >> sa) << 2) & 0x30303030u)),
                      (int)(((a >> sb) & 0x0f0f0f0fu) | ((q << sa) & 0x30303030u)),
                      (int)(((b >> sb) & 0x0f0f0f0fu) | (((q << sa) >> 2) & 0x30303030u))};
#pragma unroll
    for (int g = 0; g < 4; ++g) {
      dot[g] = __dp2a_lo((int)xw[8 * g + 2 * i], c[g], dot[g]);
      dot[g] = __dp2a_hi((int)xw[8 * g + 2 * i + 1], c[g], dot[g]);
    }
  }
  const unsigned int s0 = og_q6k_word(w + 15, 0, shift), s1 = og_q6k_word(w + 15, 1, shift);
  const float d = og_f16_to_f32((og_f16)(w[18] & 0xffffu));
  float sum = 0.0f;
#pragma unroll
  for (int g = 0; g < 4; ++g) {
    const unsigned int sw = (g < 2) == (h == 0u) ? s0 : s1;  // run g ^ 2h < 2
    const float sc = (float)(signed char)((sw >> (8u * (2u * (g & 1) + m))) & 255u);
    sum += dx[g] * (__fmul_rn(d, sc) * (float)(dot[g] - 32 * xs[g]));
  }
  return sum;
}
"""


_Q8_0_DECLS = r"""// A q8_0 block (d, then 32 int8 codes; 34 bytes, 2-byte aligned) at `blk` into w[9], raw.
// Where the weight's base is 4-byte aligned: the 8 aligned 4-byte words from the block's first
// 4-byte boundary (its start: d and codes 0..29; or its codes, 2 bytes in) and a 2-byte load
// of what they leave out (codes 30, 31; or d). Else bytes: codes in w[0..7], d in w[8]. Zeros
// where `valid` is false (a block past the row's end). Every byte read is the block's.
__device__ __forceinline__ void og_q8_0_load(const unsigned char* blk, bool valid, bool aligned, unsigned int* w) {
  if (!valid) {
#pragma unroll
    for (int i = 0; i < 9; ++i) w[i] = 0u;
    return;
  }
  if (!aligned) {
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const unsigned char* b = blk + 2 + 4 * i;
      w[i] = b[0] | (b[1] << 8) | (b[2] << 16) | ((unsigned int)b[3] << 24);
    }
    w[8] = (unsigned int)(blk[0] | (blk[1] << 8));
    return;
  }
  const unsigned int late = (unsigned int)(reinterpret_cast<unsigned long long>(blk) & 2ull);
  const unsigned int* a = reinterpret_cast<const unsigned int*>(blk + late);
#pragma unroll
  for (int i = 0; i < 8; ++i) w[i] = __ldg(a + i);
  w[8] = (unsigned int)__ldg(reinterpret_cast<const unsigned short*>(blk + (late != 0u ? 0u : 32u)));
}
// Codes 4i..4i+3 of a block's raw words w (`shift` 16 where the block starts at a 4-byte
// boundary: its words begin with d; else 0).
__device__ __forceinline__ unsigned int og_q8_0_word(const unsigned int* w, int i, unsigned int shift) {
  return (unsigned int)((((unsigned long long)w[i + 1] << 32) | w[i]) >> shift);
}
// Σ over a q8_0 quarter of a column (its blocks 2j and 2j + 1: w[0..8], w[9..17] from
// og_q8_0_load, shifts s0, s1) times x's 64 codes xw[32] (scales dx0, dx1 of its two units):
// the int8 codes by x's int16 codes, 16 `dp2a` a block, then dx · (d · Σ code·q).
__device__ __forceinline__ float og_q8_0_quarter(const unsigned int* w, unsigned int s0, unsigned int s1, const unsigned int* xw, float dx0, float dx1) {
  int dot0 = 0, dot1 = 0;
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    const int a = (int)og_q8_0_word(w, i, s0), b = (int)og_q8_0_word(w + 9, i, s1);
    dot0 = __dp2a_lo((int)xw[2 * i], a, dot0);
    dot0 = __dp2a_hi((int)xw[2 * i + 1], a, dot0);
    dot1 = __dp2a_lo((int)xw[16 + 2 * i], b, dot1);
    dot1 = __dp2a_hi((int)xw[16 + 2 * i + 1], b, dot1);
  }
  const float d0 = og_f16_to_f32((og_f16)((s0 != 0u ? w[0] : w[8]) & 0xffffu));
  const float d1 = og_f16_to_f32((og_f16)((s1 != 0u ? w[9] : w[17]) & 0xffffu));
  return dx0 * __fmul_rn(d0, (float)dot0) + dx1 * __fmul_rn(d1, (float)dot1);
}
"""


def decls(dtype: str = "q4_k") -> tuple[str, ...]:
    """File-scope text of the kernel of `dtype` (after the decoders of `quantized.decls`)."""
    return {"q4_k": (_DECLS,), "q6_k": (_Q6K_DECLS,), "q8_0": (_Q8_0_DECLS,)}[dtype]


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


def _head(n: int, row_bytes: int, alignment: int) -> list[str]:
    """A lane's (column pair, quarter) and its two weight rows; `aligned`: the weight's base is
    a multiple of `alignment` bytes."""
    half = COLUMNS // 2
    return [
        "const unsigned int warp = threadIdx.x >> 5, lane = threadIdx.x & 31u;",
        "const unsigned int j = lane & 3u, col = lane >> 2;  // quarter of a block, column",
        f"const unsigned int n0 = blockIdx.x * {COLUMNS}u + col, n1 = n0 + {half}u;",
        f"const unsigned char* w0 = in1 + (unsigned long long)(n0 < {n}u ? n0 : 0u) * {row_bytes}ull;",
        f"const unsigned char* w1 = in1 + (unsigned long long)(n1 < {n}u ? n1 : 0u) * {row_bytes}ull;",
        f"const bool aligned = (reinterpret_cast<unsigned long long>(in1) & {alignment - 1}ull) == 0ull;",
    ]


def _tail(out_dtype: str, n: int) -> list[str]:
    """The quarters' sums (xor shuffles), then the warps' in warp order (deterministic)."""
    half = COLUMNS // 2
    return [
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


def _q4_k(xt: str, k: int) -> tuple[list[str], list[str]]:
    """(early, loop) of q4_k: 16-byte loads of a quarter's codes and the block's head."""
    blocks = k // 256
    cur = ", ".join(_LOAD_NAMES)
    nxt = ", ".join("n" + name for name in _LOAD_NAMES)
    early = [
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
        *_x_quarter(),
        "  const int xs0 = og_xs[unit], xs1 = og_xs[unit + 1u];",
        "  const unsigned int q0[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};",
        "  const unsigned int q1[8] = {c0.x, c0.y, c0.z, c0.w, c1.x, c1.y, c1.z, c1.w};",
        "  acc0 += og_q4k_quarter(h0, q0, xw, j, dx0, dx1, xs0, xs1);",
        "  acc1 += og_q4k_quarter(h1, q1, xw, j, dx0, dx1, xs0, xs1);",
        *(f"  {name} = n{name};" for name in _LOAD_NAMES),
        "}",
    ]
    return early, lines


# Raw words a q6_k quarter holds of a column (`og_q6k_load`).
_Q6K_WORDS = 19


def _q6_k(xt: str, k: int) -> tuple[list[str], list[str]]:
    """(early, loop) of q6_k: a quarter's raw 4-byte words (`og_q6k_load`), put together as it
    is multiplied (`og_q6k_quarter`, shifted by 2 bytes where its block is not 4-byte aligned)."""
    blocks = k // 256
    words = _Q6K_WORDS

    def loads(into: str, block: str) -> list[str]:
        return [
            f"{{ og_q6k_load(w0 + ({block}) * 210u, j, aligned, {into}0);",
            f"  og_q6k_load(w1 + ({block}) * 210u, j, aligned, {into}1); }}",
        ]

    def shift(w: str) -> str:
        """16 where the column's block b starts 2 bytes past a 4-byte boundary (0 for bytes)."""
        at = f"(reinterpret_cast<unsigned long long>({w}) + b * 210ull)"
        return f"aligned ? (unsigned int)({at} & 2ull) * 8u : 0u"

    early = [
        f"unsigned int q0[{words}], q1[{words}];",
        f"if (warp < {blocks}u)",
        *("  " + line for line in loads("q", "warp")),
    ]
    lines = [
        f"const {STORAGE[xt]}* x = in0 + (unsigned long long)blockIdx.y * {k}ull;",
        *prologue(xt, k, SUM_VALUES["q6_k"]),
        "float acc0 = 0.0f, acc1 = 0.0f;",
        "const unsigned int h = j >> 1, m = j & 1u;  // the quarter's half, 16 values of 32",
        f"for (unsigned int b = warp; b < {blocks}u; b += {WARPS}u) {{",
        f"  unsigned int nq0[{words}], nq1[{words}];",
        f"  if (b + {WARPS}u < {blocks}u)  // the next block's loads, in flight meanwhile",
        *("    " + line for line in loads("nq", f"b + {WARPS}u")),
        "  const unsigned int unit = b * 32u + 16u * h + 2u * m;  // x's first 8 codes of run 0",
        "  unsigned int xw[32];",
        "  float dx[4];",
        "  int xs[4];",
        "#pragma unroll",
        "  for (unsigned int g = 0; g < 4u; ++g) {  // slot g: run r, x's values 32r + 16m + e",
        "    const unsigned int r = g ^ (2u * h);",
        "#pragma unroll",
        "    for (unsigned int u = 0; u < 2u; ++u) {",
        "      const unsigned int c = unit + 4u * r + u;",
        "      const uint4 v = og_xq16[c + (c >> 3)];",
        "      xw[8 * g + 4 * u] = v.x; xw[8 * g + 4 * u + 1] = v.y;",
        "      xw[8 * g + 4 * u + 2] = v.z; xw[8 * g + 4 * u + 3] = v.w;",
        "    }",
        "    dx[g] = og_xd[b * 8u + 4u * h + r];",
        "    xs[g] = og_xs[b * 16u + 8u * h + 2u * r + m];",
        "  }",
        f"  acc0 += og_q6k_quarter(q0, {shift('w0')}, h, m, xw, dx, xs);",
        f"  acc1 += og_q6k_quarter(q1, {shift('w1')}, h, m, xw, dx, xs);",
        "#pragma unroll",
        f"  for (int i = 0; i < {words}; ++i) {{",
        "    q0[i] = nq0[i];",
        "    q1[i] = nq1[i];",
        "  }",
        "}",
    ]
    return early, lines


# Raw words a q8_0 quarter holds of a column (`og_q8_0_load`: 9 a block, two blocks).
_Q8_0_WORDS = 18


def _q8_0(xt: str, k: int) -> tuple[list[str], list[str]]:
    """(early, loop) of q8_0: a 256-value group of 8 blocks takes q4_k's place, its quarter j
    the blocks 2j and 2j + 1 (64 values, x's codes as q4_k's quarter reads them); raw 4-byte
    words (`og_q8_0_load`), shifted by 2 bytes where a block starts at a 4-byte boundary. K a
    multiple of 32: the last group's blocks past the row's end load zeros, and x's codes and
    scales past K are zeros (the prologue covers K rounded up to 256)."""
    blocks = k // 32
    groups = -(-blocks // 8)
    words = _Q8_0_WORDS

    def valid(group: str, t: int) -> str:
        if blocks % 8 == 0:
            return "true"
        return f"8u * ({group}) + 2u * j + {t}u < {blocks}u"

    def loads(into: str, group: str) -> list[str]:
        lines = []
        for c in (0, 1):
            for t in (0, 1):
                at = f"w{c} + (8u * ({group}) + 2u * j + {t}u) * 34u"
                lines.append(
                    f"og_q8_0_load({at}, {valid(group, t)}, aligned, {into}{c} + {9 * t});"
                )
        return ["{ " + lines[0], *("  " + line for line in lines[1:-1]), "  " + lines[-1] + " }"]

    def shifts(c: int) -> str:
        """Column c's shifts: 16 where a block starts at a 4-byte boundary (0 for bytes). Block
        8b + 2j starts 68 (4b + j) bytes into the row, in the row's phase; block 8b + 2j + 1
        in the other."""
        at = f"reinterpret_cast<unsigned long long>(w{c})"
        return (
            f"const unsigned int s{c}0 = aligned ? (unsigned int)(~{at} & 2ull) * 8u : 0u,"
            f" s{c}1 = aligned ? 16u - s{c}0 : 0u;"
        )

    early = [
        f"unsigned int q0[{words}], q1[{words}];",
        f"if (warp < {groups}u)",
        *("  " + line for line in loads("q", "warp")),
    ]
    lines = [
        f"const {STORAGE[xt]}* x = in0 + (unsigned long long)blockIdx.y * {k}ull;",
        *prologue(xt, k, 0, groups * 256),
        "float acc0 = 0.0f, acc1 = 0.0f;",
        shifts(0),
        shifts(1),
        f"for (unsigned int b = warp; b < {groups}u; b += {WARPS}u) {{",
        f"  unsigned int nq0[{words}], nq1[{words}];",
        f"  if (b + {WARPS}u < {groups}u)  // the next group's loads, in flight meanwhile",
        *("    " + line for line in loads("nq", f"b + {WARPS}u")),
        "  const unsigned int unit = b * 8u + 2u * j;  // x's unit of block 2j of the group",
        *_x_quarter(),
        "  acc0 += og_q8_0_quarter(q0, s00, s01, xw, dx0, dx1);",
        "  acc1 += og_q8_0_quarter(q1, s10, s11, xw, dx0, dx1);",
        "#pragma unroll",
        f"  for (int i = 0; i < {words}; ++i) {{",
        "    q0[i] = nq0[i];",
        "    q1[i] = nq1[i];",
        "  }",
        "}",
    ]
    return early, lines


BLOCK_BYTES = {"q4_k": 144, "q6_k": 210}


def body(xt: str, dtype: str, out_dtype: str, n: int, k: int) -> tuple[list[str], list[str]]:
    """(early, body) of the kernel of `dtype` (q4_k, q6_k or q8_0): grid (ceil(n / COLUMNS),
    rows), `WARPS` warps a block. `early` (the body's statements before its PDL wait: they read
    only the weight) loads each warp's first block; the loop loads the next block while it
    multiplies the current one."""
    if dtype == "q8_0":
        early, lines = _q8_0(xt, k)
        return [*_head(n, k // 32 * 34, 4), *early], [*lines, *_tail(out_dtype, n)]
    row_bytes = k // 256 * BLOCK_BYTES[dtype]
    # q4_k: 16-byte loads (blocks are whole 16-byte units); q6_k: 4-byte words
    head = _head(n, row_bytes, 16 if dtype == "q4_k" else 4)
    early, lines = (_q4_k if dtype == "q4_k" else _q6_k)(xt, k)
    return [*head, *early], [*lines, *_tail(out_dtype, n)]
