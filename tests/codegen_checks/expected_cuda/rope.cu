
extern "C" __global__ void og_rope_61a7f7cc556b(float* out, const float* in0, const int* in1) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int t = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; t < 24u; t += (unsigned int)gridDim.x * blockDim.x) {
    const unsigned int i = t % 8u, group = t / 8u, bs = group / 1u;
    const unsigned int first = bs * 4u + (group % 1u) * 4u, si = bs % 3u;
    const double inv_freq = pow(10000.0, -2.0 * (double)i / 16.0);
    const double angle = (double)in1[si] * inv_freq;
    const float c = (float)cos(angle), sn = (float)sin(angle);
    #pragma unroll
  for (unsigned int og_h = 0; og_h < 4u; ++og_h) {
      const unsigned int row = first + og_h, base = row * 16u;
      const float x1 = in0[base + i];
      const float x2 = in0[base + i + 8u];
      out[base + i] = (float)(og_rotate_first(x1, c, x2, sn));
      out[base + i + 8u] = (float)(og_rotate_second(x2, c, x1, sn));
    }
  }
}
