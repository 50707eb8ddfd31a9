
extern "C" __global__ void og_copy_c813fecc9963(unsigned int* out, const unsigned int* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 4u; i += (unsigned int)gridDim.x * blockDim.x) {
    out[i] = in0[7u + i * 8u];
  }
}

extern "C" __global__ void og_epilogue_440f5af0f31e(float* out, const float* in0, const float* in1, const float* in2) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const bool og_aligned = ((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in2)) & 15ull) == 0ull;
  if (og_aligned) {
    for (unsigned int og_v = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; og_v < 128u; og_v += (unsigned int)gridDim.x * blockDim.x) {
      const uint4 og_ra = reinterpret_cast<const uint4*>(out)[og_v];
      const uint4 og_r2 = reinterpret_cast<const uint4*>(in2)[og_v];
      uint4 og_o;
      float* og_oe = reinterpret_cast<float*>(&og_o);
      #pragma unroll
  for (unsigned int og_e = 0; og_e < 4u; ++og_e) {
        const unsigned int i = og_v * 4u + og_e;
        const float a = reinterpret_cast<const float*>(&og_ra)[og_e];
        const float p2 = reinterpret_cast<const float*>(&og_r2)[og_e];
        const float v0 = (a * og_sigmoid(a));
        const float v1 = (v0 * p2);
        og_oe[og_e] = (float)(v1);
      }
      reinterpret_cast<uint4*>(out)[og_v] = og_o;
    }
  } else {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 512u; i += (unsigned int)gridDim.x * blockDim.x) {
      const float a = out[i];
      const float p2 = in2[i];
      const float v0 = (a * og_sigmoid(a));
      const float v1 = (v0 * p2);
      out[i] = (float)(v1);
    }
  }
}

extern "C" __global__ void og_epilogue_a4467e743839(float* out, const float* in0, const float* in1, const float* in2) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const bool og_aligned = ((reinterpret_cast<unsigned long long>(out)) & 15ull) == 0ull;
  if (og_aligned) {
    for (unsigned int og_v = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; og_v < 64u; og_v += (unsigned int)gridDim.x * blockDim.x) {
      const uint4 og_ra = reinterpret_cast<const uint4*>(out)[og_v];
      uint4 og_o;
      float* og_oe = reinterpret_cast<float*>(&og_o);
      #pragma unroll
  for (unsigned int og_e = 0; og_e < 4u; ++og_e) {
        const unsigned int i = og_v * 4u + og_e;
        const float a = reinterpret_cast<const float*>(&og_ra)[og_e];
        const float p2 = in2[(i / 64u)];
        const float v0 = (a * p2);
        og_oe[og_e] = (float)(v0);
      }
      reinterpret_cast<uint4*>(out)[og_v] = og_o;
    }
  } else {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 256u; i += (unsigned int)gridDim.x * blockDim.x) {
      const float a = out[i];
      const float p2 = in2[(i / 64u)];
      const float v0 = (a * p2);
      out[i] = (float)(v0);
    }
  }
}

extern "C" __global__ void og_epilogue_cb748f8f2710(float* out, const float* in0, const float* in1, const float* in2, const float* in3, const float* in4, const float* in5, const float* in6, const float* in7, const float* in8, const float* in9, const float* in10) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const bool og_aligned = ((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in2) | reinterpret_cast<unsigned long long>(in3) | reinterpret_cast<unsigned long long>(in4) | reinterpret_cast<unsigned long long>(in5) | reinterpret_cast<unsigned long long>(in6) | reinterpret_cast<unsigned long long>(in7) | reinterpret_cast<unsigned long long>(in8) | reinterpret_cast<unsigned long long>(in9) | reinterpret_cast<unsigned long long>(in10)) & 15ull) == 0ull;
  if (og_aligned) {
    for (unsigned int og_v = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; og_v < 64u; og_v += (unsigned int)gridDim.x * blockDim.x) {
      const uint4 og_ra = reinterpret_cast<const uint4*>(out)[og_v];
      const uint4 og_r2 = reinterpret_cast<const uint4*>(in2)[og_v];
      const uint4 og_r3 = reinterpret_cast<const uint4*>(in3)[og_v];
      const uint4 og_r4 = reinterpret_cast<const uint4*>(in4)[og_v];
      const uint4 og_r5 = reinterpret_cast<const uint4*>(in5)[og_v];
      const uint4 og_r6 = reinterpret_cast<const uint4*>(in6)[og_v];
      const uint4 og_r7 = reinterpret_cast<const uint4*>(in7)[og_v];
      const uint4 og_r8 = reinterpret_cast<const uint4*>(in8)[og_v];
      const uint4 og_r9 = reinterpret_cast<const uint4*>(in9)[og_v];
      const uint4 og_r10 = reinterpret_cast<const uint4*>(in10)[og_v];
      uint4 og_o;
      float* og_oe = reinterpret_cast<float*>(&og_o);
      #pragma unroll
  for (unsigned int og_e = 0; og_e < 4u; ++og_e) {
        const unsigned int i = og_v * 4u + og_e;
        const float a = reinterpret_cast<const float*>(&og_ra)[og_e];
        const float p2 = reinterpret_cast<const float*>(&og_r2)[og_e];
        const float p3 = reinterpret_cast<const float*>(&og_r3)[og_e];
        const float p4 = reinterpret_cast<const float*>(&og_r4)[og_e];
        const float p5 = reinterpret_cast<const float*>(&og_r5)[og_e];
        const float p6 = reinterpret_cast<const float*>(&og_r6)[og_e];
        const float p7 = reinterpret_cast<const float*>(&og_r7)[og_e];
        const float p8 = reinterpret_cast<const float*>(&og_r8)[og_e];
        const float p9 = reinterpret_cast<const float*>(&og_r9)[og_e];
        const float p10 = reinterpret_cast<const float*>(&og_r10)[og_e];
        const float v0 = (a + p2);
        const float v1 = (v0 + p3);
        const float v2 = (v1 + p4);
        const float v3 = (v2 + p5);
        const float v4 = (v3 + p6);
        const float v5 = (v4 + p7);
        const float v6 = (v5 + p8);
        const float v7 = (v6 + p9);
        const float v8 = (p10 + v7);
        og_oe[og_e] = (float)(v8);
      }
      reinterpret_cast<uint4*>(out)[og_v] = og_o;
    }
  } else {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 256u; i += (unsigned int)gridDim.x * blockDim.x) {
      const float a = out[i];
      const float p2 = in2[i];
      const float p3 = in3[i];
      const float p4 = in4[i];
      const float p5 = in5[i];
      const float p6 = in6[i];
      const float p7 = in7[i];
      const float p8 = in8[i];
      const float p9 = in9[i];
      const float p10 = in10[i];
      const float v0 = (a + p2);
      const float v1 = (v0 + p3);
      const float v2 = (v1 + p4);
      const float v3 = (v2 + p5);
      const float v4 = (v3 + p6);
      const float v5 = (v4 + p7);
      const float v6 = (v5 + p8);
      const float v7 = (v6 + p9);
      const float v8 = (p10 + v7);
      out[i] = (float)(v8);
    }
  }
}

__device__ __forceinline__ void og_copy_811771197b9d_part(const dim3 og_block_idx, const dim3 og_grid_dim, unsigned int* out, const unsigned int* in0) {
  for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 4u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
    out[i] = in0[i * 8u];
  }
}

__device__ __forceinline__ void og_copy_4db54b44c507_part(const dim3 og_block_idx, const dim3 og_grid_dim, unsigned int* out, const unsigned int* in0) {
  for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 4u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
    out[i] = in0[3u + i * 8u];
  }
}

extern "C" __global__ void og_merged_3e84b2b0362e(unsigned int* m0_out, const unsigned int* m0_in0, unsigned int* m1_out, const unsigned int* m1_in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  {
  const unsigned int og_b = blockIdx.x;
  if (og_b < 1u) {
    og_copy_811771197b9d_part(dim3{og_b, 0u, 0u}, dim3{1u, 1u, 1u}, m0_out, m0_in0);
  } else {
    const unsigned int og_r = og_b - 1u;
    og_copy_4db54b44c507_part(dim3{og_r, 0u, 0u}, dim3{1u, 1u, 1u}, m1_out, m1_in0);
  }
  }
}

__device__ __forceinline__ void og_copy_2c196d2f2566_part(const dim3 og_block_idx, const dim3 og_grid_dim, unsigned int* out, const unsigned int* in0) {
  for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 4u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
    out[i] = in0[1u + i * 8u];
  }
}

__device__ __forceinline__ void og_copy_f10ad0845088_part(const dim3 og_block_idx, const dim3 og_grid_dim, unsigned int* out, const unsigned int* in0) {
  for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 4u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
    out[i] = in0[4u + i * 8u];
  }
}

extern "C" __global__ void og_merged_917501a6d7b9(unsigned int* m0_out, const unsigned int* m0_in0, unsigned int* m1_out, const unsigned int* m1_in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  {
  const unsigned int og_b = blockIdx.x;
  if (og_b < 1u) {
    og_copy_2c196d2f2566_part(dim3{og_b, 0u, 0u}, dim3{1u, 1u, 1u}, m0_out, m0_in0);
  } else {
    const unsigned int og_r = og_b - 1u;
    og_copy_f10ad0845088_part(dim3{og_r, 0u, 0u}, dim3{1u, 1u, 1u}, m1_out, m1_in0);
  }
  }
}

__device__ __forceinline__ void og_epilogue_440f5af0f31e_part(const dim3 og_block_idx, const dim3 og_grid_dim, float* out, const float* in0, const float* in1, const float* in2) {
  const bool og_aligned = ((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in2)) & 15ull) == 0ull;
  if (og_aligned) {
    for (unsigned int og_v = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; og_v < 128u; og_v += (unsigned int)og_grid_dim.x * blockDim.x) {
      const uint4 og_ra = reinterpret_cast<const uint4*>(out)[og_v];
      const uint4 og_r2 = reinterpret_cast<const uint4*>(in2)[og_v];
      uint4 og_o;
      float* og_oe = reinterpret_cast<float*>(&og_o);
      #pragma unroll
  for (unsigned int og_e = 0; og_e < 4u; ++og_e) {
        const unsigned int i = og_v * 4u + og_e;
        const float a = reinterpret_cast<const float*>(&og_ra)[og_e];
        const float p2 = reinterpret_cast<const float*>(&og_r2)[og_e];
        const float v0 = (a * og_sigmoid(a));
        const float v1 = (v0 * p2);
        og_oe[og_e] = (float)(v1);
      }
      reinterpret_cast<uint4*>(out)[og_v] = og_o;
    }
  } else {
    for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 512u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
      const float a = out[i];
      const float p2 = in2[i];
      const float v0 = (a * og_sigmoid(a));
      const float v1 = (v0 * p2);
      out[i] = (float)(v1);
    }
  }
}

__device__ __forceinline__ void og_copy_ebe4433bec8e_part(const dim3 og_block_idx, const dim3 og_grid_dim, unsigned int* out, const unsigned int* in0) {
  for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 4u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
    out[i] = in0[6u + i * 8u];
  }
}

extern "C" __global__ void og_merged_b460f3d0666d(float* m0_out, const float* m0_in0, const float* m0_in1, const float* m0_in2, unsigned int* m1_out, const unsigned int* m1_in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  {
  const unsigned int og_b = blockIdx.x;
  if (og_b < 1u) {
    og_epilogue_440f5af0f31e_part(dim3{og_b, 0u, 0u}, dim3{1u, 1u, 1u}, m0_out, m0_in0, m0_in1, m0_in2);
  } else {
    const unsigned int og_r = og_b - 1u;
    og_copy_ebe4433bec8e_part(dim3{og_r, 0u, 0u}, dim3{1u, 1u, 1u}, m1_out, m1_in0);
  }
  }
}

__device__ __forceinline__ void og_copy_49a151997a11_part(const dim3 og_block_idx, const dim3 og_grid_dim, unsigned int* out, const unsigned int* in0) {
  for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 4u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
    out[i] = in0[2u + i * 8u];
  }
}

__device__ __forceinline__ void og_copy_4fefe21a78ec_part(const dim3 og_block_idx, const dim3 og_grid_dim, unsigned int* out, const unsigned int* in0) {
  for (unsigned int i = (unsigned int)og_block_idx.x * blockDim.x + threadIdx.x; i < 4u; i += (unsigned int)og_grid_dim.x * blockDim.x) {
    out[i] = in0[5u + i * 8u];
  }
}

extern "C" __global__ void og_merged_c0446cf0e380(unsigned int* m0_out, const unsigned int* m0_in0, unsigned int* m1_out, const unsigned int* m1_in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  {
  const unsigned int og_b = blockIdx.x;
  if (og_b < 1u) {
    og_copy_49a151997a11_part(dim3{og_b, 0u, 0u}, dim3{1u, 1u, 1u}, m0_out, m0_in0);
  } else {
    const unsigned int og_r = og_b - 1u;
    og_copy_4fefe21a78ec_part(dim3{og_r, 0u, 0u}, dim3{1u, 1u, 1u}, m1_out, m1_in0);
  }
  }
}

extern "C" __global__ void og_rms_norm_c2a6aee4d4a6(float* out, const float* in0, const float* in1) {
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
  float x[2];
  float w1[2];
  #pragma unroll
  for (int u = 0; u < 2; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 32u;
    x[u] = arg0_at(j);
    w1[u] = arg1_at(j);
  }
  float ss = 0.0f;
  #pragma unroll
  for (int u = 0; u < 2; ++u) {
    const float v = x[u];
    ss += v * v;
  }
  ss = og_block_reduce(ss, og_scratch, OgSum(), (float)0);
  const float r = sqrtf(ss / (float)COLS + 9.999999975e-07f);
  #pragma unroll
  for (int u = 0; u < 2; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 32u;
    const float a = x[u] / r * w1[u];
      const IDX oi = row * COLS + j;
      out[oi] = (float)(a);
  }
}

extern "C" __global__ void og_softmax_af10f346b535(float* out, const float* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  typedef unsigned int IDX;
  const IDX COLS = 8u;
  const IDX row = blockIdx.x;
  __shared__ float og_scratch[32];
  auto arg0_at = [&](IDX j) -> float {
    const IDX xi = row * COLS + j;
    const float p0 = in0[xi];
    return p0;
  };
  float x[1];
  #pragma unroll
  for (int u = 0; u < 1; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 32u;
    if (j < COLS) {
      x[u] = arg0_at(j);
    }
  }
  float m = (-__int_as_float(0x7f800000));
  #pragma unroll
  for (int u = 0; u < 1; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 32u;
    if (j < COLS) {
      m = og_max(m, (float)x[u]);
    }
  }
  m = og_block_reduce(m, og_scratch, OgMax(), (float)(-__int_as_float(0x7f800000)));
  float s = 0.0f;
  #pragma unroll
  for (int u = 0; u < 1; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 32u;
    if (j < COLS) {
      s += expf(x[u] - m);
    }
  }
  s = og_block_reduce(s, og_scratch, OgSum(), (float)0);
  #pragma unroll
  for (int u = 0; u < 1; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 32u;
    if (j < COLS) {
      const float a = expf(x[u] - m) / s;
        const IDX oi = row * COLS + j;
        out[oi] = (float)(a);
    }
  }
}
