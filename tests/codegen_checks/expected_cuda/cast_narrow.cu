
extern "C" __global__ void og_cast_0fea43565026(og_f16* out, const float* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 8u; i += (unsigned int)gridDim.x * blockDim.x) {
    const float p0 = in0[i];
    const float v0 = og_f16_to_f32(og_f32_to_f16(p0));
    out[i] = og_f32_to_f16((float)(v0));
  }
}

extern "C" __global__ void og_exp_23a5705b932d(og_bf16* out, const og_bf16* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 8u; i += (unsigned int)gridDim.x * blockDim.x) {
    const float p0 = og_bf16_to_f32(in0[i]);
    const float v0 = expf(p0);
    out[i] = og_f32_to_bf16((float)(v0));
  }
}
