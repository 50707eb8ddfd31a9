
extern "C" __global__ void og_add_b04d0b3a3034(float* out, const float* in0, const float* in1) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 256u; i += (unsigned int)gridDim.x * blockDim.x) {
    const float p0 = in0[i];
    const float p1 = in1[i];
    const float v0 = (p0 + p1);
    out[i] = (float)(v0);
  }
}

extern "C" __global__ void og_exp_db175953b979(float* out, const float* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 256u; i += (unsigned int)gridDim.x * blockDim.x) {
    const float p0 = in0[i];
    const float v0 = expf(p0);
    out[i] = (float)(v0);
  }
}

extern "C" __global__ void og_tanh_e9f7e515f4f7(float* out, const float* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 256u; i += (unsigned int)gridDim.x * blockDim.x) {
    const float p0 = in0[i];
    const float v0 = tanhf(p0);
    out[i] = (float)(v0);
  }
}
