
extern "C" __global__ void og_kv_write_a37954848ce2(unsigned int* out, const unsigned int* in0, const unsigned int* in1, const int* in2) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const long long pos = (long long)in2[0];
  const bool ok = pos >= 0 && pos <= 15LL;
  if (((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in0) | reinterpret_cast<unsigned long long>(in1)) & 15ull) == 0ull) {
    const uint4* src0 = reinterpret_cast<const uint4*>(in0);
    const uint4* src1 = reinterpret_cast<const uint4*>(in1);
    uint4* dst = reinterpret_cast<uint4*>(out);
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 64u; i += (unsigned int)gridDim.x * blockDim.x) {
      const unsigned int row = i / 2u, r = row % 16u, c = i % 2u;
      const long long k = (long long)r - pos;
      const uint4 old = src0[i];
      dst[i] = (ok && k >= 0 && k < 1LL) ? src1[((row / 16u) * 1u + (unsigned int)k) * 2u + c] : old;
    }
    return;
  }
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 256u; i += (unsigned int)gridDim.x * blockDim.x) {
    const unsigned int bh = i / 128u, r = (i / 8u) % 16u, c = i % 8u;
    const long long k = (long long)r - pos;
    out[i] = (ok && k >= 0 && k < 1LL) ? in1[(bh * 1u + (unsigned int)k) * 8u + c] : in0[i];
  }
}

extern "C" __global__ void og_kv_write_inplace_d2633f6e9269(unsigned int* out, const unsigned int* in0, const unsigned int* in1, const int* in2) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const long long pos = (long long)in2[0];
  const bool ok = pos >= 0 && pos <= 15LL;
  if (!ok) return;
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 16u; i += (unsigned int)gridDim.x * blockDim.x) {
    const unsigned int bh = i / 8u, r = (i / 8u) % 1u, c = i % 8u;
    out[(bh * 16u + (unsigned int)pos + r) * 8u + c] = in1[i];
  }
}

extern "C" __global__ void og_neg_d01c9cabd448(float* out, const float* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const bool og_aligned = ((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in0)) & 15ull) == 0ull;
  if (og_aligned) {
    for (unsigned int og_v = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; og_v < 64u; og_v += (unsigned int)gridDim.x * blockDim.x) {
      const uint4 og_r0 = reinterpret_cast<const uint4*>(in0)[og_v];
      uint4 og_o;
      float* og_oe = reinterpret_cast<float*>(&og_o);
      #pragma unroll
  for (unsigned int og_e = 0; og_e < 4u; ++og_e) {
        const unsigned int i = og_v * 4u + og_e;
        const float p0 = reinterpret_cast<const float*>(&og_r0)[og_e];
        const float v0 = (-p0);
        og_oe[og_e] = (float)(v0);
      }
      reinterpret_cast<uint4*>(out)[og_v] = og_o;
    }
  } else {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 256u; i += (unsigned int)gridDim.x * blockDim.x) {
      const float p0 = in0[i];
      const float v0 = (-p0);
      out[i] = (float)(v0);
    }
  }
}
