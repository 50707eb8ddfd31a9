
extern "C" __global__ void og_fused_3b35063538e7(float* out, const float* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 256u; i += (unsigned int)gridDim.x * blockDim.x) {
    const float p0 = in0[i];
    const float v0 = (p0 * 1.000000015e-01f);
    const float v1 = expf(v0);
    const float v2 = sqrtf(v1);
    const float v3 = tanhf(p0);
    const float v4 = (-v3);
    const float v5 = og_sigmoid(v4);
    const float v6 = (v2 + v5);
    out[i] = (float)(v6);
  }
}
