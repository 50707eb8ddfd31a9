
extern "C" __global__ void og_max_6d65baead1fe(float* out, const float* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  typedef unsigned int IDX;
  const IDX COLS = 4u;
  const IDX row = blockIdx.x;
  __shared__ float og_scratch[32];
  auto arg0_at = [&](IDX j) -> float {
    const IDX xi = row * COLS + j;
    const float p0 = in0[xi];
    return p0;
  };
  float acc = (float)(-__int_as_float(0x7f800000));
  #pragma unroll
  for (int u = 0; u < 1; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 32u;
    if (j < COLS) {
      acc = og_max(acc, arg0_at(j));
    }
  }
  acc = og_block_reduce(acc, og_scratch, OgMax(), (float)(-__int_as_float(0x7f800000)));
  const float a = acc;
  if (threadIdx.x == 0) {
    const IDX oi = row;
    out[oi] = (float)(a);
  }
}

extern "C" __global__ void og_sum_e3607ba90bb5(float* out, const float* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  typedef unsigned int IDX;
  const IDX COUNT = 64u;
  const IDX o = blockIdx.x;
  __shared__ float og_scratch[32];
  const IDX base = o;
  float acc = (float)0;
  for (IDX r = threadIdx.x; r < COUNT; r += blockDim.x) {
    const float v = in0[base + (r * 4u)];
    acc += v;
  }
  acc = og_block_reduce(acc, og_scratch, OgSum(), (float)0);
  if (threadIdx.x == 0) out[o] = (float)(acc);
}
