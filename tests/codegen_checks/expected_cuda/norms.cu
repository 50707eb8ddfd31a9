
extern "C" __global__ void og_layer_norm_a6eab14a08dd(og_f16* out, const og_f16* in0, const og_f16* in1, const og_f16* in2) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  typedef unsigned int IDX;
  const IDX COLS = 64u;
  const IDX row = blockIdx.x;
  __shared__ float og_scratch[32];
  auto arg0_at = [&](IDX j) -> float {
    const IDX xi = row * COLS + j;
    const float p0 = og_f16_to_f32(in0[xi]);
    return p0;
  };
  auto arg1_at = [&](IDX j) -> float {
    const IDX xi = row * COLS + j;
    const float p1 = og_f16_to_f32(in1[(xi % 64u)]);
    return p1;
  };
  auto arg2_at = [&](IDX j) -> float {
    const IDX xi = row * COLS + j;
    const float p2 = og_f16_to_f32(in2[(xi % 64u)]);
    return p2;
  };
  float x[2];
  float w1[2];
  float w2[2];
  #pragma unroll
  for (int u = 0; u < 2; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 32u;
    x[u] = arg0_at(j);
    w1[u] = arg1_at(j);
    w2[u] = arg2_at(j);
  }
  const float k0 = (float)arg0_at(0);
  float s = 0.0f;
  #pragma unroll
  for (int u = 0; u < 2; ++u) {
    s += (float)x[u] - k0;
  }
  const float mu = og_block_reduce(s, og_scratch, OgSum(), (float)0) / (float)COLS;
  float q = 0.0f;
  #pragma unroll
  for (int u = 0; u < 2; ++u) {
    const float c = ((float)x[u] - k0) - mu;
    q += c * c;
  }
  q = og_block_reduce(q, og_scratch, OgSum(), (float)0);
  const float r = sqrtf(q / (float)COLS + 9.999999747e-06f);
  #pragma unroll
  for (int u = 0; u < 2; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 32u;
    const float a = (((float)x[u] - k0) - mu) / r * w1[u] + w2[u];
      const IDX oi = row * COLS + j;
      out[oi] = og_f32_to_f16((float)(a));
  }
}

extern "C" __global__ void og_rms_norm_58f16e7c7b70(og_f16* out, const og_f16* in0, const og_f16* in1) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  typedef unsigned int IDX;
  const IDX COLS = 64u;
  const IDX row = blockIdx.x;
  __shared__ float og_scratch[32];
  auto arg0_at = [&](IDX j) -> float {
    const IDX xi = row * COLS + j;
    const float p0 = og_f16_to_f32(in0[xi]);
    return p0;
  };
  auto arg1_at = [&](IDX j) -> float {
    const IDX xi = row * COLS + j;
    const float p1 = og_f16_to_f32(in1[(xi % 64u)]);
    return p1;
  };
  float x[2];
  float w1[2];
  #pragma unroll
  for (int u = 0; u < 2; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 32u;
    x[u] = arg0_at(j);
    w1[u] = arg1_at(j);
  }
  float ss = 0.0f;
  #pragma unroll
  for (int u = 0; u < 2; ++u) {
    const float v = x[u];
    ss += v * v;
  }
  ss = og_block_reduce(ss, og_scratch, OgSum(), (float)0);
  const float r = sqrtf(ss / (float)COLS + 9.999999975e-07f);
  #pragma unroll
  for (int u = 0; u < 2; ++u) {
    const IDX j = threadIdx.x + (IDX)u * 32u;
    const float a = x[u] / r * w1[u];
      const IDX oi = row * COLS + j;
      out[oi] = og_f32_to_f16((float)(a));
  }
}
