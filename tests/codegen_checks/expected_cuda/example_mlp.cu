
extern "C" __global__ void og_epilogue_23e7baa5073b(float* out, const float* in0, const float* in1, const float* in2) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const bool og_aligned = ((reinterpret_cast<unsigned long long>(out)) & 15ull) == 0ull;
  if (og_aligned) {
    for (unsigned int og_v = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; og_v < 10u; og_v += (unsigned int)gridDim.x * blockDim.x) {
      const uint4 og_ra = reinterpret_cast<const uint4*>(out)[og_v];
      uint4 og_o;
      float* og_oe = reinterpret_cast<float*>(&og_o);
      #pragma unroll
  for (unsigned int og_e = 0; og_e < 4u; ++og_e) {
        const unsigned int i = og_v * 4u + og_e;
        const float a = reinterpret_cast<const float*>(&og_ra)[og_e];
        const float p2 = in2[(i % 10u)];
        const float v0 = (a + p2);
        og_oe[og_e] = (float)(v0);
      }
      reinterpret_cast<uint4*>(out)[og_v] = og_o;
    }
  } else {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 40u; i += (unsigned int)gridDim.x * blockDim.x) {
      const float a = out[i];
      const float p2 = in2[(i % 10u)];
      const float v0 = (a + p2);
      out[i] = (float)(v0);
    }
  }
}

extern "C" __global__ void og_epilogue_400f2ba38c1b(float* out, const float* in0, const float* in1, const float* in2) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const bool og_aligned = ((reinterpret_cast<unsigned long long>(out)) & 15ull) == 0ull;
  if (og_aligned) {
    for (unsigned int og_v = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; og_v < 256u; og_v += (unsigned int)gridDim.x * blockDim.x) {
      const uint4 og_ra = reinterpret_cast<const uint4*>(out)[og_v];
      uint4 og_o;
      float* og_oe = reinterpret_cast<float*>(&og_o);
      #pragma unroll
  for (unsigned int og_e = 0; og_e < 4u; ++og_e) {
        const unsigned int i = og_v * 4u + og_e;
        const float a = reinterpret_cast<const float*>(&og_ra)[og_e];
        const float p2 = in2[(i % 256u)];
        const float v0 = (a + p2);
        const float v1 = og_max(v0, 0.0f);
        og_oe[og_e] = (float)(v1);
      }
      reinterpret_cast<uint4*>(out)[og_v] = og_o;
    }
  } else {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 1024u; i += (unsigned int)gridDim.x * blockDim.x) {
      const float a = out[i];
      const float p2 = in2[(i % 256u)];
      const float v0 = (a + p2);
      const float v1 = og_max(v0, 0.0f);
      out[i] = (float)(v1);
    }
  }
}

extern "C" __global__ void og_epilogue_9402f4662152(float* out, const float* in0, const float* in1, const float* in2) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const bool og_aligned = ((reinterpret_cast<unsigned long long>(out)) & 15ull) == 0ull;
  if (og_aligned) {
    for (unsigned int og_v = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; og_v < 256u; og_v += (unsigned int)gridDim.x * blockDim.x) {
      const uint4 og_ra = reinterpret_cast<const uint4*>(out)[og_v];
      uint4 og_o;
      float* og_oe = reinterpret_cast<float*>(&og_o);
      #pragma unroll
  for (unsigned int og_e = 0; og_e < 4u; ++og_e) {
        const unsigned int i = og_v * 4u + og_e;
        const float a = reinterpret_cast<const float*>(&og_ra)[og_e];
        const float p2 = in2[(i % 256u)];
        const float v0 = (a + p2);
        const float v1 = (0.5f * v0 * (1.0f + tanhf(7.978845835e-01f * (v0 + 4.471499845e-02f * v0 * v0 * v0))));
        og_oe[og_e] = (float)(v1);
      }
      reinterpret_cast<uint4*>(out)[og_v] = og_o;
    }
  } else {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 1024u; i += (unsigned int)gridDim.x * blockDim.x) {
      const float a = out[i];
      const float p2 = in2[(i % 256u)];
      const float v0 = (a + p2);
      const float v1 = (0.5f * v0 * (1.0f + tanhf(7.978845835e-01f * (v0 + 4.471499845e-02f * v0 * v0 * v0))));
      out[i] = (float)(v1);
    }
  }
}
