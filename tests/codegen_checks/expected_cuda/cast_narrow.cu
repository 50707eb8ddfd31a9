
extern "C" __global__ void og_cast_6bbc0ae7f865(og_f16* out, const float* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const bool og_aligned = ((reinterpret_cast<unsigned long long>(out)) & 15ull) == 0ull;
  if (og_aligned) {
    for (unsigned int og_v = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; og_v < 1u; og_v += (unsigned int)gridDim.x * blockDim.x) {
      uint4 og_o;
      og_f16* og_oe = reinterpret_cast<og_f16*>(&og_o);
      #pragma unroll
  for (unsigned int og_e = 0; og_e < 8u; ++og_e) {
        const unsigned int i = og_v * 8u + og_e;
        const float p0 = in0[i];
        const float v0 = og_f16_to_f32(og_f32_to_f16(p0));
        og_oe[og_e] = og_f32_to_f16((float)(v0));
      }
      reinterpret_cast<uint4*>(out)[og_v] = og_o;
    }
  } else {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 8u; i += (unsigned int)gridDim.x * blockDim.x) {
      const float p0 = in0[i];
      const float v0 = og_f16_to_f32(og_f32_to_f16(p0));
      out[i] = og_f32_to_f16((float)(v0));
    }
  }
}

extern "C" __global__ void og_exp_4cd71f440425(og_bf16* out, const og_bf16* in0) {
  og_grid_dependency_wait();
  og_grid_launch_dependents();
  const bool og_aligned = ((reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in0)) & 15ull) == 0ull;
  if (og_aligned) {
    for (unsigned int og_v = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; og_v < 1u; og_v += (unsigned int)gridDim.x * blockDim.x) {
      const uint4 og_r0 = reinterpret_cast<const uint4*>(in0)[og_v];
      uint4 og_o;
      og_bf16* og_oe = reinterpret_cast<og_bf16*>(&og_o);
      #pragma unroll
  for (unsigned int og_e = 0; og_e < 8u; ++og_e) {
        const unsigned int i = og_v * 8u + og_e;
        const float p0 = og_bf16_to_f32(reinterpret_cast<const og_bf16*>(&og_r0)[og_e]);
        const float v0 = expf(p0);
        og_oe[og_e] = og_f32_to_bf16((float)(v0));
      }
      reinterpret_cast<uint4*>(out)[og_v] = og_o;
    }
  } else {
    for (unsigned int i = (unsigned int)blockIdx.x * blockDim.x + threadIdx.x; i < 8u; i += (unsigned int)gridDim.x * blockDim.x) {
      const float p0 = og_bf16_to_f32(in0[i]);
      const float v0 = expf(p0);
      out[i] = og_f32_to_bf16((float)(v0));
    }
  }
}
