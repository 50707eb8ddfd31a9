
extern "C" __global__ void og_attention_tiled_12b1af0e9c8c(float* out, const float* in0, const float* in1, const float* in2) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const long long SQ = 8LL;
  const unsigned int qt = 0u - blockIdx.x, h = blockIdx.y, bz = blockIdx.z;
  const unsigned int hk = h / 1u;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  long long L = 8LL;
  if (L < 0) L = 0;
  const unsigned long long kvoff = (unsigned long long)(bz * 4u + hk) * 128ull;
  const unsigned long long qbase = (unsigned long long)(bz * 4u + h) * 128ull;
  alignas(16) __shared__ float og_k[32][16];
  alignas(16) __shared__ float og_v[32][16];
  __shared__ float og_p[8][2][32];
  const long long last = og_min((long long)(qt + 1u) * 16LL, SQ) - 1LL;
  long long kend_l;
  { const long long i = last; kend_l = og_min((long long)L, (long long)L - SQ + (long long)i + 1LL); }
  const unsigned int kend = kend_l > 0 ? (unsigned int)kend_l : 0u;
  float qv[2][1], acc[2][1], m[2], l[2];
  unsigned int lim[2];
  unsigned int wlim = 0u;
  #pragma unroll
for (int r = 0; r < 2; ++r) {
    const long long i = (long long)qt * 16LL + warp * 2 + r;
    long long lm = i < SQ ? (long long)(og_min((long long)L, (long long)L - SQ + (long long)i + 1LL)) : 0LL;
    lim[r] = lm > 0 ? (unsigned int)lm : 0u;
    wlim = og_max(wlim, lim[r]);
    m[r] = __int_as_float(0xff800000); l[r] = 0.0f;
    #pragma unroll
  for (int k = 0; k < 1; ++k) {
      const unsigned int t = (unsigned int)lane + 32u * k;
      acc[r][k] = 0.0f;
      qv[r][k] = (i < SQ && t < 16u) ? in0[qbase + (unsigned long long)i * 16u + t] : 0.0f;
    }
  }
  const bool vec_ok = (((unsigned long long)in1 | (unsigned long long)in2) & 15ull) == 0ull;
  uint4 kr[1], vr[1];
  auto fetch = [&](unsigned int k0) {
    #pragma unroll
  for (int p = 0; p < 1; ++p) {
      const unsigned int x = threadIdx.x + p * 256u;
      const bool ok = x < 128u && k0 + x / 4u < kend;
      const unsigned long long g = kvoff + (unsigned long long)k0 * 16u + (unsigned long long)x * 4u;
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
        if (x >= 128u) break;
        const unsigned int j = x / 4u, t = (x % 4u) * 4u;
        float f[4];
        f[0] = __uint_as_float(kr[p].x);
        f[1] = __uint_as_float(kr[p].y);
        f[2] = __uint_as_float(kr[p].z);
        f[3] = __uint_as_float(kr[p].w);
        *reinterpret_cast<float4*>(&og_k[j][t + 0u]) = float4{f[0], f[1], f[2], f[3]};
        f[0] = __uint_as_float(vr[p].x);
        f[1] = __uint_as_float(vr[p].y);
        f[2] = __uint_as_float(vr[p].z);
        f[3] = __uint_as_float(vr[p].w);
        *reinterpret_cast<float4*>(&og_v[j][t + 0u]) = float4{f[0], f[1], f[2], f[3]};
      }
      if (k0 + 32u < kend) fetch(k0 + 32u);
    } else {
      for (unsigned int x = threadIdx.x; x < 512u; x += 256u) {
        const unsigned int j = x / 16u, t = x % 16u;
        const unsigned long long g = kvoff + (unsigned long long)(k0 + j) * 16u + t;
        const bool ok = k0 + j < kend;
        og_k[j][t] = ok ? in1[g] : 0.0f;
        og_v[j][t] = ok ? in2[g] : 0.0f;
      }
    }
    __syncthreads();
    if (k0 >= wlim) continue;
    float part[2][32];
    #pragma unroll
  for (int j = 0; j < 32; ++j) {
      float kf[1];
      #pragma unroll
    for (int k = 0; k < 1; ++k) {
        const unsigned int t = (unsigned int)lane + 32u * k;
        kf[k] = t < 16u ? og_k[j][t] : 0.0f;
      }
      #pragma unroll
    for (int r = 0; r < 2; ++r) {
        float dot = 0.0f;
        #pragma unroll
      for (int k = 0; k < 1; ++k) dot += qv[r][k] * kf[k];
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
      const float sc = key < lim[r] ? part[r][0] * 2.500000000e-01f : __int_as_float(0xff800000);
      float mx = sc;
      for (int o = 16; o > 0; o >>= 1) mx = og_max(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      mx = og_max(mx, m[r]);
      float p = 0.0f;
      if (mx != __int_as_float(0xff800000)) {
        const float corr = expf(m[r] - mx);
        p = sc == __int_as_float(0xff800000) ? 0.0f : expf(sc - mx);
        l[r] = l[r] * corr + p;
        #pragma unroll
      for (int k = 0; k < 1; ++k) acc[r][k] *= corr;
        m[r] = mx;
      }
      og_p[warp][r][lane] = p;
    }
    __syncwarp();
    #pragma unroll 8
  for (int j = 0; j < 32; ++j) {
      float vf[1];
      #pragma unroll
    for (int k = 0; k < 1; ++k) {
        const unsigned int t = (unsigned int)lane + 32u * k;
        vf[k] = t < 16u ? og_v[j][t] : 0.0f;
      }
      #pragma unroll
    for (int r = 0; r < 2; ++r) {
        const float pj = og_p[warp][r][j];
        #pragma unroll
      for (int k = 0; k < 1; ++k) acc[r][k] += pj * vf[k];
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
  for (int k = 0; k < 1; ++k) {
      const unsigned int t = (unsigned int)lane + 32u * k;
      if (t < 16u) out[qbase + (unsigned long long)i * 16u + t] = (float)(ls > 0.0f ? acc[r][k] / ls : 0.0f);
    }
  }
}

extern "C" __global__ void og_copy_8697eb34f077(unsigned int* out, const unsigned int* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  if (((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in0)) & 15ull) == 0ull) {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 128u; i += (unsigned int)gridDim.x * blockDim.x) {
      reinterpret_cast<uint4*>(out)[i] = reinterpret_cast<const uint4*>(in0)[(i / 16u) * 4u + ((i / 4u) % 4u) * 32u + (i % 4u)];
    }
  } else {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 512u; i += (unsigned int)gridDim.x * blockDim.x) {
      out[i] = in0[(i / 64u) * 16u + ((i / 16u) % 4u) * 128u + (i % 16u)];
    }
  }
}

extern "C" __global__ void og_epilogue_443f3c172b3d(float* out, const float* in0, const float* in1, const float* in2, const float* in3) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const bool og_aligned = ((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in3)) & 15ull) == 0ull;
  if (og_aligned) {
    for (unsigned int og_v = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; og_v < 128u; og_v += (unsigned int)gridDim.x * blockDim.x) {
      const uint4 og_ra = reinterpret_cast<const uint4*>(out)[og_v];
      const uint4 og_r3 = reinterpret_cast<const uint4*>(in3)[og_v];
      uint4 og_o;
      float* og_oe = reinterpret_cast<float*>(&og_o);
      #pragma unroll
  for (unsigned int og_e = 0; og_e < 4u; ++og_e) {
        const unsigned int i = og_v * 4u + og_e;
        const float a = reinterpret_cast<const float*>(&og_ra)[og_e];
        const float p3 = reinterpret_cast<const float*>(&og_r3)[og_e];
        const float p2 = in2[(i % 64u)];
        const float v0 = (a + p2);
        const float v1 = (p3 + v0);
        og_oe[og_e] = (float)(v1);
      }
      reinterpret_cast<uint4*>(out)[og_v] = og_o;
    }
  } else {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 512u; i += (unsigned int)gridDim.x * blockDim.x) {
      const float a = out[i];
      const float p2 = in2[(i % 64u)];
      const float p3 = in3[i];
      const float v0 = (a + p2);
      const float v1 = (p3 + v0);
      out[i] = (float)(v1);
    }
  }
}

extern "C" __global__ void og_epilogue_71b5a2758d56(float* out, const float* in0, const float* in1, const float* in2) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const bool og_aligned = ((reinterpret_cast<unsigned long long>(out)) & 15ull) == 0ull;
  if (og_aligned) {
    for (unsigned int og_v = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; og_v < 512u; og_v += (unsigned int)gridDim.x * blockDim.x) {
      const uint4 og_ra = reinterpret_cast<const uint4*>(out)[og_v];
      uint4 og_o;
      float* og_oe = reinterpret_cast<float*>(&og_o);
      #pragma unroll
  for (unsigned int og_e = 0; og_e < 4u; ++og_e) {
        const unsigned int i = og_v * 4u + og_e;
        const float a = reinterpret_cast<const float*>(&og_ra)[og_e];
        const float p2 = in2[(i % 256u)];
        const float v0 = (a + p2);
        const float v1 = (0.5f * v0 * (1.0f + tanhf(7.978845835e-01f * (v0 + 4.471499845e-02f * v0 * v0 * v0))));
        og_oe[og_e] = (float)(v1);
      }
      reinterpret_cast<uint4*>(out)[og_v] = og_o;
    }
  } else {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 2048u; i += (unsigned int)gridDim.x * blockDim.x) {
      const float a = out[i];
      const float p2 = in2[(i % 256u)];
      const float v0 = (a + p2);
      const float v1 = (0.5f * v0 * (1.0f + tanhf(7.978845835e-01f * (v0 + 4.471499845e-02f * v0 * v0 * v0))));
      out[i] = (float)(v1);
    }
  }
}

extern "C" __global__ void og_epilogue_af7b5377fb2a(float* out, const float* in0, const float* in1, const float* in2) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const bool og_aligned = ((reinterpret_cast<unsigned long long>(out)) & 15ull) == 0ull;
  if (og_aligned) {
    for (unsigned int og_v = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; og_v < 384u; og_v += (unsigned int)gridDim.x * blockDim.x) {
      const uint4 og_ra = reinterpret_cast<const uint4*>(out)[og_v];
      uint4 og_o;
      float* og_oe = reinterpret_cast<float*>(&og_o);
      #pragma unroll
  for (unsigned int og_e = 0; og_e < 4u; ++og_e) {
        const unsigned int i = og_v * 4u + og_e;
        const float a = reinterpret_cast<const float*>(&og_ra)[og_e];
        const float p2 = in2[(i % 192u)];
        const float v0 = (a + p2);
        og_oe[og_e] = (float)(v0);
      }
      reinterpret_cast<uint4*>(out)[og_v] = og_o;
    }
  } else {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 1536u; i += (unsigned int)gridDim.x * blockDim.x) {
      const float a = out[i];
      const float p2 = in2[(i % 192u)];
      const float v0 = (a + p2);
      out[i] = (float)(v0);
    }
  }
}

extern "C" __global__ void og_layer_norm_497aa43e34fe(float* out, const float* in0, const float* in1, const float* in2) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  typedef unsigned int IDX;
  const IDX COLS = 64u;
  const IDX row = blockIdx.x;
  __shared__ float og_scratch[32];
  auto arg0_at = [&](IDX j) -> float {
    const IDX xi = row * COLS + j;
    const float p0 = in0[xi];
    return p0;
  };
  auto arg1_at = [&](IDX j) -> float {
    const IDX xi = row * COLS + j;
    const float p1 = in1[(xi % 64u)];
    return p1;
  };
  auto arg2_at = [&](IDX j) -> float {
    const IDX xi = row * COLS + j;
    const float p2 = in2[(xi % 64u)];
    return p2;
  };
  float x[2];
  float w1[2];
  float w2[2];
  #pragma unroll
  for (int u = 0; u < 2; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 32u;
    x[u] = arg0_at(j);
    w1[u] = arg1_at(j);
    w2[u] = arg2_at(j);
  }
  const float k0 = (float)arg0_at(0);
  float s = 0.0f;
  #pragma unroll
  for (int u = 0; u < 2; ++u) {
    s += (float)x[u] - k0;
  }
  const float mu = og_block_reduce(s, og_scratch, OgSum(), (float)0) / (float)COLS;
  float q = 0.0f;
  #pragma unroll
  for (int u = 0; u < 2; ++u) {
    const float c = ((float)x[u] - k0) - mu;
    q += c * c;
  }
  q = og_block_reduce(q, og_scratch, OgSum(), (float)0);
  const float r = sqrtf(q / (float)COLS + 9.999999747e-06f);
  #pragma unroll
  for (int u = 0; u < 2; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 32u;
    const float a = (((float)x[u] - k0) - mu) / r * w1[u] + w2[u];
      const IDX oi = row * COLS + j;
      out[oi] = (float)(a);
  }
}

__device__ __forceinline__ void og_copy_5a6405a022a9_part(const dim3 og_block_idx, const dim3 og_grid_dim, unsigned int* out, const unsigned int* in0) {
  if (((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in0)) & 15ull) == 0ull) {
    for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 128u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
      reinterpret_cast<uint4*>(out)[i] = reinterpret_cast<const uint4*>(in0)[(i / 32u) * 4u + ((i / 4u) % 8u) * 16u + (i % 4u)];
    }
  } else {
    for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 512u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
      out[i] = in0[(i / 128u) * 16u + ((i / 16u) % 8u) * 64u + (i % 16u)];
    }
  }
}

extern "C" __global__ void og_merged_a89de209612d(unsigned int* m0_out, const unsigned int* m0_in0, unsigned int* m1_out, const unsigned int* m1_in0, unsigned int* m2_out, const unsigned int* m2_in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  {
  const unsigned int og_b = blockIdx.x;
  if (og_b < 1u) {
    og_copy_5a6405a022a9_part(dim3{og_b, 0u, 0u}, dim3{1u, 1u, 1u}, m0_out, m0_in0);
  } else if (og_b < 2u) {
    const unsigned int og_r = og_b - 1u;
    og_copy_5a6405a022a9_part(dim3{og_r, 0u, 0u}, dim3{1u, 1u, 1u}, m1_out, m1_in0);
  } else {
    const unsigned int og_r = og_b - 2u;
    og_copy_5a6405a022a9_part(dim3{og_r, 0u, 0u}, dim3{1u, 1u, 1u}, m2_out, m2_in0);
  }
  }
}

__device__ __forceinline__ void og_copy_f80ae311d2f2_part(const dim3 og_block_idx, const dim3 og_grid_dim, unsigned int* out, const unsigned int* in0) {
  if (((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in0)) & 15ull) == 0ull) {
    for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 128u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
      reinterpret_cast<uint4*>(out)[i] = reinterpret_cast<const uint4*>(in0)[(i / 16u) * 48u + (i % 16u)];
    }
  } else {
    for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 512u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
      out[i] = in0[(i / 64u) * 192u + (i % 64u)];
    }
  }
}

__device__ __forceinline__ void og_copy_9a104b3841fb_part(const dim3 og_block_idx, const dim3 og_grid_dim, unsigned int* out, const unsigned int* in0) {
  if (((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in0)) & 15ull) == 0ull) {
    for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 128u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
      reinterpret_cast<uint4*>(out)[i] = reinterpret_cast<const uint4*>(in0)[16u + (i / 16u) * 48u + (i % 16u)];
    }
  } else {
    for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 512u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
      out[i] = in0[64u + (i / 64u) * 192u + (i % 64u)];
    }
  }
}

__device__ __forceinline__ void og_copy_ff7dd463e3ac_part(const dim3 og_block_idx, const dim3 og_grid_dim, unsigned int* out, const unsigned int* in0) {
  if (((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in0)) & 15ull) == 0ull) {
    for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 128u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
      reinterpret_cast<uint4*>(out)[i] = reinterpret_cast<const uint4*>(in0)[32u + (i / 16u) * 48u + (i % 16u)];
    }
  } else {
    for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 512u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
      out[i] = in0[128u + (i / 64u) * 192u + (i % 64u)];
    }
  }
}

extern "C" __global__ void og_merged_f0d6ee0adfb0(unsigned int* m0_out, const unsigned int* m0_in0, unsigned int* m1_out, const unsigned int* m1_in0, unsigned int* m2_out, const unsigned int* m2_in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  {
  const unsigned int og_b = blockIdx.x;
  if (og_b < 1u) {
    og_copy_f80ae311d2f2_part(dim3{og_b, 0u, 0u}, dim3{1u, 1u, 1u}, m0_out, m0_in0);
  } else if (og_b < 2u) {
    const unsigned int og_r = og_b - 1u;
    og_copy_9a104b3841fb_part(dim3{og_r, 0u, 0u}, dim3{1u, 1u, 1u}, m1_out, m1_in0);
  } else {
    const unsigned int og_r = og_b - 2u;
    og_copy_ff7dd463e3ac_part(dim3{og_r, 0u, 0u}, dim3{1u, 1u, 1u}, m2_out, m2_in0);
  }
  }
}
