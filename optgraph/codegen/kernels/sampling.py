"""The next token chosen on the GPU: greedy, or seeded temperature / top-k / top-p sampling, by
the definition of `api/sampling.py`, in one kernel of one block that also feeds the token back.

    kernel = sampling_kernel("f16", token="i64", position="i64", kv_len=None)
    launch: grid (1,1,1), block (SAMPLING_THREADS,1,1), args
        logits, iconf, fconf, state, token, position, kv_len, history

Arguments (all device pointers, so a launch is the same whatever the values):

- `logits`: the step's logits; the row read starts at `iconf[0]` elements, `iconf[1]` long (V);
- `iconf` (int64): row offset, V, top_k, seed, history capacity; `fconf` (f32): temperature,
  top_p;
- `state` (int64): `[step]`, the index of the token being chosen (the draw's counter), advanced;
- `token`: the decode step's token input, overwritten with the choice (fed back: the next step
  reads it, no host round trip); `position` and `kv_len` (either may be the `dummy` of the loop)
  advanced by one: the next step's position and attended length;
- `history` (int32): `history[step % capacity] = token`, what the host copies out.

The steps, each a pass over the row with block reductions in shared memory (a fixed tree, so a
seed gives the same tokens run to run):

1. greedy (`temperature == 0` or `top_k == 1`): the smallest index of the largest value;
2. `z = x / temperature`; top-k's threshold is the k-th largest `z`, found exactly by bisection
   over the order-preserving integer keys of the floats (32 counting passes);
3. `w = exp(z - max)` over the kept tokens; top-p's threshold is the largest `t` with
   `sum(w >= t) >= top_p * sum(w)`, by bisection over the bits of `w` (31 summing passes);
4. `u` = SplitMix64 of the seed and the step (24 bits); the token is the first index at which the
   running sum of kept `w` exceeds `u` times their total: each thread sums a contiguous part,
   the parts' sums are scanned, and the thread whose part holds the crossing finds it.

Not handled: rows over 2^31 elements; more than one row (batches).
"""

from __future__ import annotations

import hashlib

from optgraph.codegen.cuda_source import STORAGE, Kernel, load

SAMPLING_THREADS = 1024
TOKEN_DTYPES = ("i32", "i64")


def sampling_kernel(
    logits: str, token: str, position: str | None, kv_len: str | None, threads: int = 1024
) -> Kernel:
    """The kernel for logits of dtype `logits`, a token input of dtype `token` and position /
    kv_len inputs of theirs (None: not advanced); `threads` a block (a power of two <= 1024)."""
    if token not in TOKEN_DTYPES or any(
        d is not None and d not in TOKEN_DTYPES for d in (position, kv_len)
    ):
        raise ValueError(f"integer inputs must be i32 or i64: {token}, {position}, {kv_len}")
    if threads & (threads - 1) or not 32 <= threads <= 1024:
        raise ValueError(f"threads must be a power of two from 32 to 1024, got {threads}")
    position_type = STORAGE[position or "i64"]
    kv_type = STORAGE[kv_len or "i64"]
    params = (
        f"const {STORAGE[logits]}* logits",
        "const long long* iconf",
        "const float* fconf",
        "long long* state",
        f"{STORAGE[token]}* token",
        f"{position_type}* position",
        f"{kv_type}* kv_len",
        "int* history",
    )
    body = (
        _BODY.replace("THREADS", str(threads))
        .replace("OG_LOAD(i)", load(logits, "logits[row + (i)]"))
        .replace("ADVANCE_POSITION", "position[0] += 1;" if position else "")
        .replace("ADVANCE_KV_LEN", "kv_len[0] += 1;" if kv_len else "")
    )
    source = f'extern "C" __global__ void KERNEL_NAME({", ".join(params)}) {{\n{body}}}\n'
    name = "og_sample_" + hashlib.sha256(source.encode()).hexdigest()[:12]
    return Kernel(name, source.replace("KERNEL_NAME", name))


# The kernel body. `OG_LOAD(i)` reads element i of the row as float.
_BODY = r"""
  __shared__ float og_red_f[THREADS];
  __shared__ unsigned int og_red_u[THREADS];
  __shared__ long long og_red_i[THREADS];
  const unsigned int tid = threadIdx.x;
  const long long row = iconf[0];
  const long long n = iconf[1];
  const long long top_k = iconf[2];
  const unsigned long long seed = (unsigned long long)iconf[3];
  const long long capacity = iconf[4];
  const float temperature = fconf[0];
  const float top_p = fconf[1];
  const long long step = state[0];
  long long chosen = 0;
  if (temperature == 0.0f || top_k == 1) {
    // greedy: the largest value, its smallest index
    float best = __uint_as_float(0xff800000u); long long at = n;
    for (long long i = tid; i < n; i += THREADS) {
      float v = OG_LOAD(i);
      if (v > best || (v == best && at == n)) { best = v; at = i; }
    }
    og_red_f[tid] = best; og_red_i[tid] = at;
    __syncthreads();
    for (unsigned int half = THREADS / 2; half > 0; half /= 2) {
      if (tid < half) {
        float ov = og_red_f[tid + half]; long long oi = og_red_i[tid + half];
        float mv = og_red_f[tid]; long long mi = og_red_i[tid];
        if (ov > mv || (ov == mv && oi < mi)) { og_red_f[tid] = ov; og_red_i[tid] = oi; }
      }
      __syncthreads();
    }
    chosen = og_red_i[0] < n ? og_red_i[0] : 0;  // a row of NaN: token 0
  } else {
    // the largest z (every value kept so far)
    float zmax = __uint_as_float(0xff800000u);
    for (long long i = tid; i < n; i += THREADS) zmax = fmaxf(zmax, OG_LOAD(i) / temperature);
    og_red_f[tid] = zmax;
    __syncthreads();
    for (unsigned int half = THREADS / 2; half > 0; half /= 2) {
      if (tid < half) og_red_f[tid] = fmaxf(og_red_f[tid], og_red_f[tid + half]);
      __syncthreads();
    }
    zmax = og_red_f[0];
    __syncthreads();
    // top-k: the key of the k-th largest z, bit by bit from the top (keys order like floats)
    unsigned int kth = 0;
    const bool use_k = top_k > 0 && top_k < n;
    if (use_k) {
      for (int bit = 31; bit >= 0; --bit) {
        const unsigned int candidate = kth | (1u << bit);
        unsigned int count = 0;
        for (long long i = tid; i < n; i += THREADS) {
          unsigned int b = __float_as_uint(OG_LOAD(i) / temperature + 0.0f);  // -0 is +0
          unsigned int key = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
          count += key >= candidate;
        }
        og_red_u[tid] = count;
        __syncthreads();
        for (unsigned int half = THREADS / 2; half > 0; half /= 2) {
          if (tid < half) og_red_u[tid] += og_red_u[tid + half];
          __syncthreads();
        }
        if ((long long)og_red_u[0] >= top_k) kth = candidate;
        __syncthreads();
      }
    }
#define OG_KEPT_W(i, w) do { \
      float z_ = OG_LOAD(i) / temperature; \
      unsigned int b_ = __float_as_uint(z_ + 0.0f); \
      unsigned int key_ = (b_ & 0x80000000u) ? ~b_ : (b_ | 0x80000000u); \
      w = (!use_k || key_ >= kth) ? expf(z_ - zmax) : 0.0f; \
    } while (0)
    // the kept mass
    float total = 0.0f;
    for (long long i = tid; i < n; i += THREADS) { float w; OG_KEPT_W(i, w); total += w; }
    og_red_f[tid] = total;
    __syncthreads();
    for (unsigned int half = THREADS / 2; half > 0; half /= 2) {
      if (tid < half) og_red_f[tid] += og_red_f[tid + half];
      __syncthreads();
    }
    total = og_red_f[0];
    __syncthreads();
    // top-p: the largest t (as bits; w >= 0 orders like its bits) with mass(w >= t) >= p * total
    unsigned int pth = 0;
    const bool use_p = top_p < 1.0f;
    if (use_p) {
      const float needed = top_p * total;
      for (int bit = 30; bit >= 0; --bit) {
        const unsigned int candidate = pth | (1u << bit);
        float mass = 0.0f;
        for (long long i = tid; i < n; i += THREADS) {
          float w; OG_KEPT_W(i, w);
          if (w > 0.0f && __float_as_uint(w) >= candidate) mass += w;
        }
        og_red_f[tid] = mass;
        __syncthreads();
        for (unsigned int half = THREADS / 2; half > 0; half /= 2) {
          if (tid < half) og_red_f[tid] += og_red_f[tid + half];
          __syncthreads();
        }
        if (og_red_f[0] >= needed) pth = candidate;
        __syncthreads();
      }
    }
#define OG_FINAL_W(i, w) do { OG_KEPT_W(i, w); if (use_p && __float_as_uint(w) < pth) w = 0.0f; } \
    while (0)
    // the draw: SplitMix64 of the seed, then of that xor the step; 24 bits
    unsigned long long x = seed + 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x = x ^ (x >> 31);
    x = (x ^ (unsigned long long)step) + 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    x = x ^ (x >> 31);
    const float u = (float)(x >> 40) / 16777216.0f;
    // each thread's contiguous part: its kept mass and its last kept index
    const long long part = (n + THREADS - 1) / THREADS;
    const long long begin = (long long)tid * part;
    const long long end = begin + part < n ? begin + part : n;
    float mine = 0.0f; long long last = -1;
    for (long long i = begin; i < end; ++i) {
      float w; OG_FINAL_W(i, w);
      if (w > 0.0f) { mine += w; last = i; }
    }
    og_red_f[tid] = mine; og_red_i[tid] = last;
    __syncthreads();
    if (tid == 0) {  // the parts in order: their running sums, the total, the last kept index
      float running = 0.0f; long long final_kept = -1;
      for (unsigned int t = 0; t < THREADS; ++t) {
        float s = og_red_f[t]; og_red_f[t] = running; running += s;
        if (og_red_i[t] > final_kept) final_kept = og_red_i[t];
      }
      og_red_i[0] = final_kept;
      og_red_u[0] = __float_as_uint(running);
    }
    __syncthreads();
    const long long final_kept = og_red_i[0];
    const float target = u * __uint_as_float(og_red_u[0]);
    __syncthreads();
    og_red_i[tid] = -1;
    float running = og_red_f[tid];
    if (running <= target && running + mine > target) {
      for (long long i = begin; i < end; ++i) {
        float w; OG_FINAL_W(i, w);
        running += w;
        if (w > 0.0f && running > target) { og_red_i[tid] = i; break; }
      }
    }
    __syncthreads();
    if (tid == 0) {
      chosen = final_kept;  // u * total rounded up to the total: the last kept token
      for (unsigned int t = 0; t < THREADS; ++t) if (og_red_i[t] >= 0) { chosen = og_red_i[t]; break; }
    }
#undef OG_KEPT_W
#undef OG_FINAL_W
  }
  if (tid == 0) {
    token[0] = chosen;
    history[step % capacity] = (int)chosen;
    state[0] = step + 1;
    ADVANCE_POSITION
    ADVANCE_KV_LEN
  }
"""
