
extern "C" __global__ void og_attention_decode_6adf0a61696d(float* out, const float* in0, const float* in1, const float* in2, const int* in3) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const unsigned int c = blockIdx.x, hr = blockIdx.y, bz = blockIdx.z;
  const unsigned int hk = hr / 1u, rt = hr % 1u;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  long long Lx = og_min((long long)in3[0], 16LL);
  if (Lx < 0) Lx = 0;
  const unsigned int L = (unsigned int)Lx;
  const unsigned long long kvoff = (unsigned long long)(bz * 2u + hk) * 384ull;
  auto qoff_of = [&](unsigned int gr) -> unsigned long long {
    const unsigned int h = hk * 2u + gr / 1u, i = gr % 1u;
    return ((unsigned long long)(bz * 4u + h) * 1u + i) * 24u;
  };
  float qv[2][1];
  unsigned int lim[2];
  unsigned int kend = 0u;
  #pragma unroll
  for (int r = 0; r < 2; ++r) {
    const unsigned int gr = rt * 2u + r;
    const bool active = gr < 2u;
    long long lm = active ? (long long)L : 0LL;
    if (active) lm = og_min(lm, (long long)L - 1LL + (long long)(gr % 1u) + 1LL);
    if (lm < 0) lm = 0;
    lim[r] = (unsigned int)lm;
    kend = og_max(kend, lim[r]);
    const unsigned long long qo = active ? qoff_of(gr) : 0ull;
    #pragma unroll
    for (int k = 0; k < 1; ++k) {
      const unsigned int t = (unsigned int)lane * 1u + k;
      qv[r][k] = (active && t < 24u) ? in0[qo + t] : 0.0f;
    }
  }
  const unsigned int k0 = c * 16u;
  const unsigned int kc1 = og_min(k0 + 16u, 16u);
  const unsigned int k1 = og_min(kc1, kend);
  float m[2], l[2], acc[2][1];
  #pragma unroll
  for (int r = 0; r < 2; ++r) {
    m[r] = __int_as_float(0xff800000); l[r] = 0.0f;
    #pragma unroll
    for (int k = 0; k < 1; ++k) acc[r][k] = 0.0f;
  }
  for (unsigned int j0 = k0 + (unsigned int)warp * 2u; j0 < kc1; j0 += 16u) {
    float kf[2][1], vf[2][1];
    #pragma unroll
  for (int u = 0; u < 2; ++u) {
      #pragma unroll
    for (int k = 0; k < 1; ++k) {
        const unsigned int t = (unsigned int)lane * 1u + k;
        kf[u][k] = t < 24u ? in1[kvoff + (unsigned long long)((j0 + u < kc1 ? j0 + u : j0)) * 24u + t] : 0.0f;
        vf[u][k] = t < 24u ? in2[kvoff + (unsigned long long)((j0 + u < kc1 ? j0 + u : j0)) * 24u + t] : 0.0f;
      }
    }
    if (j0 >= k1) break;
    #pragma unroll
  for (int r = 0; r < 2; ++r) {
      float sc[2];
      float mx = m[r];
      #pragma unroll
    for (int u = 0; u < 2; ++u) {
        float dot = 0.0f;
        #pragma unroll
      for (int k = 0; k < 1; ++k) dot += qv[r][k] * kf[u][k];
        for (int o = 16; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffffu, dot, o);
        sc[u] = (j0 + u < k1 && j0 + u < lim[r]) ? dot * 2.500000000e-01f : __int_as_float(0xff800000);
        mx = og_max(mx, sc[u]);
      }
      if (mx == __int_as_float(0xff800000)) continue;
      const float corr = expf(m[r] - mx);
      l[r] *= corr;
      #pragma unroll
    for (int k = 0; k < 1; ++k) acc[r][k] *= corr;
      #pragma unroll
    for (int u = 0; u < 2; ++u) {
        const float p = sc[u] == __int_as_float(0xff800000) ? 0.0f : expf(sc[u] - mx);
        l[r] += p;
        #pragma unroll
      for (int k = 0; k < 1; ++k) acc[r][k] += p * vf[u][k];
      }
      m[r] = mx;
    }
  }
  __shared__ float og_m[8][2], og_l[8][2];
  __shared__ float og_a[8][2][24];
  #pragma unroll
  for (int r = 0; r < 2; ++r) {
    if (lane == 0) { og_m[warp][r] = m[r]; og_l[warp][r] = l[r]; }
    #pragma unroll
    for (int k = 0; k < 1; ++k) {
      const unsigned int t = (unsigned int)lane * 1u + k;
      if (t < 24u) og_a[warp][r][t] = acc[r][k];
    }
  }
  __syncthreads();
  for (unsigned int t = threadIdx.x; t < 48u; t += 256u) {
    const unsigned int r = t / 24u, dd = t % 24u;
    float M = __int_as_float(0xff800000);
    for (int w = 0; w < 8; ++w) M = og_max(M, og_m[w][r]);
    float Ls = 0.0f, A = 0.0f;
    for (int w = 0; w < 8; ++w) {
      const float wt = og_m[w][r] == __int_as_float(0xff800000) ? 0.0f : expf(og_m[w][r] - M);
      Ls += og_l[w][r] * wt;
      A += og_a[w][r][dd] * wt;
    }
    const unsigned int gr = rt * 2u + r;
    if (gr < 2u) out[qoff_of(gr) + dd] = (float)(Ls > 0.0f ? A / Ls : 0.0f);
  }
}
