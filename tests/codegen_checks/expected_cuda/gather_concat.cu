
extern "C" __global__ void og_concat_913cb5581da5(unsigned int* out, const unsigned int* in0, const unsigned int* in1, const unsigned int* in2) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 22u; i += (unsigned int)gridDim.x * blockDim.x) {
    const unsigned int o = i / 11u, c = (i / 1u) % 11u, r = i % 1u;
    if (c < 3u) out[i] = in0[(o * 3u + (c - 0u)) * 1u + r];
    else if (c < 8u) out[i] = in1[(o * 5u + (c - 3u)) * 1u + r];
    else if (c < 11u) out[i] = in2[(o * 3u + (c - 8u)) * 1u + r];
  }
}

extern "C" __global__ void og_get_rows_b781c768de7c(unsigned int* out, const unsigned int* in0, const long long* in1) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  if (((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in0)) & 15ull) == 0ull) {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 28u; i += (unsigned int)gridDim.x * blockDim.x) {
      const long long row = (long long)in1[i / 4u];
      if (row >= 0 && row < 50LL) reinterpret_cast<uint4*>(out)[i] = reinterpret_cast<const uint4*>(in0)[(unsigned int)row * 4u + i % 4u];
      else reinterpret_cast<uint4*>(out)[i] = uint4{};
    }
  } else {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 112u; i += (unsigned int)gridDim.x * blockDim.x) {
      const long long row = (long long)in1[i / 16u];
      if (row >= 0 && row < 50LL) out[i] = in0[(unsigned int)row * 16u + i % 16u];
      else out[i] = (unsigned int)0;
    }
  }
}
