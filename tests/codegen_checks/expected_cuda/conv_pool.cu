
extern "C" __global__ void og_avg_pool2d_ededd35645cb(float* out, const float* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 64u; i += (unsigned int)gridDim.x * blockDim.x) {
    const int ox = (int)(i % 2u), oy = (int)((i / 2u) % 2u);
    const unsigned int ch = (i / 4u) % 16u, nb = i / 64u;
    const unsigned int base = (nb * 16u + ch) * 25u;
    float acc = 0.0f;
    int count = 0;
    for (int ky = 0; ky < 2; ++ky) {
      const int iy = oy * 2 - 0 + ky;
      if (iy < 0 || iy >= 5) continue;
      for (int kx = 0; kx < 2; ++kx) {
        const int ix = ox * 2 - 0 + kx;
        if (ix < 0 || ix >= 5) continue;
        const float v = in0[base + (unsigned int)(iy * 5 + ix)];
        acc += v; ++count;
      }
    }
    out[i] = (float)(acc / (float)count);
  }
}

extern "C" __global__ void og_conv2d_45d5c273d324(float* out, const float* x, const float* wt, const float* bias) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 400u; i += (unsigned int)gridDim.x * blockDim.x) {
    const int ox = (int)(i % 5u), oy = (int)((i / 5u) % 5u);
    const unsigned int ch = (i / 25u) % 16u, nb = i / 400u;
    const unsigned int g = ch / 8u;
    float acc = 0.0f;
    for (unsigned int c = 0; c < 4u; ++c) {
      const unsigned int xc = (nb * 8u + g * 4u + c) * 100u;
      const unsigned int wc = (ch * 4u + c) * 9u;
      for (int ky = 0; ky < 3; ++ky) {
        const int iy = oy * 2 - 1 + ky;
        if (iy < 0 || iy >= 10) continue;
        for (int kx = 0; kx < 3; ++kx) {
          const int ix = ox * 2 - 1 + kx;
          if (ix < 0 || ix >= 10) continue;
          acc += x[xc + (unsigned int)(iy * 10 + ix)] * wt[wc + (unsigned int)(ky * 3 + kx)];
        }
      }
    }
    acc += bias[ch];
    out[i] = (float)(acc);
  }
}

extern "C" __global__ void og_max_pool2d_e780afc23b3b(float* out, const float* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 400u; i += (unsigned int)gridDim.x * blockDim.x) {
    const int ox = (int)(i % 5u), oy = (int)((i / 5u) % 5u);
    const unsigned int ch = (i / 25u) % 16u, nb = i / 400u;
    const unsigned int base = (nb * 16u + ch) * 25u;
    float acc = (-__int_as_float(0x7f800000));
    for (int ky = 0; ky < 3; ++ky) {
      const int iy = oy * 1 - 1 + ky;
      if (iy < 0 || iy >= 5) continue;
      for (int kx = 0; kx < 3; ++kx) {
        const int ix = ox * 1 - 1 + kx;
        if (ix < 0 || ix >= 5) continue;
        const float v = in0[base + (unsigned int)(iy * 5 + ix)];
        acc = og_max(acc, v);
      }
    }
    out[i] = (float)(acc);
  }
}
