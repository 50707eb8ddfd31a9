
extern "C" __global__ void og_copy_942414759a97(unsigned int* out, const unsigned int* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 24u; i += (unsigned int)gridDim.x * blockDim.x) {
    out[i] = in0[(i / 4u) + (i % 4u) * 6u];
  }
}

extern "C" __global__ void og_neg_e509070a4e20(float* out, const float* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 12u; i += (unsigned int)gridDim.x * blockDim.x) {
    const float p0 = in0[i];
    const float v0 = (-p0);
    out[i] = (float)(v0);
  }
}
