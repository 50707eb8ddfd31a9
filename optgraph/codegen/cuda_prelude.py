"""The text every generated CUDA module starts with: dtypes, conversions, PDL, reductions.

f16 and bf16 are stored as 16-bit integers and converted with PTX `cvt` (f16) or bit arithmetic
(bf16, round to nearest even), so no CUDA header is needed; `og_grid_dependency_wait` and
`og_grid_launch_dependents` are Programmatic Dependent Launch (sm_90+, empty elsewhere and in the
CPU emulator); `og_block_reduce` reduces over a block; `og_load_stream`, `og_prefetch_l2` and
`og_arrive` are the one-row products' streaming load, L2 hint and split-K arrival.
"""

PRELUDE = r"""// optgraph CUDA kernels. Generated: do not edit.
typedef unsigned short og_f16;
typedef unsigned short og_bf16;

__device__ __forceinline__ float og_f16_to_f32(og_f16 h) {
  float f; asm("cvt.f32.f16 %0, %1;" : "=f"(f) : "h"(h)); return f;
}
__device__ __forceinline__ og_f16 og_f32_to_f16(float f) {
  og_f16 h; asm("cvt.rn.f16.f32 %0, %1;" : "=h"(h) : "f"(f)); return h;
}
__device__ __forceinline__ float og_bf16_to_f32(og_bf16 h) {
  return __uint_as_float(((unsigned int)h) << 16);
}
__device__ __forceinline__ og_bf16 og_f32_to_bf16(float f) {
  unsigned int u = __float_as_uint(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (og_bf16)0x7fc0;  // NaN stays NaN
  u += 0x7fffu + ((u >> 16) & 1u);                              // round to nearest even
  return (og_bf16)(u >> 16);
}
// A rope rotation's halves, rounded as the reference rounds them (each product, then the sum):
// spelled out so that nvcc contracts neither into an fma, and the rope kernel and the products
// that fold a rope (qkv_folds) give the same bits.
__device__ __forceinline__ float og_rotate_first(float x1, float c, float x2, float s) {
  return __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s));
}
__device__ __forceinline__ float og_rotate_second(float x2, float c, float x1, float s) {
  return __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}
__device__ __forceinline__ float og_sigmoid(float x) {
  float e = expf(-fabsf(x));
  return x >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
}
template <typename T> __device__ __forceinline__ T og_max(T a, T b) { return a > b ? a : b; }
template <typename T> __device__ __forceinline__ T og_min(T a, T b) { return a < b ? a : b; }
__device__ __forceinline__ float og_max(float a, float b) {
  return (a != a || a > b) ? a : b;  // NaN propagates, as in NumPy
}
__device__ __forceinline__ float og_min(float a, float b) { return (a != a || a < b) ? a : b; }
// div and mod of integers (docs/ir.md): by zero gives 0 and the lowest integer by -1 wraps
// (C leaves both undefined and x86 traps); og_mod takes the divisor's sign, og_rem the dividend's.
template <typename T> __device__ __forceinline__ T og_idiv(T a, T b) {
  return b == 0 ? T(0) : b == T(-1) ? T(0ull - (unsigned long long)a) : a / b;
}
template <typename T> __device__ __forceinline__ T og_rem(T a, T b) {
  return (b == 0 || b == T(-1)) ? T(0) : a % b;
}
template <typename T> __device__ __forceinline__ T og_mod(T a, T b) {
  const T r = og_rem(a, b);
  return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
__device__ __forceinline__ float og_rem(float a, float b) { return fmodf(a, b); }
__device__ __forceinline__ float og_mod(float a, float b) {
  const float r = fmodf(a, b);
  return (r != 0.0f && ((r < 0.0f) != (b < 0.0f))) ? r + b : r;
}

// Programmatic Dependent Launch (sm_90+). Every kernel calls both first (`kernel_template`).
// wait: block until the preceding grid has completed and its memory is visible (a no-op when
// the kernel was launched without the programmatic attribute). launch_dependents: the next grid
// may start launching; it is correct early because every dependent waits before touching memory.
__device__ __forceinline__ void og_grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void og_grid_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

// A 16-byte load of data read once (a weight stream): not kept in L1 (sm_70+). Volatile, so it
// stays after the dependency wait and where its batch of loads was written.
__device__ __forceinline__ uint4 og_load_stream(const void* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
#else
  return *reinterpret_cast<const uint4*>(p);
#endif
}
// Split-K arrival: one thread of a block whose writes are ordered before it by __syncthreads
// adds 1 to `counter`, releasing them and acquiring the earlier arrivals' (GPU scope); returns
// the old count. One atomic a block instead of a __threadfence in every thread.
// A hint: bring the line holding `p` into L2. The one-row products issue it for their first
// weight rows before their dependency wait, so it overlaps the preceding kernel.
__device__ __forceinline__ void og_prefetch_l2(const void* p) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  asm volatile("prefetch.global.L2 [%0];" :: "l"(p));
#else
  (void)p;
#endif
}
// A hint: bring `bytes` (a multiple of 16) from `p` (16-byte aligned) into L2, one bulk
// prefetch (sm_90+; nothing elsewhere).
__device__ __forceinline__ void og_prefetch_l2_bulk(const void* p, unsigned int bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" :: "l"(p), "r"(bytes) : "memory");
#else
  (void)p; (void)bytes;
#endif
}
__device__ __forceinline__ unsigned int og_arrive(unsigned int* counter) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 700
  unsigned int seen;
  asm volatile("atom.add.acq_rel.gpu.global.u32 %0, [%1], 1;"
               : "=r"(seen) : "l"(counter) : "memory");
  return seen;
#else
  return atomicAdd(counter, 1u);
#endif
}

struct OgSum { template <typename T> __device__ T operator()(T a, T b) const { return a + b; } };
struct OgMax { template <typename T> __device__ T operator()(T a, T b) const { return og_max(a, b); } };

// The sum of v over the warp, in the same order in every warp (xor shuffles).
__device__ __forceinline__ float og_warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
// Reduce v over the block (blockDim.x a multiple of 32); every thread gets the result.
// `scratch` holds 32 values; it may be reused by the next call.
template <typename T, typename Op>
__device__ __forceinline__ T og_block_reduce(T v, T* scratch, Op op, T identity) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_xor_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  __syncthreads();
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  if (warp == 0) {
    T w = lane < warps ? scratch[lane] : identity;
    for (int o = 16; o > 0; o >>= 1) w = op(w, __shfl_xor_sync(0xffffffffu, w, o));
    if (lane == 0) scratch[0] = w;
  }
  __syncthreads();
  return scratch[0];
}
"""
