"""The C text of the CPU kernels for quantized weights: one decoder per ggml block type, three
kernels over them, and a small thread pool.

`quantized_source()` is the whole translation unit (`runtime/cpu/quantized.py` builds and loads
it). Per block type T of `ir.graph.QUANT_BLOCKS`, in that order (the `type` argument below):

- `og_decode_T(block, out)`: one block's values in float32, the same float operations in the
  same order as `reference/dequantize.py` (and ggml's `dequantize_row_*`), so the values are
  equal bit for bit: every product and sum one rounding (the library is built with
  `-ffp-contract=off`, no fused multiply-add where the reference has none);
- `og_decode_rows_T(src, blocks, out)`: consecutive blocks, the decoder inlined.

The exported kernels (0 on success, 1 when a scratch buffer could not be allocated):

    og_matmul(type, x, m, w, n, k, y, threads)    y[m,n] = x[m,k] · W[n,k]^T   (x, y float32)
    og_rows(type, table, k, ids, count, out, threads)   out[i] = W[ids[i]]   (int64 ids)
    og_dequantize(type, blocks, count, out, threads)    every value of `count` blocks

The product never holds more of W than a panel: each part (thread) owns a range of groups of
`OG_COLS` output columns; for each group it decodes those rows of W one chunk of K at a time
(`OG_COLS` x at most `OG_CHUNK` floats, in L1/L2) and multiplies the chunk into every row of x
with register tiles of `OG_ROWS` x `OG_COLS` vector accumulators. An output's sum runs in a
fixed order whatever the tile, chunk, m or thread count: `OG_LANES` partial sums, lane l
accumulating elements l, l + LANES, ... with a fused multiply-add where the host has a fast
one, then a fixed pairwise sum of the lanes. So results do not depend on the threads.

Threads: a pool of detached pthreads started on first use, woken per call by a condition
variable (no spinning between calls); the calling thread runs part 0. A second caller while the
pool is busy runs its parts itself, one after another (the same results). After `fork` the child
starts a pool of its own. Does not handle: big-endian hosts.
"""

from __future__ import annotations

from optgraph.ir.graph import QUANT_BLOCKS

__all__ = ["quantized_source"]

_PRELUDE = r"""
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__)
#define OG_LANES 16
#define OG_ROWS 4
#else
#define OG_LANES 8
#define OG_ROWS 2
#endif
#define OG_COLS 4
#define OG_CHUNK 2048
#define OG_MAX_THREADS 256

typedef float og_vec __attribute__((vector_size(OG_LANES * 4)));

typedef void (*og_decode_rows)(const uint8_t* src, int64_t blocks, float* out);
struct og_type { og_decode_rows decode; int64_t elems, bytes; };

static inline og_vec og_load(const float* p) { og_vec v; memcpy(&v, p, sizeof v); return v; }

static inline og_vec og_madd(og_vec acc, og_vec a, og_vec b) {
#if defined(__FP_FAST_FMAF)
  og_vec out;
  for (int l = 0; l < OG_LANES; ++l) out[l] = __builtin_fmaf(a[l], b[l], acc[l]);
  return out;
#else
  return acc + a * b;
#endif
}

static inline float og_hsum(og_vec v) {
  for (int width = OG_LANES / 2; width; width >>= 1)
    for (int l = 0; l < width; ++l) v[l] += v[l + width];
  return v[0];
}

/* The little-endian IEEE half at p, exactly. */
static inline float og_half(const uint8_t* p) {
#if defined(__F16C__) || defined(__aarch64__)
  _Float16 h;  /* one conversion instruction */
  memcpy(&h, p, 2);
  return (float)h;
#else
  const uint32_t h = (uint32_t)p[0] | ((uint32_t)p[1] << 8);
  const uint32_t sign = (h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  uint32_t bits;
  float f;
  if (exponent - 1u < 30u) {
    bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
  } else if (exponent == 0x1fu) {
    bits = sign | 0x7f800000u | (mantissa << 13);
  } else {  /* zero or subnormal: mantissa * 2^-24, exact */
    f = (float)mantissa * 0x1p-24f;
    return sign ? -f : f;
  }
  memcpy(&f, &bits, 4);
  return f;
#endif
}

/* Sixteen values at a time in the decoders: codes as bytes, widened to 32-bit integers, then
   converted and scaled lane by lane (the same single roundings as scalar code). */
typedef uint8_t og_u8x16 __attribute__((vector_size(16)));
typedef int32_t og_i32x16 __attribute__((vector_size(64)));
typedef uint32_t og_u32x16 __attribute__((vector_size(64)));
typedef float og_f32x16 __attribute__((vector_size(64)));
static const og_u32x16 og_lane = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

static inline og_u8x16 og_bytes(const uint8_t* p) { og_u8x16 v; memcpy(&v, p, 16); return v; }
static inline og_i32x16 og_widen(og_u8x16 v) { return __builtin_convertvector(v, og_i32x16); }
static inline og_f32x16 og_float(og_i32x16 v) { return __builtin_convertvector(v, og_f32x16); }
static inline void og_store(float* out, og_f32x16 v) { memcpy(out, &v, sizeof v); }

/* The eight 6-bit scales and mins of a q4_k / q5_k block (its bytes 4..15). */
static inline void og_k_scales(const uint8_t* s, float d, float dmin, float* scale, float* shift) {
  for (int j = 0; j < 4; ++j) {
    scale[j] = d * (float)(s[j] & 63);
    shift[j] = dmin * (float)(s[j + 4] & 63);
    scale[j + 4] = d * (float)((s[j + 8] & 15) | ((s[j] >> 6) << 4));
    shift[j + 4] = dmin * (float)((s[j + 8] >> 4) | ((s[j + 4] >> 6) << 4));
  }
}

/* E2M1 codes doubled (0, 1, 2, 3, 4, 6, 8, 12 and their negatives) as float bits, with masks
   rather than a table: 2^e * (1 + m/2) for e > 0, m for e = 0; code 8 is +0, as in the
   reference's table. */
static inline og_f32x16 og_fp4(og_u8x16 codes) {
  const og_u32x16 c = __builtin_convertvector(codes, og_u32x16);
  const og_u32x16 e = (c >> 1) & 3u, m = c & 1u;
  const og_u32x16 normal = ((e + 127u) << 23) | (m << 22);
  const og_u32x16 is_normal = (og_u32x16)(e != 0u);
  const og_u32x16 magnitude = (normal & is_normal) | ((0u - m) & 0x3f800000u & ~is_normal);
  const og_u32x16 bits = magnitude | ((c & 8u) << 28 & (og_u32x16)(magnitude != 0u));
  return (og_f32x16)bits;
}
"""

# The body of `og_decode_T(const uint8_t* b, float* out)` per type: the reference's operations.
_DECODERS: dict[str, str] = {
    "q8_0": r"""
  const float d = og_half(b);
  for (int h = 0; h < 2; ++h)  /* int8 codes: q + 128 as bytes, widened, less 128 */
    og_store(out + 16 * h, d * og_float(og_widen(og_bytes(b + 2 + 16 * h) ^ 128) - 128));
""",
    "q4_0": r"""
  const float d = og_half(b);
  const og_u8x16 q = og_bytes(b + 2);
  og_store(out, d * og_float(og_widen(q & 15) - 8));
  og_store(out + 16, d * og_float(og_widen(q >> 4) - 8));
""",
    "q4_1": r"""
  const float d = og_half(b), m = og_half(b + 2);
  const og_u8x16 q = og_bytes(b + 4);
  og_store(out, d * og_float(og_widen(q & 15)) + m);
  og_store(out + 16, d * og_float(og_widen(q >> 4)) + m);
""",
    "q5_0": r"""
  const float d = og_half(b);
  uint32_t bits;  /* bit j: the 5th bit of element j */
  memcpy(&bits, b + 2, 4);
  const og_u32x16 high = bits + (og_u32x16){0};
  const og_u8x16 q = og_bytes(b + 6);
  const og_i32x16 lo = og_widen(q & 15) | (og_i32x16)(((high >> og_lane) & 1u) << 4);
  const og_i32x16 hi = og_widen(q >> 4) | (og_i32x16)(((high >> (og_lane + 16u)) & 1u) << 4);
  og_store(out, d * og_float(lo - 16));
  og_store(out + 16, d * og_float(hi - 16));
""",
    "q4_k": r"""
  float scale[8], shift[8];
  og_k_scales(b + 4, og_half(b), og_half(b + 2), scale, shift);
  for (int c = 0; c < 4; ++c)  /* 32 bytes: sub-blocks 2c (low nibbles) and 2c + 1 */
    for (int h = 0; h < 2; ++h) {
      const og_u8x16 q = og_bytes(b + 16 + 32 * c + 16 * h);
      float* o = out + 64 * c + 16 * h;
      og_store(o, scale[2 * c] * og_float(og_widen(q & 15)) - shift[2 * c]);
      og_store(o + 32, scale[2 * c + 1] * og_float(og_widen(q >> 4)) - shift[2 * c + 1]);
    }
""",
    "q5_k": r"""
  float scale[8], shift[8];
  og_k_scales(b + 4, og_half(b), og_half(b + 2), scale, shift);
  for (int h = 0; h < 2; ++h) {  /* bit j of qh byte i: the 5th bit of element i of sub-block j */
    const og_i32x16 qh = og_widen(og_bytes(b + 16 + 16 * h));
    for (int c = 0; c < 4; ++c) {
      const og_u8x16 q = og_bytes(b + 48 + 32 * c + 16 * h);
      const og_i32x16 lo = og_widen(q & 15) | (((qh >> (2 * c)) & 1) << 4);
      const og_i32x16 hi = og_widen(q >> 4) | (((qh >> (2 * c + 1)) & 1) << 4);
      float* o = out + 64 * c + 16 * h;
      og_store(o, scale[2 * c] * og_float(lo) - shift[2 * c]);
      og_store(o + 32, scale[2 * c + 1] * og_float(hi) - shift[2 * c + 1]);
    }
  }
""",
    "q6_k": r"""
  const float d = og_half(b + 208);
  const int8_t* sc = (const int8_t*)(b + 192);
  for (int h = 0; h < 2; ++h)  /* two halves of 128; element p = 32 s + l of a half */
    for (int s = 0; s < 4; ++s)
      for (int l = 0; l < 2; ++l) {  /* a scale per 16 values */
        const og_u8x16 ql = og_bytes(b + 64 * h + 32 * (s & 1) + 16 * l);
        const og_u8x16 qh = og_bytes(b + 128 + 32 * h + 16 * l);
        const og_u8x16 q = ((ql >> (4 * (s >> 1))) & 15) | (((qh >> (2 * s)) & 3) << 4);
        const float scale = d * (float)sc[8 * h + 2 * s + l];
        og_store(out + 128 * h + 32 * s + 16 * l, scale * og_float(og_widen(q) - 32));
      }
""",
    "mxfp4": r"""
  /* E8M0 halved: 2^(e - 128), exact (e = 0 and 1 are subnormal). */
  const uint32_t e = b[0];
  const uint32_t bits = e >= 2 ? (e - 1u) << 23 : 0x00200000u << e;
  float scale;
  memcpy(&scale, &bits, 4);
  const og_u8x16 q = og_bytes(b + 1);
  og_store(out, scale * og_fp4(q & 15));
  og_store(out + 16, scale * og_fp4(q >> 4));
""",
}
assert tuple(_DECODERS) == tuple(QUANT_BLOCKS)

_KERNELS = r"""
/* -- the thread pool ------------------------------------------------------------------------ */

typedef void (*og_task)(void* arg, int part, int parts);
struct og_start { int index; unsigned long seen; };

static pthread_mutex_t og_busy = PTHREAD_MUTEX_INITIALIZER;  /* one caller uses the workers */
static pthread_mutex_t og_lock = PTHREAD_MUTEX_INITIALIZER;  /* guards the round below */
static pthread_cond_t og_wake = PTHREAD_COND_INITIALIZER, og_idle = PTHREAD_COND_INITIALIZER;
static pthread_once_t og_once = PTHREAD_ONCE_INIT;
static struct og_start og_starts[OG_MAX_THREADS];
static int og_workers;  /* started; changed only by the caller holding og_busy */
static unsigned long og_round;
static og_task og_work;
static void* og_arg;
static int og_parts, og_left;

static void og_before_fork(void) { pthread_mutex_lock(&og_busy); }
static void og_after_fork(void) { pthread_mutex_unlock(&og_busy); }
static void og_in_child(void) {  /* the workers did not survive the fork */
  pthread_mutex_init(&og_lock, NULL);
  pthread_cond_init(&og_wake, NULL);
  pthread_cond_init(&og_idle, NULL);
  og_workers = 0;
  pthread_mutex_unlock(&og_busy);
}
static void og_register_fork(void) { pthread_atfork(og_before_fork, og_after_fork, og_in_child); }

static void* og_worker(void* start) {
  const int index = ((struct og_start*)start)->index;
  unsigned long seen = ((struct og_start*)start)->seen;
  pthread_mutex_lock(&og_lock);
  for (;;) {
    while (og_round == seen) pthread_cond_wait(&og_wake, &og_lock);
    seen = og_round;
    if (index >= og_parts) continue;
    og_task task = og_work;
    void* arg = og_arg;
    const int parts = og_parts;
    pthread_mutex_unlock(&og_lock);
    task(arg, index, parts);
    pthread_mutex_lock(&og_lock);
    if (--og_left == 0) pthread_cond_signal(&og_idle);
  }
  return NULL;
}

static void og_parallel(og_task task, void* arg, int parts) {
  if (parts > OG_MAX_THREADS) parts = OG_MAX_THREADS;
  pthread_once(&og_once, og_register_fork);
  if (parts <= 1 || pthread_mutex_trylock(&og_busy) != 0) {
    for (int p = 0; p < parts; ++p) task(arg, p, parts < 1 ? 1 : parts);
    return;
  }
  while (og_workers < parts - 1) {
    pthread_t thread;
    pthread_attr_t attr;
    struct og_start* start = &og_starts[og_workers + 1];
    start->index = og_workers + 1;
    start->seen = og_round;
    pthread_attr_init(&attr);
    pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
    const int failed = pthread_create(&thread, &attr, og_worker, start);
    pthread_attr_destroy(&attr);
    if (failed) break;
    ++og_workers;
  }
  if (parts > og_workers + 1) parts = og_workers + 1;
  pthread_mutex_lock(&og_lock);
  og_work = task;
  og_arg = arg;
  og_parts = parts;
  og_left = parts - 1;
  ++og_round;
  pthread_cond_broadcast(&og_wake);
  pthread_mutex_unlock(&og_lock);
  task(arg, 0, parts);
  pthread_mutex_lock(&og_lock);
  while (og_left) pthread_cond_wait(&og_idle, &og_lock);
  pthread_mutex_unlock(&og_lock);
  pthread_mutex_unlock(&og_busy);
}

/* -- the kernels ------------------------------------------------------------------------------ */

/* x rows [rows][k] (from x + k0) times the decoded panel [OG_COLS][OG_CHUNK], `len` values,
   into the accumulators acc[rows][OG_COLS]; `rows` is a constant wherever this is inlined. */
static inline __attribute__((always_inline)) void og_tile(
    const int rows, const float* x, int64_t k, int64_t len, const float* panel, og_vec* acc) {
  og_vec a[OG_ROWS][OG_COLS];
#pragma GCC unroll 4
  for (int r = 0; r < rows; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < OG_COLS; ++c) a[r][c] = acc[r * OG_COLS + c];
  for (int64_t i = 0; i < len; i += OG_LANES) {
    og_vec w[OG_COLS];
#pragma GCC unroll 4
    for (int c = 0; c < OG_COLS; ++c) w[c] = og_load(panel + c * OG_CHUNK + i);
#pragma GCC unroll 4
    for (int r = 0; r < rows; ++r) {
      const og_vec xv = og_load(x + r * k + i);
#pragma GCC unroll 4
      for (int c = 0; c < OG_COLS; ++c) a[r][c] = og_madd(a[r][c], xv, w[c]);
    }
  }
#pragma GCC unroll 4
  for (int r = 0; r < rows; ++r)
#pragma GCC unroll 4
    for (int c = 0; c < OG_COLS; ++c) acc[r * OG_COLS + c] = a[r][c];
}

struct og_product {
  const struct og_type* type;
  const float* x;
  const uint8_t* w;
  float* y;
  int64_t m, n, k, chunk;
  int failed;
};

static void og_product_part(void* arg, int part, int parts) {
  struct og_product* p = arg;
  const int64_t groups = (p->n + OG_COLS - 1) / OG_COLS;
  const int64_t g0 = groups * part / parts, g1 = groups * (part + 1) / parts;
  if (g0 == g1) return;
  const int64_t m = p->m, n = p->n, k = p->k, elems = p->type->elems, bytes = p->type->bytes;
  const int64_t row_bytes = k / elems * bytes;
  float* panel = aligned_alloc(64, sizeof(float) * OG_COLS * OG_CHUNK);
  og_vec* acc = aligned_alloc(64, sizeof(og_vec) * OG_COLS * (size_t)m);
  if (!panel || !acc) {
    __atomic_store_n(&p->failed, 1, __ATOMIC_RELAXED);
    free(panel);
    free(acc);
    return;
  }
  for (int64_t g = g0; g < g1; ++g) {
    const int64_t j = g * OG_COLS;
    const int64_t cols = n - j < OG_COLS ? n - j : OG_COLS;
    for (int64_t k0 = 0; k0 < k; k0 += p->chunk) {
      const int64_t len = k - k0 < p->chunk ? k - k0 : p->chunk;
      for (int c = 0; c < OG_COLS; ++c) {  /* a missing column repeats the last (not stored) */
        const int64_t col = j + (c < cols ? c : cols - 1);
        p->type->decode(p->w + col * row_bytes + k0 / elems * bytes, len / elems,
                        panel + c * OG_CHUNK);
      }
      for (int64_t r = 0; r < m; r += OG_ROWS) {
        og_vec* a = acc + r * OG_COLS;
        const int64_t rows = m - r < OG_ROWS ? m - r : OG_ROWS;
        if (k0 == 0) memset(a, 0, sizeof(og_vec) * OG_COLS * (size_t)rows);
        const float* x = p->x + r * k + k0;
        switch (rows) {
          case 1: og_tile(1, x, k, len, panel, a); break;
#if OG_ROWS > 1
          case 2: og_tile(2, x, k, len, panel, a); break;
#endif
#if OG_ROWS > 2
          case 3: og_tile(3, x, k, len, panel, a); break;
          case 4: og_tile(4, x, k, len, panel, a); break;
#endif
        }
      }
    }
    for (int64_t r = 0; r < m; ++r)
      for (int64_t c = 0; c < cols; ++c) p->y[r * n + j + c] = og_hsum(acc[r * OG_COLS + c]);
  }
  free(panel);
  free(acc);
}

/* Parts for `work` multiply-adds: a part is worth waking a thread for above about 2^18. */
static int og_parts_for(double work, int64_t units, int threads) {
  int64_t parts = (int64_t)(work / 262144.0) + 1;
  if (parts > units) parts = units;
  if (parts > threads) parts = threads;
  return parts < 1 ? 1 : (int)parts;
}

int og_matmul(int type, const float* x, int64_t m, const uint8_t* w, int64_t n, int64_t k,
              float* y, int threads) {
  struct og_product p = {&og_types[type], x, w, y, m, n, k, OG_CHUNK, 0};
  /* Whole blocks of 256 values; x's chunk for all rows stays in L1 (at most 8 Ki floats), and a
     few rows take short chunks (the panel just decoded is read back from L1 sooner). */
  int64_t chunk = m <= 4 ? 1024 : 8192 / m / 256 * 256;
  p.chunk = chunk < 256 ? 256 : chunk > OG_CHUNK ? OG_CHUNK : chunk;
  const int64_t groups = (n + OG_COLS - 1) / OG_COLS;
  og_parallel(og_product_part, &p, og_parts_for((double)n * k * (m + 4), groups, threads));
  return p.failed;
}

struct og_gather {
  const struct og_type* type;
  const uint8_t* table;
  const int64_t* ids;
  float* out;
  int64_t k, count;
};

static void og_gather_part(void* arg, int part, int parts) {
  struct og_gather* g = arg;
  const int64_t blocks = g->k / g->type->elems, row_bytes = blocks * g->type->bytes;
  for (int64_t i = g->count * part / parts; i < g->count * (part + 1) / parts; ++i)
    g->type->decode(g->table + g->ids[i] * row_bytes, blocks, g->out + i * g->k);
}

int og_rows(int type, const uint8_t* table, int64_t k, const int64_t* ids, int64_t count,
            float* out, int threads) {
  struct og_gather g = {&og_types[type], table, ids, out, k, count};
  og_parallel(og_gather_part, &g, og_parts_for((double)k * count, count, threads));
  return 0;
}

struct og_values { const struct og_type* type; const uint8_t* blocks; float* out; int64_t count; };

static void og_values_part(void* arg, int part, int parts) {
  struct og_values* v = arg;
  const int64_t b0 = v->count * part / parts, b1 = v->count * (part + 1) / parts;
  v->type->decode(v->blocks + b0 * v->type->bytes, b1 - b0, v->out + b0 * v->type->elems);
}

int og_dequantize(int type, const uint8_t* blocks, int64_t count, float* out, int threads) {
  struct og_values v = {&og_types[type], blocks, out, count};
  const double work = (double)count * og_types[type].elems;
  og_parallel(og_values_part, &v, og_parts_for(work, count, threads));
  return 0;
}
"""


def _decoders() -> str:
    parts = []
    for name, body in _DECODERS.items():
        elems, size = QUANT_BLOCKS[name]
        parts.append(
            f"static inline void og_decode_{name}(const uint8_t* restrict b, float* restrict out) {{{body}}}\n"
            f"static void og_decode_rows_{name}(const uint8_t* restrict src, int64_t blocks, "
            f"float* restrict out) "
            f"{{\n  for (int64_t i = 0; i < blocks; ++i) "
            f"og_decode_{name}(src + i * {size}, out + i * {elems});\n}}\n"
        )
    return "\n".join(parts)


def quantized_source() -> str:
    """The C translation unit: the prelude, the decoders, the type table (in `QUANT_BLOCKS`
    order), the pool and the kernels."""
    table = ",\n  ".join(
        f"{{og_decode_rows_{name}, {elems}, {size}}}"
        for name, (elems, size) in QUANT_BLOCKS.items()
    )
    return (
        _PRELUDE
        + _decoders()
        + f"\nstatic const struct og_type og_types[] = {{\n  {table}\n}};\n"
        + _KERNELS
    )
