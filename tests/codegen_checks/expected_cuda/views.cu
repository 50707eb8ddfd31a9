
extern "C" __global__ void og_copy_942414759a97(unsigned int* out, const unsigned int* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 24u; i += (unsigned int)gridDim.x * blockDim.x) {
    out[i] = in0[(i / 4u) + (i % 4u) * 6u];
  }
}

extern "C" __global__ void og_neg_f86c71466e7b(float* out, const float* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const bool og_aligned = ((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in0)) & 15ull) == 0ull;
  if (og_aligned) {
    for (unsigned int og_v = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; og_v < 3u; og_v += (unsigned int)gridDim.x * blockDim.x) {
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
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 12u; i += (unsigned int)gridDim.x * blockDim.x) {
      const float p0 = in0[i];
      const float v0 = (-p0);
      out[i] = (float)(v0);
    }
  }
}
