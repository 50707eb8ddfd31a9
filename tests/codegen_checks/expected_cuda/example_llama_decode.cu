
extern "C" __global__ void og_attention_decode_wide_2655e3a9b448(float* out, const float* in0, const float* in1, const float* in2, const int* in3) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const unsigned int c = blockIdx.x, hr = blockIdx.y, bz = blockIdx.z;
  const unsigned int hk = hr / 2u, rt = hr % 2u;
  const unsigned int li = threadIdx.x % 4u, kid = threadIdx.x / 4u;
  const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const unsigned long long kvoff = (unsigned long long)(bz * 2u + hk) * 512ull;
  const bool vec_ok = (((unsigned long long)in0 | (unsigned long long)in1 | (unsigned long long)in2) & 15ull) == 0ull;
  const unsigned int k0 = c * 64u;
  const unsigned int kc1 = og_min(k0 + 64u, 32u);
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
  long long Lx = og_min((long long)in3[0], 32LL);
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

extern "C" __global__ void __launch_bounds__(256, 2) og_gemv_8012817e7c4e(float* out, const float* in0, const float* in1, const float* in2) {
  const unsigned int tile = blockIdx.x, split = blockIdx.y;
  const unsigned int cg = threadIdx.x % 8u, rl = threadIdx.x / 8u;
  const unsigned int n0 = tile * 32u + cg * 4u;
  const unsigned int k0 = split * 64u;
  const unsigned int k1 = min(64u, k0 + 64u);
  uint4 og_wv0[1][8];
  {
    const unsigned int kb = k0 + rl;
    if (n0 < 64u) {
      if (kb + 0u < k1) { og_wv0[0][0] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 0u) * 64u); }
      if (kb + 32u < k1) { og_wv0[0][1] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 32u) * 64u); }
      if (kb + 64u < k1) { og_wv0[0][2] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 64u) * 64u); }
      if (kb + 96u < k1) { og_wv0[0][3] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 96u) * 64u); }
      if (kb + 128u < k1) { og_wv0[0][4] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 128u) * 64u); }
      if (kb + 160u < k1) { og_wv0[0][5] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 160u) * 64u); }
      if (kb + 192u < k1) { og_wv0[0][6] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 192u) * 64u); }
      if (kb + 224u < k1) { og_wv0[0][7] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 224u) * 64u); }
    }
  }
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  float acc[1][4];
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) acc[i][v] = 0.0f;
  }
  if (n0 < 64u) {
    unsigned int kb = k0 + rl;
    {  // the first batch, loaded before the dependency wait
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(og_wv0[0][j].x); wf[0][1] = __uint_as_float(og_wv0[0][j].y);
          wf[0][2] = __uint_as_float(og_wv0[0][j].z); wf[0][3] = __uint_as_float(og_wv0[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = in0[i * 64u + kk];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
    kb += 256u;
    for (; kb + 224u < k1; kb += 256u) {
      uint4 wv[1][8];
      wv[0][0] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 0u) * 64u);
      wv[0][1] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 32u) * 64u);
      wv[0][2] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 64u) * 64u);
      wv[0][3] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 96u) * 64u);
      wv[0][4] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 128u) * 64u);
      wv[0][5] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 160u) * 64u);
      wv[0][6] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 192u) * 64u);
      wv[0][7] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 224u) * 64u);
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        float wf[1][4];
        wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
        wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
          const float xv = in0[i * 64u + kk];
          #pragma unroll
          for (int q = 0; q < 1; ++q) {
            #pragma unroll
            for (int v = 0; v < 4; ++v)
              acc[q * 1 + i][v] += xv * wf[q][v];
          }
        }
      }
    }
    if (kb < k1) {  // the rows left, fewer than a batch: guarded loads, all in flight
      uint4 wv[1][8];
      if (kb + 0u < k1) { wv[0][0] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 0u) * 64u); }
      if (kb + 32u < k1) { wv[0][1] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 32u) * 64u); }
      if (kb + 64u < k1) { wv[0][2] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 64u) * 64u); }
      if (kb + 96u < k1) { wv[0][3] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 96u) * 64u); }
      if (kb + 128u < k1) { wv[0][4] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 128u) * 64u); }
      if (kb + 160u < k1) { wv[0][5] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 160u) * 64u); }
      if (kb + 192u < k1) { wv[0][6] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 192u) * 64u); }
      if (kb + 224u < k1) { wv[0][7] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 224u) * 64u); }
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
          wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = in0[i * 64u + kk];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
  }
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) {
      for (int o = 8; o < 32; o <<= 1) acc[i][v] += __shfl_xor_sync(0xffffffffu, acc[i][v], o);
    }
  }
  __shared__ float og_red[8][1][32];
  const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  if (lane < 8u) {
    #pragma unroll
    for (int i = 0; i < 1; ++i) {
      #pragma unroll
      for (int v = 0; v < 4; ++v) og_red[warp][i][lane * 4u + v] = acc[i][v];
    }
  }
  __syncthreads();
  for (unsigned int t = threadIdx.x; t < 32u; t += 256u) {
    const unsigned int i = t / 32u, c = t % 32u;
    const unsigned int col = tile * 32u + c;
    if (col >= 64u) continue;
    float val = 0.0f;
    #pragma unroll
  for (int w = 0; w < 8; ++w) val += og_red[w][i][c];
    const unsigned int oi = i * 64u + col;
    const float a = val;
    const float q2 = in2[oi];
    const float v0 = (q2 + a);
    out[oi] = (float)(v0);
  }
}

extern "C" __global__ void __launch_bounds__(256, 2) og_gemv_a692fd8d7291(float* out, const float* in0, const float* in1, const float* in2) {
  const unsigned int tile = blockIdx.x, split = blockIdx.y;
  const unsigned int cg = threadIdx.x % 8u, rl = threadIdx.x / 8u;
  const unsigned int n0 = tile * 32u + cg * 4u;
  const unsigned int k0 = split * 64u;
  const unsigned int k1 = min(64u, k0 + 64u);
  uint4 og_wv0[1][8];
  {
    const unsigned int kb = k0 + rl;
    if (n0 < 128u) {
      if (kb + 0u < k1) { og_wv0[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 128u); }
      if (kb + 32u < k1) { og_wv0[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 128u); }
      if (kb + 64u < k1) { og_wv0[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 128u); }
      if (kb + 96u < k1) { og_wv0[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 128u); }
      if (kb + 128u < k1) { og_wv0[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 128u); }
      if (kb + 160u < k1) { og_wv0[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 128u); }
      if (kb + 192u < k1) { og_wv0[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 128u); }
      if (kb + 224u < k1) { og_wv0[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 128u); }
    }
  }
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  auto og_x = [&](unsigned int i, unsigned int j) -> float {
    const unsigned int xi = i * 64u + j;
    const float r0 = in0[xi];
    return (float)r0;
  };
  float og_k[1], og_mu[1], og_r[1];
  for (int i = 0; i < 1; ++i) {
    float ss = 0.0f;
    #pragma unroll
    for (unsigned int u = 0; u < 2u; ++u) { const unsigned int j = (threadIdx.x & 31u) + u * 32u; { const float v = og_x(i, j); ss += v * v; } }
    ss = og_warp_sum(ss);
    og_k[i] = 0.0f;
    og_mu[i] = 0.0f;
    og_r[i] = sqrtf(ss / (float)64 + 9.999999975e-07f);
  }
  auto og_row = [&](unsigned int i, unsigned int j) -> float {
    const unsigned int xi = i * 64u + j;
    const float r0 = in0[xi];
    const float r1 = in1[xi];
    const float og_n = (float)(og_x(i, j) / og_r[i] * r1);
    return (float)og_n;
  };
  __shared__ float og_xs[64];
  for (unsigned int t = threadIdx.x; t < 64u; t += 256u) {
    const unsigned int i = t / 64u, kk = k0 + t % 64u;
    if (kk < k1) og_xs[t] = (float)(og_row(i, kk));
  }
  __syncthreads();
  float acc[1][4];
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) acc[i][v] = 0.0f;
  }
  if (n0 < 128u) {
    unsigned int kb = k0 + rl;
    {  // the first batch, loaded before the dependency wait
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(og_wv0[0][j].x); wf[0][1] = __uint_as_float(og_wv0[0][j].y);
          wf[0][2] = __uint_as_float(og_wv0[0][j].z); wf[0][3] = __uint_as_float(og_wv0[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_xs[i * 64u + (kk - k0)];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
    kb += 256u;
    for (; kb + 224u < k1; kb += 256u) {
      uint4 wv[1][8];
      wv[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 128u);
      wv[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 128u);
      wv[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 128u);
      wv[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 128u);
      wv[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 128u);
      wv[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 128u);
      wv[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 128u);
      wv[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 128u);
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        float wf[1][4];
        wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
        wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
          const float xv = og_xs[i * 64u + (kk - k0)];
          #pragma unroll
          for (int q = 0; q < 1; ++q) {
            #pragma unroll
            for (int v = 0; v < 4; ++v)
              acc[q * 1 + i][v] += xv * wf[q][v];
          }
        }
      }
    }
    if (kb < k1) {  // the rows left, fewer than a batch: guarded loads, all in flight
      uint4 wv[1][8];
      if (kb + 0u < k1) { wv[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 128u); }
      if (kb + 32u < k1) { wv[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 128u); }
      if (kb + 64u < k1) { wv[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 128u); }
      if (kb + 96u < k1) { wv[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 128u); }
      if (kb + 128u < k1) { wv[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 128u); }
      if (kb + 160u < k1) { wv[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 128u); }
      if (kb + 192u < k1) { wv[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 128u); }
      if (kb + 224u < k1) { wv[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 128u); }
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
          wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_xs[i * 64u + (kk - k0)];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
  }
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) {
      for (int o = 8; o < 32; o <<= 1) acc[i][v] += __shfl_xor_sync(0xffffffffu, acc[i][v], o);
    }
  }
  __shared__ float og_red[8][1][32];
  const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  if (lane < 8u) {
    #pragma unroll
    for (int i = 0; i < 1; ++i) {
      #pragma unroll
      for (int v = 0; v < 4; ++v) og_red[warp][i][lane * 4u + v] = acc[i][v];
    }
  }
  __syncthreads();
  for (unsigned int t = threadIdx.x; t < 32u; t += 256u) {
    const unsigned int i = t / 32u, c = t % 32u;
    const unsigned int col = tile * 32u + c;
    if (col >= 128u) continue;
    float val = 0.0f;
    #pragma unroll
  for (int w = 0; w < 8; ++w) val += og_red[w][i][c];
    const unsigned int oi = i * 128u + col;
    const float a = val;
    out[oi] = (float)(a);
  }
}

extern "C" __global__ void __launch_bounds__(256, 2) og_gemv_bc3bb022a82c(float* out, const float* in0, const float* in1, const float* in2, const float* in3) {
  const unsigned int tile = blockIdx.x, split = blockIdx.y;
  const unsigned int cg = threadIdx.x % 8u, rl = threadIdx.x / 8u;
  const unsigned int n0 = tile * 32u + cg * 4u;
  const unsigned int k0 = split * 128u;
  const unsigned int k1 = min(128u, k0 + 128u);
  uint4 og_wv0[1][8];
  {
    const unsigned int kb = k0 + rl;
    if (n0 < 64u) {
      if (kb + 0u < k1) { og_wv0[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 64u); }
      if (kb + 32u < k1) { og_wv0[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 64u); }
      if (kb + 64u < k1) { og_wv0[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 64u); }
      if (kb + 96u < k1) { og_wv0[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 64u); }
      if (kb + 128u < k1) { og_wv0[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 64u); }
      if (kb + 160u < k1) { og_wv0[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 64u); }
      if (kb + 192u < k1) { og_wv0[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 64u); }
      if (kb + 224u < k1) { og_wv0[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 64u); }
    }
  }
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  auto og_row = [&](unsigned int i, unsigned int j) -> float {
    const unsigned int xi = i * 128u + j;
    const float r0 = in0[xi];
    const float r1 = in1[xi];
    const float e0 = (r0 * r1);
    return (float)e0;
  };
  __shared__ float og_xs[128];
  for (unsigned int t = threadIdx.x; t < 128u; t += 256u) {
    const unsigned int i = t / 128u, kk = k0 + t % 128u;
    if (kk < k1) og_xs[t] = (float)(og_row(i, kk));
  }
  __syncthreads();
  float acc[1][4];
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) acc[i][v] = 0.0f;
  }
  if (n0 < 64u) {
    unsigned int kb = k0 + rl;
    {  // the first batch, loaded before the dependency wait
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(og_wv0[0][j].x); wf[0][1] = __uint_as_float(og_wv0[0][j].y);
          wf[0][2] = __uint_as_float(og_wv0[0][j].z); wf[0][3] = __uint_as_float(og_wv0[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_xs[i * 128u + (kk - k0)];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
    kb += 256u;
    for (; kb + 224u < k1; kb += 256u) {
      uint4 wv[1][8];
      wv[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 64u);
      wv[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 64u);
      wv[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 64u);
      wv[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 64u);
      wv[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 64u);
      wv[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 64u);
      wv[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 64u);
      wv[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 64u);
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        float wf[1][4];
        wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
        wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
          const float xv = og_xs[i * 128u + (kk - k0)];
          #pragma unroll
          for (int q = 0; q < 1; ++q) {
            #pragma unroll
            for (int v = 0; v < 4; ++v)
              acc[q * 1 + i][v] += xv * wf[q][v];
          }
        }
      }
    }
    if (kb < k1) {  // the rows left, fewer than a batch: guarded loads, all in flight
      uint4 wv[1][8];
      if (kb + 0u < k1) { wv[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 64u); }
      if (kb + 32u < k1) { wv[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 64u); }
      if (kb + 64u < k1) { wv[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 64u); }
      if (kb + 96u < k1) { wv[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 64u); }
      if (kb + 128u < k1) { wv[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 64u); }
      if (kb + 160u < k1) { wv[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 64u); }
      if (kb + 192u < k1) { wv[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 64u); }
      if (kb + 224u < k1) { wv[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 64u); }
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
          wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_xs[i * 128u + (kk - k0)];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
  }
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) {
      for (int o = 8; o < 32; o <<= 1) acc[i][v] += __shfl_xor_sync(0xffffffffu, acc[i][v], o);
    }
  }
  __shared__ float og_red[8][1][32];
  const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  if (lane < 8u) {
    #pragma unroll
    for (int i = 0; i < 1; ++i) {
      #pragma unroll
      for (int v = 0; v < 4; ++v) og_red[warp][i][lane * 4u + v] = acc[i][v];
    }
  }
  __syncthreads();
  for (unsigned int t = threadIdx.x; t < 32u; t += 256u) {
    const unsigned int i = t / 32u, c = t % 32u;
    const unsigned int col = tile * 32u + c;
    if (col >= 64u) continue;
    float val = 0.0f;
    #pragma unroll
  for (int w = 0; w < 8; ++w) val += og_red[w][i][c];
    const unsigned int oi = i * 64u + col;
    const float a = val;
    const float q3 = in3[oi];
    const float v0 = (q3 + a);
    out[oi] = (float)(v0);
  }
}

extern "C" __global__ void og_get_rows_224ada12257e(unsigned int* out, const unsigned int* in0, const int* in1) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  if (((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in0)) & 15ull) == 0ull) {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 16u; i += (unsigned int)gridDim.x * blockDim.x) {
      const long long row = (long long)in1[i / 16u];
      if (row >= 0 && row < 128LL) reinterpret_cast<uint4*>(out)[i] = reinterpret_cast<const uint4*>(in0)[(unsigned int)row * 16u + i % 16u];
      else reinterpret_cast<uint4*>(out)[i] = uint4{};
    }
  } else {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 64u; i += (unsigned int)gridDim.x * blockDim.x) {
      const long long row = (long long)in1[i / 64u];
      if (row >= 0 && row < 128LL) out[i] = in0[(unsigned int)row * 64u + i % 64u];
      else out[i] = (unsigned int)0;
    }
  }
}

extern "C" __global__ void og_kv_write_87409c663966(unsigned int* out, const unsigned int* in0, const unsigned int* in1, const int* in2) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const long long pos = (long long)in2[0];
  const bool ok = pos >= 0 && pos <= 31LL;
  if (((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in0) | reinterpret_cast<unsigned long long>(in1)) & 15ull) == 0ull) {
    const uint4* src0 = reinterpret_cast<const uint4*>(in0);
    const uint4* src1 = reinterpret_cast<const uint4*>(in1);
    uint4* dst = reinterpret_cast<uint4*>(out);
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 256u; i += (unsigned int)gridDim.x * blockDim.x) {
      const unsigned int row = i / 4u, r = row % 32u, c = i % 4u;
      const long long k = (long long)r - pos;
      const uint4 old = src0[i];
      dst[i] = (ok && k >= 0 && k < 1LL) ? src1[((row / 32u) * 1u + (unsigned int)k) * 4u + c] : old;
    }
    return;
  }
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 1024u; i += (unsigned int)gridDim.x * blockDim.x) {
    const unsigned int bh = i / 512u, r = (i / 16u) % 32u, c = i % 16u;
    const long long k = (long long)r - pos;
    out[i] = (ok && k >= 0 && k < 1LL) ? in1[(bh * 1u + (unsigned int)k) * 16u + c] : in0[i];
  }
}

__device__ __forceinline__ void og_gemv_e7fcda7ee547_part(const dim3 og_block_idx, const dim3 og_grid_dim, float* out, const float* in0, const float* in1, const float* in2, const int* in3) {
  const unsigned int tile = og_block_idx.x, split = og_block_idx.y;
  const unsigned int cg = threadIdx.x % 8u, rl = threadIdx.x / 8u;
  const unsigned int n0 = tile * 32u + cg * 4u;
  const unsigned int k0 = split * 64u;
  const unsigned int k1 = min(64u, k0 + 64u);
  const double og_rpos = (double)in3[(threadIdx.x / 32u) % 1u];
  uint4 og_wv0[1][8];
  {
    const unsigned int kb = k0 + rl;
    if (n0 < 64u) {
      if (kb + 0u < k1) { og_wv0[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 64u); }
      if (kb + 32u < k1) { og_wv0[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 64u); }
      if (kb + 64u < k1) { og_wv0[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 64u); }
      if (kb + 96u < k1) { og_wv0[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 64u); }
      if (kb + 128u < k1) { og_wv0[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 64u); }
      if (kb + 160u < k1) { og_wv0[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 64u); }
      if (kb + 192u < k1) { og_wv0[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 64u); }
      if (kb + 224u < k1) { og_wv0[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 64u); }
    }
  }
  float og_rc = 1.0f, og_rs = 0.0f;
  if (threadIdx.x < 32u) {
    const unsigned int c = threadIdx.x % 32u;
    const unsigned int col = tile * 32u + c;
    const unsigned int og_k = col % 8u;
    const double inv_freq = pow(10000.0, -2.0 * (double)og_k / 16.0);
    const double angle = og_rpos * inv_freq;
    const float og_c = (float)cos(angle), og_s = (float)sin(angle);
    og_rc = og_c; og_rs = og_s;
  }
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  auto og_x = [&](unsigned int i, unsigned int j) -> float {
    const unsigned int xi = i * 64u + j;
    const float r0 = in0[xi];
    return (float)r0;
  };
  float og_k[1], og_mu[1], og_r[1];
  for (int i = 0; i < 1; ++i) {
    float ss = 0.0f;
    #pragma unroll
    for (unsigned int u = 0; u < 2u; ++u) { const unsigned int j = (threadIdx.x & 31u) + u * 32u; { const float v = og_x(i, j); ss += v * v; } }
    ss = og_warp_sum(ss);
    og_k[i] = 0.0f;
    og_mu[i] = 0.0f;
    og_r[i] = sqrtf(ss / (float)64 + 9.999999975e-07f);
  }
  auto og_row = [&](unsigned int i, unsigned int j) -> float {
    const unsigned int xi = i * 64u + j;
    const float r0 = in0[xi];
    const float r1 = in1[xi];
    const float og_n = (float)(og_x(i, j) / og_r[i] * r1);
    return (float)og_n;
  };
  __shared__ float og_xs[64];
  for (unsigned int t = threadIdx.x; t < 64u; t += 256u) {
    const unsigned int i = t / 64u, kk = k0 + t % 64u;
    if (kk < k1) og_xs[t] = (float)(og_row(i, kk));
  }
  __syncthreads();
  float acc[1][4];
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) acc[i][v] = 0.0f;
  }
  if (n0 < 64u) {
    unsigned int kb = k0 + rl;
    {  // the first batch, loaded before the dependency wait
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(og_wv0[0][j].x); wf[0][1] = __uint_as_float(og_wv0[0][j].y);
          wf[0][2] = __uint_as_float(og_wv0[0][j].z); wf[0][3] = __uint_as_float(og_wv0[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_xs[i * 64u + (kk - k0)];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
    kb += 256u;
    for (; kb + 224u < k1; kb += 256u) {
      uint4 wv[1][8];
      wv[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 64u);
      wv[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 64u);
      wv[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 64u);
      wv[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 64u);
      wv[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 64u);
      wv[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 64u);
      wv[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 64u);
      wv[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 64u);
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        float wf[1][4];
        wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
        wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
          const float xv = og_xs[i * 64u + (kk - k0)];
          #pragma unroll
          for (int q = 0; q < 1; ++q) {
            #pragma unroll
            for (int v = 0; v < 4; ++v)
              acc[q * 1 + i][v] += xv * wf[q][v];
          }
        }
      }
    }
    if (kb < k1) {  // the rows left, fewer than a batch: guarded loads, all in flight
      uint4 wv[1][8];
      if (kb + 0u < k1) { wv[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 64u); }
      if (kb + 32u < k1) { wv[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 64u); }
      if (kb + 64u < k1) { wv[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 64u); }
      if (kb + 96u < k1) { wv[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 64u); }
      if (kb + 128u < k1) { wv[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 64u); }
      if (kb + 160u < k1) { wv[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 64u); }
      if (kb + 192u < k1) { wv[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 64u); }
      if (kb + 224u < k1) { wv[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 64u); }
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
          wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_xs[i * 64u + (kk - k0)];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
  }
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) {
      for (int o = 8; o < 32; o <<= 1) acc[i][v] += __shfl_xor_sync(0xffffffffu, acc[i][v], o);
    }
  }
  __shared__ float og_red[8][1][32];
  const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  if (lane < 8u) {
    #pragma unroll
    for (int i = 0; i < 1; ++i) {
      #pragma unroll
      for (int v = 0; v < 4; ++v) og_red[warp][i][lane * 4u + v] = acc[i][v];
    }
  }
  __syncthreads();
  for (unsigned int t = threadIdx.x; t < 32u; t += 256u) {
    const unsigned int i = t / 32u, c = t % 32u;
    const unsigned int col = tile * 32u + c;
    if (col >= 64u) continue;
    float val = 0.0f;
    #pragma unroll
  for (int w = 0; w < 8; ++w) val += og_red[w][i][c];
    float pval = 0.0f;
    #pragma unroll
  for (int w = 0; w < 8; ++w) pval += og_red[w][i][(c % 16u < 8u ? c + 8u : c - 8u)];
    float og_r = val;
    const float og_c = og_rc, og_s = og_rs;
    const float og_p = pval;
    og_r = col % 16u < 8u ? og_rotate_first(og_r, og_c, og_p, og_s) : og_rotate_second(og_r, og_c, og_p, og_s);
    out[i * 64u + col] = (float)(og_r);
  }
}

__device__ __forceinline__ void og_gemv_88e014c41368_part(const dim3 og_block_idx, const dim3 og_grid_dim, float* out, const float* in0, const float* in1, const float* in2, const int* in3) {
  const unsigned int tile = og_block_idx.x, split = og_block_idx.y;
  const unsigned int cg = threadIdx.x % 8u, rl = threadIdx.x / 8u;
  const unsigned int n0 = tile * 32u + cg * 4u;
  const unsigned int k0 = split * 64u;
  const unsigned int k1 = min(64u, k0 + 64u);
  const double og_rpos = (double)in3[(threadIdx.x / 32u) % 1u];
  uint4 og_wv0[1][8];
  {
    const unsigned int kb = k0 + rl;
    if (n0 < 32u) {
      if (kb + 0u < k1) { og_wv0[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 32u); }
      if (kb + 32u < k1) { og_wv0[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 32u); }
      if (kb + 64u < k1) { og_wv0[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 32u); }
      if (kb + 96u < k1) { og_wv0[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 32u); }
      if (kb + 128u < k1) { og_wv0[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 32u); }
      if (kb + 160u < k1) { og_wv0[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 32u); }
      if (kb + 192u < k1) { og_wv0[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 32u); }
      if (kb + 224u < k1) { og_wv0[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 32u); }
    }
  }
  float og_rc = 1.0f, og_rs = 0.0f;
  if (threadIdx.x < 32u) {
    const unsigned int c = threadIdx.x % 32u;
    const unsigned int col = tile * 32u + c;
    const unsigned int og_k = col % 8u;
    const double inv_freq = pow(10000.0, -2.0 * (double)og_k / 16.0);
    const double angle = og_rpos * inv_freq;
    const float og_c = (float)cos(angle), og_s = (float)sin(angle);
    og_rc = og_c; og_rs = og_s;
  }
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  auto og_x = [&](unsigned int i, unsigned int j) -> float {
    const unsigned int xi = i * 64u + j;
    const float r0 = in0[xi];
    return (float)r0;
  };
  float og_k[1], og_mu[1], og_r[1];
  for (int i = 0; i < 1; ++i) {
    float ss = 0.0f;
    #pragma unroll
    for (unsigned int u = 0; u < 2u; ++u) { const unsigned int j = (threadIdx.x & 31u) + u * 32u; { const float v = og_x(i, j); ss += v * v; } }
    ss = og_warp_sum(ss);
    og_k[i] = 0.0f;
    og_mu[i] = 0.0f;
    og_r[i] = sqrtf(ss / (float)64 + 9.999999975e-07f);
  }
  auto og_row = [&](unsigned int i, unsigned int j) -> float {
    const unsigned int xi = i * 64u + j;
    const float r0 = in0[xi];
    const float r1 = in1[xi];
    const float og_n = (float)(og_x(i, j) / og_r[i] * r1);
    return (float)og_n;
  };
  __shared__ float og_xs[64];
  for (unsigned int t = threadIdx.x; t < 64u; t += 256u) {
    const unsigned int i = t / 64u, kk = k0 + t % 64u;
    if (kk < k1) og_xs[t] = (float)(og_row(i, kk));
  }
  __syncthreads();
  float acc[1][4];
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) acc[i][v] = 0.0f;
  }
  if (n0 < 32u) {
    unsigned int kb = k0 + rl;
    {  // the first batch, loaded before the dependency wait
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(og_wv0[0][j].x); wf[0][1] = __uint_as_float(og_wv0[0][j].y);
          wf[0][2] = __uint_as_float(og_wv0[0][j].z); wf[0][3] = __uint_as_float(og_wv0[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_xs[i * 64u + (kk - k0)];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
    kb += 256u;
    for (; kb + 224u < k1; kb += 256u) {
      uint4 wv[1][8];
      wv[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 32u);
      wv[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 32u);
      wv[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 32u);
      wv[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 32u);
      wv[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 32u);
      wv[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 32u);
      wv[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 32u);
      wv[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 32u);
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        float wf[1][4];
        wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
        wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
          const float xv = og_xs[i * 64u + (kk - k0)];
          #pragma unroll
          for (int q = 0; q < 1; ++q) {
            #pragma unroll
            for (int v = 0; v < 4; ++v)
              acc[q * 1 + i][v] += xv * wf[q][v];
          }
        }
      }
    }
    if (kb < k1) {  // the rows left, fewer than a batch: guarded loads, all in flight
      uint4 wv[1][8];
      if (kb + 0u < k1) { wv[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 32u); }
      if (kb + 32u < k1) { wv[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 32u); }
      if (kb + 64u < k1) { wv[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 32u); }
      if (kb + 96u < k1) { wv[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 32u); }
      if (kb + 128u < k1) { wv[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 32u); }
      if (kb + 160u < k1) { wv[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 32u); }
      if (kb + 192u < k1) { wv[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 32u); }
      if (kb + 224u < k1) { wv[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 32u); }
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
          wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_xs[i * 64u + (kk - k0)];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
  }
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) {
      for (int o = 8; o < 32; o <<= 1) acc[i][v] += __shfl_xor_sync(0xffffffffu, acc[i][v], o);
    }
  }
  __shared__ float og_red[8][1][32];
  const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  if (lane < 8u) {
    #pragma unroll
    for (int i = 0; i < 1; ++i) {
      #pragma unroll
      for (int v = 0; v < 4; ++v) og_red[warp][i][lane * 4u + v] = acc[i][v];
    }
  }
  __syncthreads();
  for (unsigned int t = threadIdx.x; t < 32u; t += 256u) {
    const unsigned int i = t / 32u, c = t % 32u;
    const unsigned int col = tile * 32u + c;
    if (col >= 32u) continue;
    float val = 0.0f;
    #pragma unroll
  for (int w = 0; w < 8; ++w) val += og_red[w][i][c];
    float pval = 0.0f;
    #pragma unroll
  for (int w = 0; w < 8; ++w) pval += og_red[w][i][(c % 16u < 8u ? c + 8u : c - 8u)];
    float og_r = val;
    const float og_c = og_rc, og_s = og_rs;
    const float og_p = pval;
    og_r = col % 16u < 8u ? og_rotate_first(og_r, og_c, og_p, og_s) : og_rotate_second(og_r, og_c, og_p, og_s);
    out[i * 32u + col] = (float)(og_r);
  }
}

__device__ __forceinline__ void og_gemv_ec226b47a3c8_part(const dim3 og_block_idx, const dim3 og_grid_dim, float* out, const float* in0, const float* in1, const float* in2) {
  const unsigned int tile = og_block_idx.x, split = og_block_idx.y;
  const unsigned int cg = threadIdx.x % 8u, rl = threadIdx.x / 8u;
  const unsigned int n0 = tile * 32u + cg * 4u;
  const unsigned int k0 = split * 64u;
  const unsigned int k1 = min(64u, k0 + 64u);
  uint4 og_wv0[1][8];
  {
    const unsigned int kb = k0 + rl;
    if (n0 < 32u) {
      if (kb + 0u < k1) { og_wv0[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 32u); }
      if (kb + 32u < k1) { og_wv0[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 32u); }
      if (kb + 64u < k1) { og_wv0[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 32u); }
      if (kb + 96u < k1) { og_wv0[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 32u); }
      if (kb + 128u < k1) { og_wv0[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 32u); }
      if (kb + 160u < k1) { og_wv0[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 32u); }
      if (kb + 192u < k1) { og_wv0[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 32u); }
      if (kb + 224u < k1) { og_wv0[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 32u); }
    }
  }
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  auto og_x = [&](unsigned int i, unsigned int j) -> float {
    const unsigned int xi = i * 64u + j;
    const float r0 = in0[xi];
    return (float)r0;
  };
  float og_k[1], og_mu[1], og_r[1];
  for (int i = 0; i < 1; ++i) {
    float ss = 0.0f;
    #pragma unroll
    for (unsigned int u = 0; u < 2u; ++u) { const unsigned int j = (threadIdx.x & 31u) + u * 32u; { const float v = og_x(i, j); ss += v * v; } }
    ss = og_warp_sum(ss);
    og_k[i] = 0.0f;
    og_mu[i] = 0.0f;
    og_r[i] = sqrtf(ss / (float)64 + 9.999999975e-07f);
  }
  auto og_row = [&](unsigned int i, unsigned int j) -> float {
    const unsigned int xi = i * 64u + j;
    const float r0 = in0[xi];
    const float r1 = in1[xi];
    const float og_n = (float)(og_x(i, j) / og_r[i] * r1);
    return (float)og_n;
  };
  __shared__ float og_xs[64];
  for (unsigned int t = threadIdx.x; t < 64u; t += 256u) {
    const unsigned int i = t / 64u, kk = k0 + t % 64u;
    if (kk < k1) og_xs[t] = (float)(og_row(i, kk));
  }
  __syncthreads();
  float acc[1][4];
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) acc[i][v] = 0.0f;
  }
  if (n0 < 32u) {
    unsigned int kb = k0 + rl;
    {  // the first batch, loaded before the dependency wait
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(og_wv0[0][j].x); wf[0][1] = __uint_as_float(og_wv0[0][j].y);
          wf[0][2] = __uint_as_float(og_wv0[0][j].z); wf[0][3] = __uint_as_float(og_wv0[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_xs[i * 64u + (kk - k0)];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
    kb += 256u;
    for (; kb + 224u < k1; kb += 256u) {
      uint4 wv[1][8];
      wv[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 32u);
      wv[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 32u);
      wv[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 32u);
      wv[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 32u);
      wv[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 32u);
      wv[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 32u);
      wv[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 32u);
      wv[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 32u);
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        float wf[1][4];
        wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
        wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
          const float xv = og_xs[i * 64u + (kk - k0)];
          #pragma unroll
          for (int q = 0; q < 1; ++q) {
            #pragma unroll
            for (int v = 0; v < 4; ++v)
              acc[q * 1 + i][v] += xv * wf[q][v];
          }
        }
      }
    }
    if (kb < k1) {  // the rows left, fewer than a batch: guarded loads, all in flight
      uint4 wv[1][8];
      if (kb + 0u < k1) { wv[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 32u); }
      if (kb + 32u < k1) { wv[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 32u); }
      if (kb + 64u < k1) { wv[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 32u); }
      if (kb + 96u < k1) { wv[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 32u); }
      if (kb + 128u < k1) { wv[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 32u); }
      if (kb + 160u < k1) { wv[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 32u); }
      if (kb + 192u < k1) { wv[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 32u); }
      if (kb + 224u < k1) { wv[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 32u); }
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
          wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_xs[i * 64u + (kk - k0)];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
  }
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) {
      for (int o = 8; o < 32; o <<= 1) acc[i][v] += __shfl_xor_sync(0xffffffffu, acc[i][v], o);
    }
  }
  __shared__ float og_red[8][1][32];
  const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  if (lane < 8u) {
    #pragma unroll
    for (int i = 0; i < 1; ++i) {
      #pragma unroll
      for (int v = 0; v < 4; ++v) og_red[warp][i][lane * 4u + v] = acc[i][v];
    }
  }
  __syncthreads();
  for (unsigned int t = threadIdx.x; t < 32u; t += 256u) {
    const unsigned int i = t / 32u, c = t % 32u;
    const unsigned int col = tile * 32u + c;
    if (col >= 32u) continue;
    float val = 0.0f;
    #pragma unroll
  for (int w = 0; w < 8; ++w) val += og_red[w][i][c];
    const unsigned int oi = i * 32u + col;
    const float a = val;
    out[oi] = (float)(a);
  }
}

extern "C" __global__ void __launch_bounds__(256, 2) og_merged_5b68881aa2c0(float* m0_out, const float* m0_in0, const float* m0_in1, const float* m0_in2, const int* m0_in3, float* m1_out, const float* m1_in0, const float* m1_in1, const float* m1_in2, const int* m1_in3, float* m2_out, const float* m2_in0, const float* m2_in1, const float* m2_in2) {
  {
  const unsigned int og_b = blockIdx.x;
  if (og_b < 2u) {
    og_gemv_e7fcda7ee547_part(dim3{og_b, 0u, 0u}, dim3{2u, 1u, 1u}, m0_out, m0_in0, m0_in1, m0_in2, m0_in3);
  } else if (og_b < 3u) {
    const unsigned int og_r = og_b - 2u;
    og_gemv_88e014c41368_part(dim3{og_r, 0u, 0u}, dim3{1u, 1u, 1u}, m1_out, m1_in0, m1_in1, m1_in2, m1_in3);
  } else {
    const unsigned int og_r = og_b - 3u;
    og_gemv_ec226b47a3c8_part(dim3{og_r, 0u, 0u}, dim3{1u, 1u, 1u}, m2_out, m2_in0, m2_in1, m2_in2);
  }
  }
}

__device__ __forceinline__ void og_gemv_a692fd8d7291_part(const dim3 og_block_idx, const dim3 og_grid_dim, float* out, const float* in0, const float* in1, const float* in2) {
  const unsigned int tile = og_block_idx.x, split = og_block_idx.y;
  const unsigned int cg = threadIdx.x % 8u, rl = threadIdx.x / 8u;
  const unsigned int n0 = tile * 32u + cg * 4u;
  const unsigned int k0 = split * 64u;
  const unsigned int k1 = min(64u, k0 + 64u);
  uint4 og_wv0[1][8];
  {
    const unsigned int kb = k0 + rl;
    if (n0 < 128u) {
      if (kb + 0u < k1) { og_wv0[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 128u); }
      if (kb + 32u < k1) { og_wv0[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 128u); }
      if (kb + 64u < k1) { og_wv0[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 128u); }
      if (kb + 96u < k1) { og_wv0[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 128u); }
      if (kb + 128u < k1) { og_wv0[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 128u); }
      if (kb + 160u < k1) { og_wv0[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 128u); }
      if (kb + 192u < k1) { og_wv0[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 128u); }
      if (kb + 224u < k1) { og_wv0[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 128u); }
    }
  }
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  auto og_x = [&](unsigned int i, unsigned int j) -> float {
    const unsigned int xi = i * 64u + j;
    const float r0 = in0[xi];
    return (float)r0;
  };
  float og_k[1], og_mu[1], og_r[1];
  for (int i = 0; i < 1; ++i) {
    float ss = 0.0f;
    #pragma unroll
    for (unsigned int u = 0; u < 2u; ++u) { const unsigned int j = (threadIdx.x & 31u) + u * 32u; { const float v = og_x(i, j); ss += v * v; } }
    ss = og_warp_sum(ss);
    og_k[i] = 0.0f;
    og_mu[i] = 0.0f;
    og_r[i] = sqrtf(ss / (float)64 + 9.999999975e-07f);
  }
  auto og_row = [&](unsigned int i, unsigned int j) -> float {
    const unsigned int xi = i * 64u + j;
    const float r0 = in0[xi];
    const float r1 = in1[xi];
    const float og_n = (float)(og_x(i, j) / og_r[i] * r1);
    return (float)og_n;
  };
  __shared__ float og_xs[64];
  for (unsigned int t = threadIdx.x; t < 64u; t += 256u) {
    const unsigned int i = t / 64u, kk = k0 + t % 64u;
    if (kk < k1) og_xs[t] = (float)(og_row(i, kk));
  }
  __syncthreads();
  float acc[1][4];
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) acc[i][v] = 0.0f;
  }
  if (n0 < 128u) {
    unsigned int kb = k0 + rl;
    {  // the first batch, loaded before the dependency wait
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(og_wv0[0][j].x); wf[0][1] = __uint_as_float(og_wv0[0][j].y);
          wf[0][2] = __uint_as_float(og_wv0[0][j].z); wf[0][3] = __uint_as_float(og_wv0[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_xs[i * 64u + (kk - k0)];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
    kb += 256u;
    for (; kb + 224u < k1; kb += 256u) {
      uint4 wv[1][8];
      wv[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 128u);
      wv[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 128u);
      wv[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 128u);
      wv[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 128u);
      wv[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 128u);
      wv[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 128u);
      wv[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 128u);
      wv[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 128u);
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        float wf[1][4];
        wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
        wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
          const float xv = og_xs[i * 64u + (kk - k0)];
          #pragma unroll
          for (int q = 0; q < 1; ++q) {
            #pragma unroll
            for (int v = 0; v < 4; ++v)
              acc[q * 1 + i][v] += xv * wf[q][v];
          }
        }
      }
    }
    if (kb < k1) {  // the rows left, fewer than a batch: guarded loads, all in flight
      uint4 wv[1][8];
      if (kb + 0u < k1) { wv[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 128u); }
      if (kb + 32u < k1) { wv[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 128u); }
      if (kb + 64u < k1) { wv[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 128u); }
      if (kb + 96u < k1) { wv[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 128u); }
      if (kb + 128u < k1) { wv[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 128u); }
      if (kb + 160u < k1) { wv[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 128u); }
      if (kb + 192u < k1) { wv[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 128u); }
      if (kb + 224u < k1) { wv[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 128u); }
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
          wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_xs[i * 64u + (kk - k0)];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
  }
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) {
      for (int o = 8; o < 32; o <<= 1) acc[i][v] += __shfl_xor_sync(0xffffffffu, acc[i][v], o);
    }
  }
  __shared__ float og_red[8][1][32];
  const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  if (lane < 8u) {
    #pragma unroll
    for (int i = 0; i < 1; ++i) {
      #pragma unroll
      for (int v = 0; v < 4; ++v) og_red[warp][i][lane * 4u + v] = acc[i][v];
    }
  }
  __syncthreads();
  for (unsigned int t = threadIdx.x; t < 32u; t += 256u) {
    const unsigned int i = t / 32u, c = t % 32u;
    const unsigned int col = tile * 32u + c;
    if (col >= 128u) continue;
    float val = 0.0f;
    #pragma unroll
  for (int w = 0; w < 8; ++w) val += og_red[w][i][c];
    const unsigned int oi = i * 128u + col;
    const float a = val;
    out[oi] = (float)(a);
  }
}

__device__ __forceinline__ void og_gemv_a141a70f32a4_part(const dim3 og_block_idx, const dim3 og_grid_dim, float* out, const float* in0, const float* in1, const float* in2) {
  const unsigned int tile = og_block_idx.x, split = og_block_idx.y;
  const unsigned int cg = threadIdx.x % 8u, rl = threadIdx.x / 8u;
  const unsigned int n0 = tile * 32u + cg * 4u;
  const unsigned int k0 = split * 64u;
  const unsigned int k1 = min(64u, k0 + 64u);
  uint4 og_wv0[1][8];
  {
    const unsigned int kb = k0 + rl;
    if (n0 < 128u) {
      if (kb + 0u < k1) { og_wv0[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 128u); }
      if (kb + 32u < k1) { og_wv0[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 128u); }
      if (kb + 64u < k1) { og_wv0[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 128u); }
      if (kb + 96u < k1) { og_wv0[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 128u); }
      if (kb + 128u < k1) { og_wv0[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 128u); }
      if (kb + 160u < k1) { og_wv0[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 128u); }
      if (kb + 192u < k1) { og_wv0[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 128u); }
      if (kb + 224u < k1) { og_wv0[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 128u); }
    }
  }
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  auto og_x = [&](unsigned int i, unsigned int j) -> float {
    const unsigned int xi = i * 64u + j;
    const float r0 = in0[xi];
    return (float)r0;
  };
  float og_k[1], og_mu[1], og_r[1];
  for (int i = 0; i < 1; ++i) {
    float ss = 0.0f;
    #pragma unroll
    for (unsigned int u = 0; u < 2u; ++u) { const unsigned int j = (threadIdx.x & 31u) + u * 32u; { const float v = og_x(i, j); ss += v * v; } }
    ss = og_warp_sum(ss);
    og_k[i] = 0.0f;
    og_mu[i] = 0.0f;
    og_r[i] = sqrtf(ss / (float)64 + 9.999999975e-07f);
  }
  auto og_row = [&](unsigned int i, unsigned int j) -> float {
    const unsigned int xi = i * 64u + j;
    const float r0 = in0[xi];
    const float r1 = in1[xi];
    const float og_n = (float)(og_x(i, j) / og_r[i] * r1);
    return (float)og_n;
  };
  __shared__ float og_xs[64];
  for (unsigned int t = threadIdx.x; t < 64u; t += 256u) {
    const unsigned int i = t / 64u, kk = k0 + t % 64u;
    if (kk < k1) og_xs[t] = (float)(og_row(i, kk));
  }
  __syncthreads();
  float acc[1][4];
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) acc[i][v] = 0.0f;
  }
  if (n0 < 128u) {
    unsigned int kb = k0 + rl;
    {  // the first batch, loaded before the dependency wait
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(og_wv0[0][j].x); wf[0][1] = __uint_as_float(og_wv0[0][j].y);
          wf[0][2] = __uint_as_float(og_wv0[0][j].z); wf[0][3] = __uint_as_float(og_wv0[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_xs[i * 64u + (kk - k0)];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
    kb += 256u;
    for (; kb + 224u < k1; kb += 256u) {
      uint4 wv[1][8];
      wv[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 128u);
      wv[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 128u);
      wv[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 128u);
      wv[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 128u);
      wv[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 128u);
      wv[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 128u);
      wv[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 128u);
      wv[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 128u);
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        float wf[1][4];
        wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
        wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
          const float xv = og_xs[i * 64u + (kk - k0)];
          #pragma unroll
          for (int q = 0; q < 1; ++q) {
            #pragma unroll
            for (int v = 0; v < 4; ++v)
              acc[q * 1 + i][v] += xv * wf[q][v];
          }
        }
      }
    }
    if (kb < k1) {  // the rows left, fewer than a batch: guarded loads, all in flight
      uint4 wv[1][8];
      if (kb + 0u < k1) { wv[0][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 128u); }
      if (kb + 32u < k1) { wv[0][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 128u); }
      if (kb + 64u < k1) { wv[0][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 64u) * 128u); }
      if (kb + 96u < k1) { wv[0][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 96u) * 128u); }
      if (kb + 128u < k1) { wv[0][4] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 128u) * 128u); }
      if (kb + 160u < k1) { wv[0][5] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 160u) * 128u); }
      if (kb + 192u < k1) { wv[0][6] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 192u) * 128u); }
      if (kb + 224u < k1) { wv[0][7] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 224u) * 128u); }
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 32u;
        if (kk < k1) {
          float wf[1][4];
          wf[0][0] = __uint_as_float(wv[0][j].x); wf[0][1] = __uint_as_float(wv[0][j].y);
          wf[0][2] = __uint_as_float(wv[0][j].z); wf[0][3] = __uint_as_float(wv[0][j].w);
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_xs[i * 64u + (kk - k0)];
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 4; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
  }
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 4; ++v) {
      for (int o = 8; o < 32; o <<= 1) acc[i][v] += __shfl_xor_sync(0xffffffffu, acc[i][v], o);
    }
  }
  __shared__ float og_red[8][1][32];
  const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  if (lane < 8u) {
    #pragma unroll
    for (int i = 0; i < 1; ++i) {
      #pragma unroll
      for (int v = 0; v < 4; ++v) og_red[warp][i][lane * 4u + v] = acc[i][v];
    }
  }
  __syncthreads();
  for (unsigned int t = threadIdx.x; t < 32u; t += 256u) {
    const unsigned int i = t / 32u, c = t % 32u;
    const unsigned int col = tile * 32u + c;
    if (col >= 128u) continue;
    float val = 0.0f;
    #pragma unroll
  for (int w = 0; w < 8; ++w) val += og_red[w][i][c];
    const unsigned int oi = i * 128u + col;
    const float a = val;
    const float v0 = (a * og_sigmoid(a));
    out[oi] = (float)(v0);
  }
}

extern "C" __global__ void __launch_bounds__(256, 2) og_merged_d7d43f914fb4(float* m0_out, const float* m0_in0, const float* m0_in1, const float* m0_in2, float* m1_out, const float* m1_in0, const float* m1_in1, const float* m1_in2) {
  {
  const unsigned int og_b = blockIdx.x;
  if (og_b < 4u) {
    og_gemv_a692fd8d7291_part(dim3{og_b, 0u, 0u}, dim3{4u, 1u, 1u}, m0_out, m0_in0, m0_in1, m0_in2);
  } else {
    const unsigned int og_r = og_b - 4u;
    og_gemv_a141a70f32a4_part(dim3{og_r, 0u, 0u}, dim3{4u, 1u, 1u}, m1_out, m1_in0, m1_in1, m1_in2);
  }
  }
}
