
__device__ float og_ws_d0fa4f760d78[9216];
__device__ unsigned int og_cnt_d0fa4f760d78[1];

extern "C" __global__ void __launch_bounds__(256, 2) og_gemv_0b9fb9ce7845(og_f16* out, const og_f16* in0, const og_f16* in1) {
  const unsigned int tile = blockIdx.x, split = blockIdx.y;
  const unsigned int cg = threadIdx.x % 32u, rl = threadIdx.x / 32u;
  const unsigned int n0 = tile * 256u + cg * 8u;
  const unsigned int k0 = split * 64u;
  const unsigned int k1 = min(2304u, k0 + 64u);
  uint4 og_wv0[1][8];
  {
    const unsigned int kb = k0 + rl;
    if (n0 < 256u) {
      if (kb + 0u < k1) { og_wv0[0][0] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 0u) * 256u); }
      if (kb + 8u < k1) { og_wv0[0][1] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 8u) * 256u); }
      if (kb + 16u < k1) { og_wv0[0][2] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 16u) * 256u); }
      if (kb + 24u < k1) { og_wv0[0][3] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 24u) * 256u); }
      if (kb + 32u < k1) { og_wv0[0][4] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 32u) * 256u); }
      if (kb + 40u < k1) { og_wv0[0][5] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 40u) * 256u); }
      if (kb + 48u < k1) { og_wv0[0][6] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 48u) * 256u); }
      if (kb + 56u < k1) { og_wv0[0][7] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 56u) * 256u); }
    }
  }
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  float acc[1][8];
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 8; ++v) acc[i][v] = 0.0f;
  }
  if (n0 < 256u) {
    unsigned int kb = k0 + rl;
    {  // the first batch, loaded before the dependency wait
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 8u;
        if (kk < k1) {
          float wf[1][8];
          wf[0][0] = og_f16_to_f32((og_f16)(og_wv0[0][j].x & 0xffffu)); wf[0][1] = og_f16_to_f32((og_f16)(og_wv0[0][j].x >> 16));
          wf[0][2] = og_f16_to_f32((og_f16)(og_wv0[0][j].y & 0xffffu)); wf[0][3] = og_f16_to_f32((og_f16)(og_wv0[0][j].y >> 16));
          wf[0][4] = og_f16_to_f32((og_f16)(og_wv0[0][j].z & 0xffffu)); wf[0][5] = og_f16_to_f32((og_f16)(og_wv0[0][j].z >> 16));
          wf[0][6] = og_f16_to_f32((og_f16)(og_wv0[0][j].w & 0xffffu)); wf[0][7] = og_f16_to_f32((og_f16)(og_wv0[0][j].w >> 16));
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_f16_to_f32(in0[i * 2304u + kk]);
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 8; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
    kb += 64u;
    for (; kb + 56u < k1; kb += 64u) {
      uint4 wv[1][8];
      wv[0][0] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 0u) * 256u);
      wv[0][1] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 8u) * 256u);
      wv[0][2] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 16u) * 256u);
      wv[0][3] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 24u) * 256u);
      wv[0][4] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 32u) * 256u);
      wv[0][5] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 40u) * 256u);
      wv[0][6] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 48u) * 256u);
      wv[0][7] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 56u) * 256u);
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 8u;
        float wf[1][8];
        wf[0][0] = og_f16_to_f32((og_f16)(wv[0][j].x & 0xffffu)); wf[0][1] = og_f16_to_f32((og_f16)(wv[0][j].x >> 16));
        wf[0][2] = og_f16_to_f32((og_f16)(wv[0][j].y & 0xffffu)); wf[0][3] = og_f16_to_f32((og_f16)(wv[0][j].y >> 16));
        wf[0][4] = og_f16_to_f32((og_f16)(wv[0][j].z & 0xffffu)); wf[0][5] = og_f16_to_f32((og_f16)(wv[0][j].z >> 16));
        wf[0][6] = og_f16_to_f32((og_f16)(wv[0][j].w & 0xffffu)); wf[0][7] = og_f16_to_f32((og_f16)(wv[0][j].w >> 16));
        #pragma unroll
        for (int i = 0; i < 1; ++i) {
          const float xv = og_f16_to_f32(in0[i * 2304u + kk]);
          #pragma unroll
          for (int q = 0; q < 1; ++q) {
            #pragma unroll
            for (int v = 0; v < 8; ++v)
              acc[q * 1 + i][v] += xv * wf[q][v];
          }
        }
      }
    }
    if (kb < k1) {  // the rows left, fewer than a batch: guarded loads, all in flight
      uint4 wv[1][8];
      if (kb + 0u < k1) { wv[0][0] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 0u) * 256u); }
      if (kb + 8u < k1) { wv[0][1] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 8u) * 256u); }
      if (kb + 16u < k1) { wv[0][2] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 16u) * 256u); }
      if (kb + 24u < k1) { wv[0][3] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 24u) * 256u); }
      if (kb + 32u < k1) { wv[0][4] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 32u) * 256u); }
      if (kb + 40u < k1) { wv[0][5] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 40u) * 256u); }
      if (kb + 48u < k1) { wv[0][6] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 48u) * 256u); }
      if (kb + 56u < k1) { wv[0][7] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 56u) * 256u); }
      #pragma unroll
      for (int j = 0; j < 8; ++j) {
        const unsigned int kk = kb + j * 8u;
        if (kk < k1) {
          float wf[1][8];
          wf[0][0] = og_f16_to_f32((og_f16)(wv[0][j].x & 0xffffu)); wf[0][1] = og_f16_to_f32((og_f16)(wv[0][j].x >> 16));
          wf[0][2] = og_f16_to_f32((og_f16)(wv[0][j].y & 0xffffu)); wf[0][3] = og_f16_to_f32((og_f16)(wv[0][j].y >> 16));
          wf[0][4] = og_f16_to_f32((og_f16)(wv[0][j].z & 0xffffu)); wf[0][5] = og_f16_to_f32((og_f16)(wv[0][j].z >> 16));
          wf[0][6] = og_f16_to_f32((og_f16)(wv[0][j].w & 0xffffu)); wf[0][7] = og_f16_to_f32((og_f16)(wv[0][j].w >> 16));
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_f16_to_f32(in0[i * 2304u + kk]);
            #pragma unroll
            for (int q = 0; q < 1; ++q) {
              #pragma unroll
              for (int v = 0; v < 8; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
    }
  }
  #pragma unroll
  for (int i = 0; i < 1; ++i) {
    #pragma unroll
    for (int v = 0; v < 8; ++v) {
      for (int o = 32; o < 32; o <<= 1) acc[i][v] += __shfl_xor_sync(0xffffffffu, acc[i][v], o);
    }
  }
  __shared__ float og_red[8][1][256];
  const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  if (lane < 32u) {
    #pragma unroll
    for (int i = 0; i < 1; ++i) {
      #pragma unroll
      for (int v = 0; v < 8; ++v) og_red[warp][i][lane * 8u + v] = acc[i][v];
    }
  }
  __syncthreads();
  for (unsigned int t = threadIdx.x; t < 256u; t += 256u) {
    const unsigned int i = t / 256u, c = t % 256u;
    const unsigned int col = tile * 256u + c;
    if (col >= 256u) continue;
    float val = 0.0f;
    #pragma unroll
  for (int w = 0; w < 8; ++w) val += og_red[w][i][c];
    og_ws_d0fa4f760d78[(split * 1u + i) * 256u + col] = val;
  }
  __syncthreads();
  __shared__ bool og_last;
  if (threadIdx.x == 0) og_last = og_arrive(&og_cnt_d0fa4f760d78[tile]) == 35u;
  __syncthreads();
  if (!og_last) return;
  for (unsigned int t = threadIdx.x; t < 256u; t += 256u) {
    const unsigned int i = t / 256u, c = t % 256u;
    const unsigned int col = tile * 256u + c;
    if (col >= 256u) continue;
    float val = 0.0f;
    for (unsigned int s = 0; s < 36u; ++s) val += __ldcg(&og_ws_d0fa4f760d78[(s * 1u + i) * 256u + col]);
    const unsigned int oi = i * 256u + col;
    const float a = og_f16_to_f32(og_f32_to_f16((float)(val)));
    out[oi] = og_f32_to_f16((float)(a));
  }
  if (threadIdx.x == 0) og_cnt_d0fa4f760d78[tile] = 0u;
}

__device__ float og_ws_b195c08eabc6[36864];
__device__ unsigned int og_cnt_b195c08eabc6[18];

extern "C" __global__ void __launch_bounds__(256, 2) og_gemvs_cef68ca41e3e(og_f16* out, const og_f16* in0, const og_f16* in1, const og_f16* in2) {
  const unsigned int tile = blockIdx.x, split = blockIdx.y;
  const unsigned int cg = threadIdx.x % 16u, rl = threadIdx.x / 16u;
  const unsigned int k0 = split * 288u;
  const unsigned int k1 = min(2304u, k0 + 288u);
  const unsigned int lane = threadIdx.x & 31u, warp = threadIdx.x >> 5;
  __shared__ float og_red[8][2][128];
  __shared__ bool og_last;
  if (tile < 18u) {
    const unsigned int lt = tile - 0u;
    const unsigned int n0 = lt * 128u + cg * 8u;
    uint4 og_wv0[2][4];
    {
      const unsigned int kb = k0 + rl;
      if (n0 < 2304u) {
        if (kb + 0u < k1) { og_wv0[0][0] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 0u) * 2304u); og_wv0[1][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 2304u); }
        if (kb + 16u < k1) { og_wv0[0][1] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 16u) * 2304u); og_wv0[1][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 16u) * 2304u); }
        if (kb + 32u < k1) { og_wv0[0][2] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 32u) * 2304u); og_wv0[1][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 2304u); }
        if (kb + 48u < k1) { og_wv0[0][3] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 48u) * 2304u); og_wv0[1][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 48u) * 2304u); }
      }
    }
    og_grid_dependency_wait();
    float acc[2][8];
    #pragma unroll
  for (int j = 0; j < 2; ++j) {
      #pragma unroll
    for (int v = 0; v < 8; ++v) acc[j][v] = 0.0f;
    }
    if (n0 < 2304u) {
      unsigned int kb = k0 + rl;
      {  // the first batch, loaded before the dependency wait
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
          const unsigned int kk = kb + j * 16u;
          if (kk < k1) {
            float wf[2][8];
            wf[0][0] = og_f16_to_f32((og_f16)(og_wv0[0][j].x & 0xffffu)); wf[0][1] = og_f16_to_f32((og_f16)(og_wv0[0][j].x >> 16));
            wf[0][2] = og_f16_to_f32((og_f16)(og_wv0[0][j].y & 0xffffu)); wf[0][3] = og_f16_to_f32((og_f16)(og_wv0[0][j].y >> 16));
            wf[0][4] = og_f16_to_f32((og_f16)(og_wv0[0][j].z & 0xffffu)); wf[0][5] = og_f16_to_f32((og_f16)(og_wv0[0][j].z >> 16));
            wf[0][6] = og_f16_to_f32((og_f16)(og_wv0[0][j].w & 0xffffu)); wf[0][7] = og_f16_to_f32((og_f16)(og_wv0[0][j].w >> 16));
            wf[1][0] = og_f16_to_f32((og_f16)(og_wv0[1][j].x & 0xffffu)); wf[1][1] = og_f16_to_f32((og_f16)(og_wv0[1][j].x >> 16));
            wf[1][2] = og_f16_to_f32((og_f16)(og_wv0[1][j].y & 0xffffu)); wf[1][3] = og_f16_to_f32((og_f16)(og_wv0[1][j].y >> 16));
            wf[1][4] = og_f16_to_f32((og_f16)(og_wv0[1][j].z & 0xffffu)); wf[1][5] = og_f16_to_f32((og_f16)(og_wv0[1][j].z >> 16));
            wf[1][6] = og_f16_to_f32((og_f16)(og_wv0[1][j].w & 0xffffu)); wf[1][7] = og_f16_to_f32((og_f16)(og_wv0[1][j].w >> 16));
            #pragma unroll
            for (int i = 0; i < 1; ++i) {
              const float xv = og_f16_to_f32(in0[kk]);
              #pragma unroll
              for (int q = 0; q < 2; ++q) {
                #pragma unroll
                for (int v = 0; v < 8; ++v)
                  acc[q * 1 + i][v] += xv * wf[q][v];
              }
            }
          }
        }
      }
      kb += 64u;
      for (; kb + 48u < k1; kb += 64u) {
        uint4 wv[2][4];
        wv[0][0] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 0u) * 2304u); wv[1][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 2304u);
        wv[0][1] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 16u) * 2304u); wv[1][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 16u) * 2304u);
        wv[0][2] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 32u) * 2304u); wv[1][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 2304u);
        wv[0][3] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 48u) * 2304u); wv[1][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 48u) * 2304u);
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
          const unsigned int kk = kb + j * 16u;
          float wf[2][8];
          wf[0][0] = og_f16_to_f32((og_f16)(wv[0][j].x & 0xffffu)); wf[0][1] = og_f16_to_f32((og_f16)(wv[0][j].x >> 16));
          wf[0][2] = og_f16_to_f32((og_f16)(wv[0][j].y & 0xffffu)); wf[0][3] = og_f16_to_f32((og_f16)(wv[0][j].y >> 16));
          wf[0][4] = og_f16_to_f32((og_f16)(wv[0][j].z & 0xffffu)); wf[0][5] = og_f16_to_f32((og_f16)(wv[0][j].z >> 16));
          wf[0][6] = og_f16_to_f32((og_f16)(wv[0][j].w & 0xffffu)); wf[0][7] = og_f16_to_f32((og_f16)(wv[0][j].w >> 16));
          wf[1][0] = og_f16_to_f32((og_f16)(wv[1][j].x & 0xffffu)); wf[1][1] = og_f16_to_f32((og_f16)(wv[1][j].x >> 16));
          wf[1][2] = og_f16_to_f32((og_f16)(wv[1][j].y & 0xffffu)); wf[1][3] = og_f16_to_f32((og_f16)(wv[1][j].y >> 16));
          wf[1][4] = og_f16_to_f32((og_f16)(wv[1][j].z & 0xffffu)); wf[1][5] = og_f16_to_f32((og_f16)(wv[1][j].z >> 16));
          wf[1][6] = og_f16_to_f32((og_f16)(wv[1][j].w & 0xffffu)); wf[1][7] = og_f16_to_f32((og_f16)(wv[1][j].w >> 16));
          #pragma unroll
          for (int i = 0; i < 1; ++i) {
            const float xv = og_f16_to_f32(in0[kk]);
            #pragma unroll
            for (int q = 0; q < 2; ++q) {
              #pragma unroll
              for (int v = 0; v < 8; ++v)
                acc[q * 1 + i][v] += xv * wf[q][v];
            }
          }
        }
      }
      if (kb < k1) {  // the rows left, fewer than a batch: guarded loads, all in flight
        uint4 wv[2][4];
        if (kb + 0u < k1) { wv[0][0] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 0u) * 2304u); wv[1][0] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 0u) * 2304u); }
        if (kb + 16u < k1) { wv[0][1] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 16u) * 2304u); wv[1][1] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 16u) * 2304u); }
        if (kb + 32u < k1) { wv[0][2] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 32u) * 2304u); wv[1][2] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 32u) * 2304u); }
        if (kb + 48u < k1) { wv[0][3] = og_load_stream(in1 + n0 + (unsigned long long)(kb + 48u) * 2304u); wv[1][3] = og_load_stream(in2 + n0 + (unsigned long long)(kb + 48u) * 2304u); }
        #pragma unroll
        for (int j = 0; j < 4; ++j) {
          const unsigned int kk = kb + j * 16u;
          if (kk < k1) {
            float wf[2][8];
            wf[0][0] = og_f16_to_f32((og_f16)(wv[0][j].x & 0xffffu)); wf[0][1] = og_f16_to_f32((og_f16)(wv[0][j].x >> 16));
            wf[0][2] = og_f16_to_f32((og_f16)(wv[0][j].y & 0xffffu)); wf[0][3] = og_f16_to_f32((og_f16)(wv[0][j].y >> 16));
            wf[0][4] = og_f16_to_f32((og_f16)(wv[0][j].z & 0xffffu)); wf[0][5] = og_f16_to_f32((og_f16)(wv[0][j].z >> 16));
            wf[0][6] = og_f16_to_f32((og_f16)(wv[0][j].w & 0xffffu)); wf[0][7] = og_f16_to_f32((og_f16)(wv[0][j].w >> 16));
            wf[1][0] = og_f16_to_f32((og_f16)(wv[1][j].x & 0xffffu)); wf[1][1] = og_f16_to_f32((og_f16)(wv[1][j].x >> 16));
            wf[1][2] = og_f16_to_f32((og_f16)(wv[1][j].y & 0xffffu)); wf[1][3] = og_f16_to_f32((og_f16)(wv[1][j].y >> 16));
            wf[1][4] = og_f16_to_f32((og_f16)(wv[1][j].z & 0xffffu)); wf[1][5] = og_f16_to_f32((og_f16)(wv[1][j].z >> 16));
            wf[1][6] = og_f16_to_f32((og_f16)(wv[1][j].w & 0xffffu)); wf[1][7] = og_f16_to_f32((og_f16)(wv[1][j].w >> 16));
            #pragma unroll
            for (int i = 0; i < 1; ++i) {
              const float xv = og_f16_to_f32(in0[kk]);
              #pragma unroll
              for (int q = 0; q < 2; ++q) {
                #pragma unroll
                for (int v = 0; v < 8; ++v)
                  acc[q * 1 + i][v] += xv * wf[q][v];
              }
            }
          }
        }
      }
    }
    og_grid_launch_dependents();
    #pragma unroll
  for (int j = 0; j < 2; ++j) {
      #pragma unroll
    for (int v = 0; v < 8; ++v) {
        for (int o = 16; o < 32; o <<= 1) acc[j][v] += __shfl_xor_sync(0xffffffffu, acc[j][v], o);
      }
    }
    if (lane < 16u) {
      #pragma unroll
    for (int j = 0; j < 2; ++j) {
        #pragma unroll
      for (int v = 0; v < 8; ++v) og_red[warp][j][lane * 8u + v] = acc[j][v];
      }
    }
    __syncthreads();
    for (unsigned int c = threadIdx.x; c < 128u; c += 256u) {
    const unsigned int col = lt * 128u + c;
    if (col >= 2304u) continue;
      float val0 = 0.0f;
    #pragma unroll
    for (int w = 0; w < 8; ++w) val0 += og_red[w][0][c];
      float val1 = 0.0f;
    #pragma unroll
    for (int w = 0; w < 8; ++w) val1 += og_red[w][1][c];
      og_ws_b195c08eabc6[(split * 2u + 0u) * 2304u + 0u + col] = val0;
      og_ws_b195c08eabc6[(split * 2u + 1u) * 2304u + 0u + col] = val1;
    }
    __syncthreads();
    if (threadIdx.x == 0) og_last = og_arrive(&og_cnt_b195c08eabc6[tile]) == 7u;
    __syncthreads();
    if (!og_last) return;
    for (unsigned int c = threadIdx.x; c < 128u; c += 256u) {
    const unsigned int col = lt * 128u + c;
    if (col >= 2304u) continue;
      float val0 = 0.0f;
    for (unsigned int split = 0; split < 8u; ++split) val0 += __ldcg(&og_ws_b195c08eabc6[(split * 2u + 0u) * 2304u + 0u + col]);
      float val1 = 0.0f;
    for (unsigned int split = 0; split < 8u; ++split) val1 += __ldcg(&og_ws_b195c08eabc6[(split * 2u + 1u) * 2304u + 0u + col]);
      const float a0 = og_f16_to_f32(og_f32_to_f16((float)(val0)));
      const float a1 = og_f16_to_f32(og_f32_to_f16((float)(val1)));
      const float e0 = (a1 * og_sigmoid(a1));
      const float e1 = (e0 * a0);
      out[0u + col] = og_f32_to_f16((float)(e1));
    }
    if (threadIdx.x == 0) og_cnt_b195c08eabc6[tile] = 0u;
  }
}
