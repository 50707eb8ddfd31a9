
extern "C" __global__ void og_attention_decode_wide_270dddb769cc(float* out, const float* in0, const float* in1, const float* in2, const int* in3) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const unsigned int c = blockIdx.x, hr = blockIdx.y, bz = blockIdx.z;
  const unsigned int hk = hr / 2u, rt = hr % 2u;
  const unsigned int li = threadIdx.x % 4u, kid = threadIdx.x / 4u;
  const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const unsigned long long kvoff = (unsigned long long)(bz * 2u + hk) * 256ull;
  const bool vec_ok = (((unsigned long long)in0 | (unsigned long long)in1 | (unsigned long long)in2) & 15ull) == 0ull;
  const unsigned int k0 = c * 64u;
  const unsigned int kc1 = og_min(k0 + 64u, 16u);
  uint4 kw[1], vw[1];
  {
    const unsigned int p = 0u;
    if (vec_ok) {
      #pragma unroll
      for (int u = 0; u < 1; ++u) {
        const unsigned int j = k0 + (p * 1u + (unsigned int)u) * 64u + kid;
        kw[u] = uint4{0u, 0u, 0u, 0u}; vw[u] = uint4{0u, 0u, 0u, 0u};
        if (j < kc1) {
          kw[u] = *reinterpret_cast<const uint4*>(in1 + kvoff + (unsigned long long)j * 16u + li * 4u);
          vw[u] = *reinterpret_cast<const uint4*>(in2 + kvoff + (unsigned long long)j * 16u + li * 4u);
        }
      }
    } else {
      #pragma unroll
      for (int u = 0; u < 1; ++u) {
        const unsigned int j = k0 + (p * 1u + (unsigned int)u) * 64u + kid;
        kw[u] = uint4{0u, 0u, 0u, 0u}; vw[u] = uint4{0u, 0u, 0u, 0u};
        if (j < kc1) {
          kw[u].x = __float_as_uint(in1[kvoff + (unsigned long long)j * 16u + li * 4u + 0u]);
          vw[u].x = __float_as_uint(in2[kvoff + (unsigned long long)j * 16u + li * 4u + 0u]);
          kw[u].y = __float_as_uint(in1[kvoff + (unsigned long long)j * 16u + li * 4u + 1u]);
          vw[u].y = __float_as_uint(in2[kvoff + (unsigned long long)j * 16u + li * 4u + 1u]);
          kw[u].z = __float_as_uint(in1[kvoff + (unsigned long long)j * 16u + li * 4u + 2u]);
          vw[u].z = __float_as_uint(in2[kvoff + (unsigned long long)j * 16u + li * 4u + 2u]);
          kw[u].w = __float_as_uint(in1[kvoff + (unsigned long long)j * 16u + li * 4u + 3u]);
          vw[u].w = __float_as_uint(in2[kvoff + (unsigned long long)j * 16u + li * 4u + 3u]);
        }
      }
    }
  }
  long long Lx = og_min((long long)in3[0], 16LL);
  if (Lx < 0) Lx = 0;
  const unsigned int L = (unsigned int)Lx;
  auto qoff_of = [&](unsigned int gr) -> unsigned long long {
    const unsigned int h = hk * 2u + gr / 1u, i = gr % 1u;
    return ((unsigned long long)(bz * 4u + h) * 1u + i) * 16u;
  };
  float qv[1][4];
  unsigned int lim[1];
  unsigned int kend = 0u;
  #pragma unroll
  for (int r = 0; r < 1; ++r) {
    const unsigned int gr = rt * 1u + r;
    const bool active = gr < 2u;
    long long lm = active ? (long long)L : 0LL;
    if (active) lm = og_min(lm, og_min((long long)(L), ((long long)(L) - 1LL + (long long)(gr % 1u)) + 1LL));
    if (lm < 0) lm = 0;
    lim[r] = (unsigned int)lm;
    kend = og_max(kend, lim[r]);
    const unsigned long long qo = (active ? qoff_of(gr) : 0ull) + li * 4u;
    if (vec_ok) {
      const uint4 qw = *reinterpret_cast<const uint4*>(in0 + qo);
      qv[r][0] = __uint_as_float(qw.x);
      qv[r][1] = __uint_as_float(qw.y);
      qv[r][2] = __uint_as_float(qw.z);
      qv[r][3] = __uint_as_float(qw.w);
      #pragma unroll
      for (int k = 0; k < 4; ++k) if (!active) qv[r][k] = 0.0f;
    } else {
      #pragma unroll
      for (int k = 0; k < 4; ++k)
        qv[r][k] = active ? in0[qo + k] : 0.0f;
    }
  }
  const unsigned int kv1 = og_min(kc1, kend);
  float m[1], l[1], acc[1][4];
  #pragma unroll
  for (int r = 0; r < 1; ++r) {
    m[r] = __int_as_float(0xff800000); l[r] = 0.0f;
    #pragma unroll
    for (int k = 0; k < 4; ++k) acc[r][k] = 0.0f;
  }
  __shared__ float og_pm[2][8][1];
  for (unsigned int p = 0; p < 1u; ++p) {
    if (p > 0u && k0 + p * 64u >= kv1) break;
    if (p > 0u) {
      if (vec_ok) {
        #pragma unroll
        for (int u = 0; u < 1; ++u) {
          const unsigned int j = k0 + (p * 1u + (unsigned int)u) * 64u + kid;
          kw[u] = uint4{0u, 0u, 0u, 0u}; vw[u] = uint4{0u, 0u, 0u, 0u};
          if (j < kv1) {
            kw[u] = *reinterpret_cast<const uint4*>(in1 + kvoff + (unsigned long long)j * 16u + li * 4u);
            vw[u] = *reinterpret_cast<const uint4*>(in2 + kvoff + (unsigned long long)j * 16u + li * 4u);
          }
        }
      } else {
        #pragma unroll
        for (int u = 0; u < 1; ++u) {
          const unsigned int j = k0 + (p * 1u + (unsigned int)u) * 64u + kid;
          kw[u] = uint4{0u, 0u, 0u, 0u}; vw[u] = uint4{0u, 0u, 0u, 0u};
          if (j < kv1) {
            kw[u].x = __float_as_uint(in1[kvoff + (unsigned long long)j * 16u + li * 4u + 0u]);
            vw[u].x = __float_as_uint(in2[kvoff + (unsigned long long)j * 16u + li * 4u + 0u]);
            kw[u].y = __float_as_uint(in1[kvoff + (unsigned long long)j * 16u + li * 4u + 1u]);
            vw[u].y = __float_as_uint(in2[kvoff + (unsigned long long)j * 16u + li * 4u + 1u]);
            kw[u].z = __float_as_uint(in1[kvoff + (unsigned long long)j * 16u + li * 4u + 2u]);
            vw[u].z = __float_as_uint(in2[kvoff + (unsigned long long)j * 16u + li * 4u + 2u]);
            kw[u].w = __float_as_uint(in1[kvoff + (unsigned long long)j * 16u + li * 4u + 3u]);
            vw[u].w = __float_as_uint(in2[kvoff + (unsigned long long)j * 16u + li * 4u + 3u]);
          }
        }
      }
    }
    #pragma unroll
    for (int u = 0; u < 1; ++u)
      if (k0 + (p * 1u + (unsigned int)u) * 64u + kid >= kend) vw[u] = uint4{0u, 0u, 0u, 0u};
    float sc[1][1];
    #pragma unroll
    for (int u = 0; u < 1; ++u) {
      const unsigned int j = k0 + (p * 1u + (unsigned int)u) * 64u + kid;
      float kf[4];
      kf[0] = __uint_as_float(kw[u].x);
      kf[1] = __uint_as_float(kw[u].y);
      kf[2] = __uint_as_float(kw[u].z);
      kf[3] = __uint_as_float(kw[u].w);
      #pragma unroll
      for (int r = 0; r < 1; ++r) {
        float dot = 0.0f;
        #pragma unroll
        for (int k = 0; k < 4; ++k) dot += qv[r][k] * kf[k];
        for (int o = 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        sc[r][u] = (j < kc1 && j < lim[r]) ? dot * 2.500000000e-01f : __int_as_float(0xff800000);
      }
    }
    #pragma unroll
    for (int r = 0; r < 1; ++r) {
      float t = sc[r][0];
      #pragma unroll
      for (int u = 1; u < 1; ++u) t = og_max(t, sc[r][u]);
      for (int o = 4; o < 32; o <<= 1) t = og_max(t, __shfl_xor_sync(0xffffffffu, t, o));
      if (lane == 0u) og_pm[p & 1u][warp][r] = t;
    }
    __syncthreads();
    #pragma unroll
    for (int r = 0; r < 1; ++r) {
      float mx = m[r];
      #pragma unroll
      for (int w = 0; w < 8; ++w) mx = og_max(mx, og_pm[p & 1u][w][r]);
      const float corr = mx == __int_as_float(0xff800000) ? 1.0f : expf(m[r] - mx);
      l[r] *= corr;
      #pragma unroll
      for (int k = 0; k < 4; ++k) acc[r][k] *= corr;
      m[r] = mx;
    }
    #pragma unroll
    for (int u = 0; u < 1; ++u) {
      float vf[4];
      vf[0] = __uint_as_float(vw[u].x);
      vf[1] = __uint_as_float(vw[u].y);
      vf[2] = __uint_as_float(vw[u].z);
      vf[3] = __uint_as_float(vw[u].w);
      #pragma unroll
      for (int r = 0; r < 1; ++r) {
        const float pr = sc[r][u] == __int_as_float(0xff800000) ? 0.0f : expf(sc[r][u] - m[r]);
        l[r] += pr;
        #pragma unroll
        for (int k = 0; k < 4; ++k) acc[r][k] += pr * vf[k];
      }
    }
  }
  #pragma unroll
  for (int r = 0; r < 1; ++r) {
    for (int o = 4; o < 32; o <<= 1) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], o);
      #pragma unroll
      for (int k = 0; k < 4; ++k)
        acc[r][k] += __shfl_xor_sync(0xffffffffu, acc[r][k], o);
    }
  }
  __shared__ float og_l[8][1];
  __shared__ float og_a[8][1][16];
  if (lane < 4u) {
    #pragma unroll
    for (int r = 0; r < 1; ++r) {
      #pragma unroll
      for (int k = 0; k < 4; ++k) og_a[warp][r][li * 4u + k] = acc[r][k];
      if (lane == 0u) og_l[warp][r] = l[r];
    }
  }
  __syncthreads();
  for (unsigned int t = threadIdx.x; t < 16u; t += 256u) {
    const unsigned int r = t / 16u, dd = t % 16u;
    float Ls = 0.0f, A = 0.0f;
    #pragma unroll
    for (int w = 0; w < 8; ++w) { Ls += og_l[w][r]; A += og_a[w][r][dd]; }
    const unsigned int gr = rt * 1u + r;
    if (gr < 2u) out[qoff_of(gr) + dd] = (float)(Ls > 0.0f ? A / Ls : 0.0f);
  }
}
