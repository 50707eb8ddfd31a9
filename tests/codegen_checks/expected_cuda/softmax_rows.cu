
extern "C" __global__ void og_softmax_56af6c3e69d2(float* out, const float* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  typedef unsigned int IDX;
  const IDX COLS = 1000u;
  const IDX row = blockIdx.x;
  __shared__ float og_scratch[32];
  auto arg0_at = [&](IDX j) -> float {
    const IDX xi = row * COLS + j;
    const float p0 = in0[xi];
    return p0;
  };
  float x[8];
  #pragma unroll
  for (int u = 0; u < 8; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 128u;
    if (j < COLS) {
      x[u] = arg0_at(j);
    }
  }
  float m = (-__int_as_float(0x7f800000));
  #pragma unroll
  for (int u = 0; u < 8; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 128u;
    if (j < COLS) {
      m = og_max(m, (float)x[u]);
    }
  }
  m = og_block_reduce(m, og_scratch, OgMax(), (float)(-__int_as_float(0x7f800000)));
  float s = 0.0f;
  #pragma unroll
  for (int u = 0; u < 8; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 128u;
    if (j < COLS) {
      s += expf(x[u] - m);
    }
  }
  s = og_block_reduce(s, og_scratch, OgSum(), (float)0);
  #pragma unroll
  for (int u = 0; u < 8; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 128u;
    if (j < COLS) {
      const float a = expf(x[u] - m) / s;
        const IDX oi = row * COLS + j;
        out[oi] = (float)(a);
    }
  }
}
