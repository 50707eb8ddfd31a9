
__device__ __forceinline__ void og_attention_decode_wide_a2bc1d287dc3_part(const dim3 og_block_idx, const dim3 og_grid_dim, og_f16* out, const og_f16* in0, const og_f16* in1, const og_f16* in2, const int* in3, const unsigned char* in4) {
  const unsigned int c = og_block_idx.x, hr = og_block_idx.y, bz = og_block_idx.z;
  const unsigned int hk = hr / 2u, rt = hr % 2u;
  const unsigned int li = threadIdx.x % 8u, kid = threadIdx.x / 8u;
  const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  const unsigned long long kvoff = (unsigned long long)(bz * 2u + hk) * 4096ull;
  const bool vec_ok = (((unsigned long long)in0 | (unsigned long long)in1 | (unsigned long long)in2) & 15ull) == 0ull;
  const unsigned int k0 = c * 64u;
  const unsigned int kc1 = og_min(k0 + 64u, 64u);
  uint4 kw[2], vw[2];
  {
    const unsigned int p = 0u;
    if (vec_ok) {
      #pragma unroll
      for (int u = 0; u < 2; ++u) {
        const unsigned int j = k0 + (p * 2u + (unsigned int)u) * 32u + kid;
        kw[u] = uint4{0u, 0u, 0u, 0u}; vw[u] = uint4{0u, 0u, 0u, 0u};
        if (j < kc1) {
          kw[u] = *reinterpret_cast<const uint4*>(in1 + kvoff + (unsigned long long)j * 64u + li * 8u);
          vw[u] = *reinterpret_cast<const uint4*>(in2 + kvoff + (unsigned long long)j * 64u + li * 8u);
        }
      }
    } else {
      #pragma unroll
      for (int u = 0; u < 2; ++u) {
        const unsigned int j = k0 + (p * 2u + (unsigned int)u) * 32u + kid;
        kw[u] = uint4{0u, 0u, 0u, 0u}; vw[u] = uint4{0u, 0u, 0u, 0u};
        if (j < kc1) {
          kw[u].x = (unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 0u] | ((unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 1u] << 16);
          vw[u].x = (unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 0u] | ((unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 1u] << 16);
          kw[u].y = (unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 2u] | ((unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 3u] << 16);
          vw[u].y = (unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 2u] | ((unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 3u] << 16);
          kw[u].z = (unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 4u] | ((unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 5u] << 16);
          vw[u].z = (unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 4u] | ((unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 5u] << 16);
          kw[u].w = (unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 6u] | ((unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 7u] << 16);
          vw[u].w = (unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 6u] | ((unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 7u] << 16);
        }
      }
    }
  }
  long long Lx = og_min((long long)in3[bz], 64LL);
  if (Lx < 0) Lx = 0;
  const unsigned int L = (unsigned int)Lx;
  auto qoff_of = [&](unsigned int gr) -> unsigned long long {
    const unsigned int h = hk * 2u + gr / 1u, i = gr % 1u;
    return ((unsigned long long)(bz * 4u + h) * 1u + i) * 64u;
  };
  float qv[1][8];
  unsigned int lim[1];
  long long lo[1];
  unsigned long long moff[1];
  unsigned int kend = 0u;
  #pragma unroll
  for (int r = 0; r < 1; ++r) {
    const unsigned int gr = rt * 1u + r;
    const bool active = gr < 2u;
    long long lm = active ? (long long)L : 0LL;
    if (active) lm = og_min(lm, og_min((long long)(L), ((long long)(L) - 1LL + (long long)(gr % 1u)) + 1LL));
    if (lm < 0) lm = 0;
    lo[r] = (((long long)(L) - 1LL + (long long)(gr % 1u)) - 15LL);
    moff[r] = active ? (unsigned long long)(bz) * 64ull : 0ull;
    lim[r] = (unsigned int)lm;
    kend = og_max(kend, lim[r]);
    const unsigned long long qo = (active ? qoff_of(gr) : 0ull) + li * 8u;
    if (vec_ok) {
      const uint4 qw = *reinterpret_cast<const uint4*>(in0 + qo);
      qv[r][0] = og_f16_to_f32((unsigned short)(qw.x & 0xffffu)); qv[r][1] = og_f16_to_f32((unsigned short)(qw.x >> 16));
      qv[r][2] = og_f16_to_f32((unsigned short)(qw.y & 0xffffu)); qv[r][3] = og_f16_to_f32((unsigned short)(qw.y >> 16));
      qv[r][4] = og_f16_to_f32((unsigned short)(qw.z & 0xffffu)); qv[r][5] = og_f16_to_f32((unsigned short)(qw.z >> 16));
      qv[r][6] = og_f16_to_f32((unsigned short)(qw.w & 0xffffu)); qv[r][7] = og_f16_to_f32((unsigned short)(qw.w >> 16));
      #pragma unroll
      for (int k = 0; k < 8; ++k) if (!active) qv[r][k] = 0.0f;
    } else {
      #pragma unroll
      for (int k = 0; k < 8; ++k)
        qv[r][k] = active ? og_f16_to_f32(in0[qo + k]) : 0.0f;
    }
  }
  const unsigned int kv1 = og_min(kc1, kend);
  float m[1], l[1], acc[1][8];
  #pragma unroll
  for (int r = 0; r < 1; ++r) {
    m[r] = __int_as_float(0xff800000); l[r] = 0.0f;
    #pragma unroll
    for (int k = 0; k < 8; ++k) acc[r][k] = 0.0f;
  }
  __shared__ float og_pm[2][8][1];
  for (unsigned int p = 0; p < 1u; ++p) {
    if (p > 0u && k0 + p * 64u >= kv1) break;
    if (p > 0u) {
      if (vec_ok) {
        #pragma unroll
        for (int u = 0; u < 2; ++u) {
          const unsigned int j = k0 + (p * 2u + (unsigned int)u) * 32u + kid;
          kw[u] = uint4{0u, 0u, 0u, 0u}; vw[u] = uint4{0u, 0u, 0u, 0u};
          if (j < kv1) {
            kw[u] = *reinterpret_cast<const uint4*>(in1 + kvoff + (unsigned long long)j * 64u + li * 8u);
            vw[u] = *reinterpret_cast<const uint4*>(in2 + kvoff + (unsigned long long)j * 64u + li * 8u);
          }
        }
      } else {
        #pragma unroll
        for (int u = 0; u < 2; ++u) {
          const unsigned int j = k0 + (p * 2u + (unsigned int)u) * 32u + kid;
          kw[u] = uint4{0u, 0u, 0u, 0u}; vw[u] = uint4{0u, 0u, 0u, 0u};
          if (j < kv1) {
            kw[u].x = (unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 0u] | ((unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 1u] << 16);
            vw[u].x = (unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 0u] | ((unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 1u] << 16);
            kw[u].y = (unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 2u] | ((unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 3u] << 16);
            vw[u].y = (unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 2u] | ((unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 3u] << 16);
            kw[u].z = (unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 4u] | ((unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 5u] << 16);
            vw[u].z = (unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 4u] | ((unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 5u] << 16);
            kw[u].w = (unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 6u] | ((unsigned int)in1[kvoff + (unsigned long long)j * 64u + li * 8u + 7u] << 16);
            vw[u].w = (unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 6u] | ((unsigned int)in2[kvoff + (unsigned long long)j * 64u + li * 8u + 7u] << 16);
          }
        }
      }
    }
    #pragma unroll
    for (int u = 0; u < 2; ++u)
      if (k0 + (p * 2u + (unsigned int)u) * 32u + kid >= kend) vw[u] = uint4{0u, 0u, 0u, 0u};
    float sc[1][2];
    #pragma unroll
    for (int u = 0; u < 2; ++u) {
      const unsigned int j = k0 + (p * 2u + (unsigned int)u) * 32u + kid;
      float kf[8];
      kf[0] = og_f16_to_f32((unsigned short)(kw[u].x & 0xffffu)); kf[1] = og_f16_to_f32((unsigned short)(kw[u].x >> 16));
      kf[2] = og_f16_to_f32((unsigned short)(kw[u].y & 0xffffu)); kf[3] = og_f16_to_f32((unsigned short)(kw[u].y >> 16));
      kf[4] = og_f16_to_f32((unsigned short)(kw[u].z & 0xffffu)); kf[5] = og_f16_to_f32((unsigned short)(kw[u].z >> 16));
      kf[6] = og_f16_to_f32((unsigned short)(kw[u].w & 0xffffu)); kf[7] = og_f16_to_f32((unsigned short)(kw[u].w >> 16));
      #pragma unroll
      for (int r = 0; r < 1; ++r) {
        float dot = 0.0f;
        #pragma unroll
        for (int k = 0; k < 8; ++k) dot += qv[r][k] * kf[k];
        for (int o = 4; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        sc[r][u] = (j < kc1 && j < lim[r] && (long long)(j) >= lo[r] && in4[moff[r] + (unsigned long long)(j) * 1ull] != 0) ? (3.000000000e+01f * tanhf((dot * 1.250000000e-01f) / 3.000000000e+01f)) : __int_as_float(0xff800000);
      }
    }
    #pragma unroll
    for (int r = 0; r < 1; ++r) {
      float t = sc[r][0];
      #pragma unroll
      for (int u = 1; u < 2; ++u) t = og_max(t, sc[r][u]);
      for (int o = 8; o < 32; o <<= 1) t = og_max(t, __shfl_xor_sync(0xffffffffu, t, o));
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
      for (int k = 0; k < 8; ++k) acc[r][k] *= corr;
      m[r] = mx;
    }
    #pragma unroll
    for (int u = 0; u < 2; ++u) {
      float vf[8];
      vf[0] = og_f16_to_f32((unsigned short)(vw[u].x & 0xffffu)); vf[1] = og_f16_to_f32((unsigned short)(vw[u].x >> 16));
      vf[2] = og_f16_to_f32((unsigned short)(vw[u].y & 0xffffu)); vf[3] = og_f16_to_f32((unsigned short)(vw[u].y >> 16));
      vf[4] = og_f16_to_f32((unsigned short)(vw[u].z & 0xffffu)); vf[5] = og_f16_to_f32((unsigned short)(vw[u].z >> 16));
      vf[6] = og_f16_to_f32((unsigned short)(vw[u].w & 0xffffu)); vf[7] = og_f16_to_f32((unsigned short)(vw[u].w >> 16));
      #pragma unroll
      for (int r = 0; r < 1; ++r) {
        const float pr = sc[r][u] == __int_as_float(0xff800000) ? 0.0f : expf(sc[r][u] - m[r]);
        l[r] += pr;
        #pragma unroll
        for (int k = 0; k < 8; ++k) acc[r][k] += pr * vf[k];
      }
    }
  }
  #pragma unroll
  for (int r = 0; r < 1; ++r) {
    for (int o = 8; o < 32; o <<= 1) {
      l[r] += __shfl_xor_sync(0xffffffffu, l[r], o);
      #pragma unroll
      for (int k = 0; k < 8; ++k)
        acc[r][k] += __shfl_xor_sync(0xffffffffu, acc[r][k], o);
    }
  }
  __shared__ float og_l[8][1];
  __shared__ float og_a[8][1][64];
  if (lane < 8u) {
    #pragma unroll
    for (int r = 0; r < 1; ++r) {
      #pragma unroll
      for (int k = 0; k < 8; ++k) og_a[warp][r][li * 8u + k] = acc[r][k];
      if (lane == 0u) og_l[warp][r] = l[r];
    }
  }
  __syncthreads();
  for (unsigned int t = threadIdx.x; t < 64u; t += 256u) {
    const unsigned int r = t / 64u, dd = t % 64u;
    float Ls = 0.0f, A = 0.0f;
    #pragma unroll
    for (int w = 0; w < 8; ++w) { Ls += og_l[w][r]; A += og_a[w][r][dd]; }
    const unsigned int gr = rt * 1u + r;
    if (gr < 2u) out[qoff_of(gr) + dd] = og_f32_to_f16((float)(Ls > 0.0f ? A / Ls : 0.0f));
  }
}

__device__ __forceinline__ void og_attention_tiled_0eeb8a47f611_part(const dim3 og_block_idx, const dim3 og_grid_dim, og_f16* out, const og_f16* in0, const og_f16* in1, const og_f16* in2, const og_f16* in3) {
  const long long SQ = 32LL;
  const unsigned int qt = 1u - og_block_idx.x, h = og_block_idx.y, bz = og_block_idx.z;
  const unsigned int hk = h / 1u;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  long long L = 48LL;
  if (L < 0) L = 0;
  const unsigned long long kvoff = (unsigned long long)(bz * 4u + hk) * 3072ull;
  const unsigned long long qbase = (unsigned long long)(bz * 4u + h) * 2048ull;
  alignas(16) __shared__ float og_k[32][64];
  alignas(16) __shared__ float og_v[32][64];
  __shared__ float og_p[8][2][32];
  const long long last = og_min((long long)(qt + 1u) * 16LL, SQ) - 1LL;
  long long kend_l;
  { const long long i = last; kend_l = og_min((long long)(L), (long long)(i) + 1LL); }
  const unsigned int kend = kend_l > 0 ? (unsigned int)kend_l : 0u;
  float qv[2][2], acc[2][2], m[2], l[2];
  unsigned int lim[2];
  unsigned long long moff[2];
  unsigned int wlim = 0u;
  #pragma unroll
for (int r = 0; r < 2; ++r) {
    const long long i = (long long)qt * 16LL + warp * 2 + r;
    long long lm = i < SQ ? (long long)(og_min((long long)(L), (long long)(i) + 1LL)) : 0LL;
    lim[r] = lm > 0 ? (unsigned int)lm : 0u;
    moff[r] = (unsigned long long)(i) * 48ull;
    wlim = og_max(wlim, lim[r]);
    m[r] = __int_as_float(0xff800000); l[r] = 0.0f;
    #pragma unroll
  for (int k = 0; k < 2; ++k) {
      const unsigned int t = (unsigned int)lane + 32u * k;
      acc[r][k] = 0.0f;
      qv[r][k] = (i < SQ && t < 64u) ? og_f16_to_f32(in0[qbase + (unsigned long long)i * 64u + t]) : 0.0f;
    }
  }
  const bool vec_ok = (((unsigned long long)in1 | (unsigned long long)in2) & 15ull) == 0ull;
  uint4 kr[1], vr[1];
  auto fetch = [&](unsigned int k0) {
    #pragma unroll
  for (int p = 0; p < 1; ++p) {
      const unsigned int x = threadIdx.x + p * 256u;
      const bool ok = x < 256u && k0 + x / 8u < kend;
      const unsigned long long g = kvoff + (unsigned long long)k0 * 64u + (unsigned long long)x * 8u;
      kr[p] = ok ? *reinterpret_cast<const uint4*>(in1 + g) : uint4{0u, 0u, 0u, 0u};
      vr[p] = ok ? *reinterpret_cast<const uint4*>(in2 + g) : uint4{0u, 0u, 0u, 0u};
    }
  };
  if (vec_ok && kend > 0u) fetch(0u);
  for (unsigned int k0 = 0; k0 < kend; k0 += 32u) {
    __syncthreads();
    if (vec_ok) {
      #pragma unroll
  for (int p = 0; p < 1; ++p) {
        const unsigned int x = threadIdx.x + p * 256u;
        if (x >= 256u) break;
        const unsigned int j = x / 8u, t = (x % 8u) * 8u;
        float f[8];
        f[0] = og_f16_to_f32((unsigned short)(kr[p].x & 0xffffu)); f[1] = og_f16_to_f32((unsigned short)(kr[p].x >> 16));
        f[2] = og_f16_to_f32((unsigned short)(kr[p].y & 0xffffu)); f[3] = og_f16_to_f32((unsigned short)(kr[p].y >> 16));
        f[4] = og_f16_to_f32((unsigned short)(kr[p].z & 0xffffu)); f[5] = og_f16_to_f32((unsigned short)(kr[p].z >> 16));
        f[6] = og_f16_to_f32((unsigned short)(kr[p].w & 0xffffu)); f[7] = og_f16_to_f32((unsigned short)(kr[p].w >> 16));
        *reinterpret_cast<float4*>(&og_k[j][t + 0u]) = float4{f[0], f[1], f[2], f[3]};
        *reinterpret_cast<float4*>(&og_k[j][t + 4u]) = float4{f[4], f[5], f[6], f[7]};
        f[0] = og_f16_to_f32((unsigned short)(vr[p].x & 0xffffu)); f[1] = og_f16_to_f32((unsigned short)(vr[p].x >> 16));
        f[2] = og_f16_to_f32((unsigned short)(vr[p].y & 0xffffu)); f[3] = og_f16_to_f32((unsigned short)(vr[p].y >> 16));
        f[4] = og_f16_to_f32((unsigned short)(vr[p].z & 0xffffu)); f[5] = og_f16_to_f32((unsigned short)(vr[p].z >> 16));
        f[6] = og_f16_to_f32((unsigned short)(vr[p].w & 0xffffu)); f[7] = og_f16_to_f32((unsigned short)(vr[p].w >> 16));
        *reinterpret_cast<float4*>(&og_v[j][t + 0u]) = float4{f[0], f[1], f[2], f[3]};
        *reinterpret_cast<float4*>(&og_v[j][t + 4u]) = float4{f[4], f[5], f[6], f[7]};
      }
      if (k0 + 32u < kend) fetch(k0 + 32u);
    } else {
      for (unsigned int x = threadIdx.x; x < 2048u; x += 256u) {
        const unsigned int j = x / 64u, t = x % 64u;
        const unsigned long long g = kvoff + (unsigned long long)(k0 + j) * 64u + t;
        const bool ok = k0 + j < kend;
        og_k[j][t] = ok ? og_f16_to_f32(in1[g]) : 0.0f;
        og_v[j][t] = ok ? og_f16_to_f32(in2[g]) : 0.0f;
      }
    }
    __syncthreads();
    if (k0 >= wlim) continue;
    float part[2][32];
    #pragma unroll
  for (int j = 0; j < 32; ++j) {
      float kf[2];
      #pragma unroll
    for (int k = 0; k < 2; ++k) {
        const unsigned int t = (unsigned int)lane + 32u * k;
        kf[k] = t < 64u ? og_k[j][t] : 0.0f;
      }
      #pragma unroll
    for (int r = 0; r < 2; ++r) {
        float dot = 0.0f;
        #pragma unroll
      for (int k = 0; k < 2; ++k) dot += qv[r][k] * kf[k];
        part[r][j] = dot;
      }
    }
    { const bool up = (lane & 16) != 0;
      #pragma unroll
      for (int r = 0; r < 2; ++r) {
        #pragma unroll
        for (int i = 0; i < 16; ++i) {
          const float send = up ? part[r][i] : part[r][i + 16];
          const float keep = up ? part[r][i + 16] : part[r][i];
          part[r][i] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
        }
      }
    }
    { const bool up = (lane & 8) != 0;
      #pragma unroll
      for (int r = 0; r < 2; ++r) {
        #pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float send = up ? part[r][i] : part[r][i + 8];
          const float keep = up ? part[r][i + 8] : part[r][i];
          part[r][i] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
        }
      }
    }
    { const bool up = (lane & 4) != 0;
      #pragma unroll
      for (int r = 0; r < 2; ++r) {
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float send = up ? part[r][i] : part[r][i + 4];
          const float keep = up ? part[r][i + 4] : part[r][i];
          part[r][i] = keep + __shfl_xor_sync(0xffffffffu, send, 4);
        }
      }
    }
    { const bool up = (lane & 2) != 0;
      #pragma unroll
      for (int r = 0; r < 2; ++r) {
        #pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float send = up ? part[r][i] : part[r][i + 2];
          const float keep = up ? part[r][i + 2] : part[r][i];
          part[r][i] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
        }
      }
    }
    { const bool up = (lane & 1) != 0;
      #pragma unroll
      for (int r = 0; r < 2; ++r) {
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
          const float send = up ? part[r][i] : part[r][i + 1];
          const float keep = up ? part[r][i + 1] : part[r][i];
          part[r][i] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
        }
      }
    }
    const unsigned int key = k0 + (unsigned int)lane;
    #pragma unroll
  for (int r = 0; r < 2; ++r) {
      const float sc = (key < lim[r]) ? (part[r][0] * 1.250000000e-01f + og_f16_to_f32(in3[moff[r] + (unsigned long long)(key) * 1ull])) : __int_as_float(0xff800000);
      float mx = sc;
      for (int o = 16; o > 0; o >>= 1) mx = og_max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      mx = og_max(mx, m[r]);
      float p = 0.0f;
      if (mx != __int_as_float(0xff800000)) {
        const float corr = expf(m[r] - mx);
        p = sc == __int_as_float(0xff800000) ? 0.0f : expf(sc - mx);
        l[r] = l[r] * corr + p;
        #pragma unroll
      for (int k = 0; k < 2; ++k) acc[r][k] *= corr;
        m[r] = mx;
      }
      og_p[warp][r][lane] = p;
    }
    __syncwarp();
    #pragma unroll 8
  for (int j = 0; j < 32; ++j) {
      float vf[2];
      #pragma unroll
    for (int k = 0; k < 2; ++k) {
        const unsigned int t = (unsigned int)lane + 32u * k;
        vf[k] = t < 64u ? og_v[j][t] : 0.0f;
      }
      #pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float pj = og_p[warp][r][j];
        #pragma unroll
      for (int k = 0; k < 2; ++k) acc[r][k] += pj * vf[k];
      }
    }
    __syncwarp();
  }
  #pragma unroll
for (int r = 0; r < 2; ++r) {
    const long long i = (long long)qt * 16LL + warp * 2 + r;
    float ls = l[r];
    for (int o = 16; o > 0; o >>= 1) ls += __shfl_xor_sync(0xffffffffu, ls, o);
    if (i >= SQ) continue;
    #pragma unroll
  for (int k = 0; k < 2; ++k) {
      const unsigned int t = (unsigned int)lane + 32u * k;
      if (t < 64u) out[qbase + (unsigned long long)i * 64u + t] = og_f32_to_f16((float)(ls > 0.0f ? acc[r][k] / ls : 0.0f));
    }
  }
}

__device__ __forceinline__ void og_attention_tiled_420ca568112a_part(const dim3 og_block_idx, const dim3 og_grid_dim, og_f16* out, const og_f16* in0, const og_f16* in1, const og_f16* in2) {
  const long long SQ = 32LL;
  const unsigned int qt = 1u - og_block_idx.x, h = og_block_idx.y, bz = og_block_idx.z;
  const unsigned int hk = h / 1u;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  long long L = 48LL;
  if (L < 0) L = 0;
  const unsigned long long kvoff = (unsigned long long)(bz * 4u + hk) * 3072ull;
  const unsigned long long qbase = (unsigned long long)(bz * 4u + h) * 2048ull;
  alignas(16) __shared__ float og_k[32][64];
  alignas(16) __shared__ float og_v[32][64];
  __shared__ float og_p[8][2][32];
  const long long last = og_min((long long)(qt + 1u) * 16LL, SQ) - 1LL;
  long long kend_l;
  { const long long i = last; kend_l = og_min((long long)L, (long long)L - SQ + (long long)i + 1LL); }
  const unsigned int kend = kend_l > 0 ? (unsigned int)kend_l : 0u;
  long long kfirst_l;
  { const long long i = (long long)qt * 16LL; kfirst_l = (((long long)(L) - 32LL + (long long)(i)) - 7LL); }
  const unsigned int kfirst = kfirst_l > 0 ? (unsigned int)(kfirst_l / 32) * 32u : 0u;
  float qv[2][2], acc[2][2], m[2], l[2];
  unsigned int lim[2];
  long long lo[2];
  unsigned int wlim = 0u;
  #pragma unroll
for (int r = 0; r < 2; ++r) {
    const long long i = (long long)qt * 16LL + warp * 2 + r;
    long long lm = i < SQ ? (long long)(og_min((long long)L, (long long)L - SQ + (long long)i + 1LL)) : 0LL;
    lim[r] = lm > 0 ? (unsigned int)lm : 0u;
    lo[r] = (((long long)(L) - 32LL + (long long)(i)) - 7LL);
    wlim = og_max(wlim, lim[r]);
    m[r] = __int_as_float(0xff800000); l[r] = 0.0f;
    #pragma unroll
  for (int k = 0; k < 2; ++k) {
      const unsigned int t = (unsigned int)lane + 32u * k;
      acc[r][k] = 0.0f;
      qv[r][k] = (i < SQ && t < 64u) ? og_f16_to_f32(in0[qbase + (unsigned long long)i * 64u + t]) : 0.0f;
    }
  }
  const bool vec_ok = (((unsigned long long)in1 | (unsigned long long)in2) & 15ull) == 0ull;
  uint4 kr[1], vr[1];
  auto fetch = [&](unsigned int k0) {
    #pragma unroll
  for (int p = 0; p < 1; ++p) {
      const unsigned int x = threadIdx.x + p * 256u;
      const bool ok = x < 256u && k0 + x / 8u < kend;
      const unsigned long long g = kvoff + (unsigned long long)k0 * 64u + (unsigned long long)x * 8u;
      kr[p] = ok ? *reinterpret_cast<const uint4*>(in1 + g) : uint4{0u, 0u, 0u, 0u};
      vr[p] = ok ? *reinterpret_cast<const uint4*>(in2 + g) : uint4{0u, 0u, 0u, 0u};
    }
  };
  if (vec_ok && kend > kfirst) fetch(kfirst);
  for (unsigned int k0 = kfirst; k0 < kend; k0 += 32u) {
    __syncthreads();
    if (vec_ok) {
      #pragma unroll
  for (int p = 0; p < 1; ++p) {
        const unsigned int x = threadIdx.x + p * 256u;
        if (x >= 256u) break;
        const unsigned int j = x / 8u, t = (x % 8u) * 8u;
        float f[8];
        f[0] = og_f16_to_f32((unsigned short)(kr[p].x & 0xffffu)); f[1] = og_f16_to_f32((unsigned short)(kr[p].x >> 16));
        f[2] = og_f16_to_f32((unsigned short)(kr[p].y & 0xffffu)); f[3] = og_f16_to_f32((unsigned short)(kr[p].y >> 16));
        f[4] = og_f16_to_f32((unsigned short)(kr[p].z & 0xffffu)); f[5] = og_f16_to_f32((unsigned short)(kr[p].z >> 16));
        f[6] = og_f16_to_f32((unsigned short)(kr[p].w & 0xffffu)); f[7] = og_f16_to_f32((unsigned short)(kr[p].w >> 16));
        *reinterpret_cast<float4*>(&og_k[j][t + 0u]) = float4{f[0], f[1], f[2], f[3]};
        *reinterpret_cast<float4*>(&og_k[j][t + 4u]) = float4{f[4], f[5], f[6], f[7]};
        f[0] = og_f16_to_f32((unsigned short)(vr[p].x & 0xffffu)); f[1] = og_f16_to_f32((unsigned short)(vr[p].x >> 16));
        f[2] = og_f16_to_f32((unsigned short)(vr[p].y & 0xffffu)); f[3] = og_f16_to_f32((unsigned short)(vr[p].y >> 16));
        f[4] = og_f16_to_f32((unsigned short)(vr[p].z & 0xffffu)); f[5] = og_f16_to_f32((unsigned short)(vr[p].z >> 16));
        f[6] = og_f16_to_f32((unsigned short)(vr[p].w & 0xffffu)); f[7] = og_f16_to_f32((unsigned short)(vr[p].w >> 16));
        *reinterpret_cast<float4*>(&og_v[j][t + 0u]) = float4{f[0], f[1], f[2], f[3]};
        *reinterpret_cast<float4*>(&og_v[j][t + 4u]) = float4{f[4], f[5], f[6], f[7]};
      }
      if (k0 + 32u < kend) fetch(k0 + 32u);
    } else {
      for (unsigned int x = threadIdx.x; x < 2048u; x += 256u) {
        const unsigned int j = x / 64u, t = x % 64u;
        const unsigned long long g = kvoff + (unsigned long long)(k0 + j) * 64u + t;
        const bool ok = k0 + j < kend;
        og_k[j][t] = ok ? og_f16_to_f32(in1[g]) : 0.0f;
        og_v[j][t] = ok ? og_f16_to_f32(in2[g]) : 0.0f;
      }
    }
    __syncthreads();
    if (k0 >= wlim) continue;
    float part[2][32];
    #pragma unroll
  for (int j = 0; j < 32; ++j) {
      float kf[2];
      #pragma unroll
    for (int k = 0; k < 2; ++k) {
        const unsigned int t = (unsigned int)lane + 32u * k;
        kf[k] = t < 64u ? og_k[j][t] : 0.0f;
      }
      #pragma unroll
    for (int r = 0; r < 2; ++r) {
        float dot = 0.0f;
        #pragma unroll
      for (int k = 0; k < 2; ++k) dot += qv[r][k] * kf[k];
        part[r][j] = dot;
      }
    }
    { const bool up = (lane & 16) != 0;
      #pragma unroll
      for (int r = 0; r < 2; ++r) {
        #pragma unroll
        for (int i = 0; i < 16; ++i) {
          const float send = up ? part[r][i] : part[r][i + 16];
          const float keep = up ? part[r][i + 16] : part[r][i];
          part[r][i] = keep + __shfl_xor_sync(0xffffffffu, send, 16);
        }
      }
    }
    { const bool up = (lane & 8) != 0;
      #pragma unroll
      for (int r = 0; r < 2; ++r) {
        #pragma unroll
        for (int i = 0; i < 8; ++i) {
          const float send = up ? part[r][i] : part[r][i + 8];
          const float keep = up ? part[r][i + 8] : part[r][i];
          part[r][i] = keep + __shfl_xor_sync(0xffffffffu, send, 8);
        }
      }
    }
    { const bool up = (lane & 4) != 0;
      #pragma unroll
      for (int r = 0; r < 2; ++r) {
        #pragma unroll
        for (int i = 0; i < 4; ++i) {
          const float send = up ? part[r][i] : part[r][i + 4];
          const float keep = up ? part[r][i + 4] : part[r][i];
          part[r][i] = keep + __shfl_xor_sync(0xffffffffu, send, 4);
        }
      }
    }
    { const bool up = (lane & 2) != 0;
      #pragma unroll
      for (int r = 0; r < 2; ++r) {
        #pragma unroll
        for (int i = 0; i < 2; ++i) {
          const float send = up ? part[r][i] : part[r][i + 2];
          const float keep = up ? part[r][i + 2] : part[r][i];
          part[r][i] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
        }
      }
    }
    { const bool up = (lane & 1) != 0;
      #pragma unroll
      for (int r = 0; r < 2; ++r) {
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
          const float send = up ? part[r][i] : part[r][i + 1];
          const float keep = up ? part[r][i + 1] : part[r][i];
          part[r][i] = keep + __shfl_xor_sync(0xffffffffu, send, 1);
        }
      }
    }
    const unsigned int key = k0 + (unsigned int)lane;
    #pragma unroll
  for (int r = 0; r < 2; ++r) {
      const float sc = (key < lim[r] && (long long)(key) >= lo[r]) ? part[r][0] * 1.250000000e-01f : __int_as_float(0xff800000);
      float mx = sc;
      for (int o = 16; o > 0; o >>= 1) mx = og_max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      mx = og_max(mx, m[r]);
      float p = 0.0f;
      if (mx != __int_as_float(0xff800000)) {
        const float corr = expf(m[r] - mx);
        p = sc == __int_as_float(0xff800000) ? 0.0f : expf(sc - mx);
        l[r] = l[r] * corr + p;
        #pragma unroll
      for (int k = 0; k < 2; ++k) acc[r][k] *= corr;
        m[r] = mx;
      }
      og_p[warp][r][lane] = p;
    }
    __syncwarp();
    #pragma unroll 8
  for (int j = 0; j < 32; ++j) {
      float vf[2];
      #pragma unroll
    for (int k = 0; k < 2; ++k) {
        const unsigned int t = (unsigned int)lane + 32u * k;
        vf[k] = t < 64u ? og_v[j][t] : 0.0f;
      }
      #pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float pj = og_p[warp][r][j];
        #pragma unroll
      for (int k = 0; k < 2; ++k) acc[r][k] += pj * vf[k];
      }
    }
    __syncwarp();
  }
  #pragma unroll
for (int r = 0; r < 2; ++r) {
    const long long i = (long long)qt * 16LL + warp * 2 + r;
    float ls = l[r];
    for (int o = 16; o > 0; o >>= 1) ls += __shfl_xor_sync(0xffffffffu, ls, o);
    if (i >= SQ) continue;
    #pragma unroll
  for (int k = 0; k < 2; ++k) {
      const unsigned int t = (unsigned int)lane + 32u * k;
      if (t < 64u) out[qbase + (unsigned long long)i * 64u + t] = og_f32_to_f16((float)(ls > 0.0f ? acc[r][k] / ls : 0.0f));
    }
  }
}

extern "C" __global__ void og_merged_abf5fbb861aa(og_f16* m0_out, const og_f16* m0_in0, const og_f16* m0_in1, const og_f16* m0_in2, const int* m0_in3, const unsigned char* m0_in4, og_f16* m1_out, const og_f16* m1_in0, const og_f16* m1_in1, const og_f16* m1_in2, const og_f16* m1_in3, og_f16* m2_out, const og_f16* m2_in0, const og_f16* m2_in1, const og_f16* m2_in2) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  {
  const unsigned int og_b = blockIdx.x;
  if (og_b < 8u) {
    og_attention_decode_wide_a2bc1d287dc3_part(dim3{og_b % 1u, (og_b / 1u) % 4u, og_b / 4u}, dim3{1u, 4u, 2u}, m0_out, m0_in0, m0_in1, m0_in2, m0_in3, m0_in4);
  } else if (og_b < 16u) {
    const unsigned int og_r = og_b - 8u;
    og_attention_tiled_0eeb8a47f611_part(dim3{og_r % 2u, (og_r / 2u) % 4u, 0u}, dim3{2u, 4u, 1u}, m1_out, m1_in0, m1_in1, m1_in2, m1_in3);
  } else {
    const unsigned int og_r = og_b - 16u;
    og_attention_tiled_420ca568112a_part(dim3{og_r % 2u, (og_r / 2u) % 4u, 0u}, dim3{2u, 4u, 1u}, m2_out, m2_in0, m2_in1, m2_in2);
  }
  }
}
