
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

extern "C" __global__ void og_neg_73d9edbdce0b(float* out, const float* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 256u; i += (unsigned int)gridDim.x * blockDim.x) {
    const float p0 = in0[i];
    const float v0 = (-p0);
    out[i] = (float)(v0);
  }
}
