"""Run generated CUDA kernels on the CPU: a test helper for machines without a GPU.

The kernel text of `codegen.cuda_source` is compiled as C++20 with g++ against a small emulation
of the CUDA device API: a block is `blockDim.x` host threads, `__syncthreads` a `std::barrier`,
warp shuffles go through a per-warp slot array between two warp barriers, `__shared__` variables
are function statics (blocks run one after another), f16 uses `_Float16`. Enough for kernels whose
shuffles and barriers are reached by every thread of the warp / block (ours are), not a general
CUDA emulator: no timing, no memory model beyond sequential consistency.

    outputs = run_graph(graph, inputs, weights)   # every node must lower to kernel launches only
"""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

import numpy as np

from optgraph.codegen.cuda_source import PRELUDE, STORAGE, Launch, node_code
from optgraph.ir.graph import Graph
from optgraph.ir.layout import alias_roots
from optgraph.runtime.reference_kernels import numpy_dtype

EMULATION = r"""
#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>
#include <math.h>
struct dim3 { unsigned int x = 1, y = 1, z = 1; };
struct uint2 { unsigned int x, y; };
struct uint4 { unsigned int x, y, z, w; };
struct float4 { float x, y, z, w; };
thread_local dim3 threadIdx, blockIdx;
dim3 blockDim, gridDim;
static std::barrier<>* og_emu_block;
static std::barrier<>* og_emu_warp[32];
static unsigned long long og_emu_slot[32][32];
#define __global__
#define __device__
#define __shared__ static
#define __forceinline__ inline
inline void __syncthreads() { og_emu_block->arrive_and_wait(); }
inline void __syncwarp(unsigned int = 0xffffffffu) { og_emu_warp[threadIdx.x >> 5]->arrive_and_wait(); }
template <typename T> T __shfl_xor_sync(unsigned int, T v, int o) {
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  unsigned long long bits = 0; std::memcpy(&bits, &v, sizeof(T));
  og_emu_slot[w][l] = bits;
  og_emu_warp[w]->arrive_and_wait();
  unsigned long long got = og_emu_slot[w][l ^ o];
  og_emu_warp[w]->arrive_and_wait();
  T out; std::memcpy(&out, &got, sizeof(T)); return out;
}
inline float __uint_as_float(unsigned int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline float __int_as_float(int u) { float f; std::memcpy(&f, &u, 4); return f; }
inline unsigned int __float_as_uint(float f) { unsigned int u; std::memcpy(&u, &f, 4); return u; }
template <typename T> T __ldcg(const T* p) { return *(const volatile T*)p; }
template <typename T> T __ldg(const T* p) { return *p; }
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline unsigned int atomicAdd(unsigned int* p, unsigned int v) {
  return __atomic_fetch_add(p, v, __ATOMIC_SEQ_CST);
}
inline unsigned int min(unsigned int a, unsigned int b) { return a < b ? a : b; }
inline float og_emu_h2f(unsigned short h) { _Float16 x; std::memcpy(&x, &h, 2); return (float)x; }
inline unsigned short og_emu_f2h(float f) { _Float16 x = (_Float16)f; unsigned short h; std::memcpy(&h, &x, 2); return h; }
template <typename F> void og_emu_launch(dim3 grid, dim3 block, F kernel) {
  gridDim = grid; blockDim = block;
  std::barrier<> block_barrier(block.x);
  og_emu_block = &block_barrier;
  std::vector<std::barrier<>*> warps;
  for (unsigned int w = 0; w < (block.x + 31) / 32; ++w) {
    warps.push_back(new std::barrier<>(block.x - 32 * w < 32 ? block.x - 32 * w : 32));
    og_emu_warp[w] = warps.back();
  }
  std::vector<std::thread> threads;  // one host thread per CUDA thread, walking the blocks in order
  for (unsigned int t = 0; t < block.x; ++t)
    threads.emplace_back([&, t] {
      threadIdx.x = t;
      for (unsigned int bz = 0; bz < grid.z; ++bz)
        for (unsigned int by = 0; by < grid.y; ++by)
          for (unsigned int bx = 0; bx < grid.x; ++bx) {
            blockIdx.x = bx; blockIdx.y = by; blockIdx.z = bz;
            kernel();
            block_barrier.arrive_and_wait();  // the block's shared memory is the next one's
          }
    });
  for (auto& t : threads) t.join();
  for (auto* w : warps) delete w;
}
struct og_emu_any {  // a buffer converts to any kernel's pointer type (raw-bit copies take uint*)
  void* p;
  template <typename T> operator T*() const { return (T*)p; }
};
static void* og_emu_read(const char* path, size_t n) {
  void* p = std::calloc(n ? n : 1, 1);
  FILE* f = std::fopen(path, "rb");
  if (n && std::fread(p, 1, n, f) != n) std::abort();
  std::fclose(f);
  return p;
}
"""


def _prelude() -> str:
    """The device prelude with the f16 conversions (PTX there) done in C++."""
    text = re.sub(
        r"__device__ __forceinline__ float og_f16_to_f32\(og_f16 h\) \{.*?\n\}",
        "inline float og_f16_to_f32(og_f16 h) { return og_emu_h2f(h); }",
        PRELUDE,
        flags=re.DOTALL,
    )
    text = re.sub(
        r"__device__ __forceinline__ og_f16 og_f32_to_f16\(float f\) \{.*?\n\}",
        "inline og_f16 og_f32_to_f16(float f) { return og_emu_f2h(f); }",
        text,
        flags=re.DOTALL,
    )
    return text


def available() -> bool:
    return shutil.which("g++") is not None


def run_graph(
    graph: Graph, inputs: Mapping[str, np.ndarray], weights: Mapping[str, np.ndarray]
) -> dict[str, np.ndarray]:
    """Every node's kernels on the CPU, one buffer per value (aliasing views point into their
    root's); returns the graph's outputs."""
    types = graph.value_types()
    sources: dict[str, str] = {}
    calls: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        buffers: dict[str, str] = {}
        setup: list[str] = []
        for k, (name, array) in enumerate({**inputs, **weights}.items()):
            t = types[name]
            arr = np.ascontiguousarray(np.asarray(array, dtype=numpy_dtype(t.dtype)))
            arr.tofile(folder / f"in{k}.bin")
            buffers[name] = f"b{k}"
            setup.append(
                f'auto* b{k} = ({STORAGE[t.dtype]}*)og_emu_read("{folder}/in{k}.bin", {arr.nbytes});'
            )
        roots = alias_roots(graph)
        for n, node in enumerate(graph.nodes):
            if node.is_event or node.type is None:
                continue
            t = node.type
            buffers[node.name] = f"v{n}"
            if node.name in roots:  # an aliasing view (a slice of a siblings region): no kernel
                root, offset = roots[node.name]
                setup.append(
                    f"auto* v{n} = ({STORAGE[t.dtype]}*)((char*){buffers[root]} + {offset});"
                )
                continue
            setup.append(f"auto* v{n} = ({STORAGE[t.dtype]}*)std::calloc({t.nbytes} + 16, 1);")
            for work in node_code(node, [types[o] for o in node.operands]):
                if not isinstance(work, Launch):
                    raise NotImplementedError(f"{node.op}: only kernel launches are emulated")
                sources[work.kernel.name] = work.kernel.source
                roles = {"out": buffers[node.name]}
                roles.update({f"in{i}": buffers[o] for i, o in enumerate(node.operands)})
                args = ", ".join(f"og_emu_any{{{roles[a]}}}" for a in work.args)
                (gx, gy, gz), (bx, _, _) = work.grid, work.block
                calls.append(
                    f"og_emu_launch(dim3{{{gx}u, {gy}u, {gz}u}}, dim3{{{bx}u, 1u, 1u}}, "
                    f"[&] {{ {work.kernel.name}({args}); }});"
                )
        outs = list(dict.fromkeys(graph.output_names()))
        for k, name in enumerate(outs):
            calls.append(
                f'{{ FILE* f = std::fopen("{folder}/out{k}.bin", "wb"); '
                f"std::fwrite({buffers[name]}, 1, {types[name].nbytes}, f); std::fclose(f); }}"
            )
        kernels = "".join("\n" + sources[k] for k in sorted(sources))
        main = "int main() {\n  " + "\n  ".join(setup + calls) + "\n  return 0;\n}\n"
        (folder / "emu.cpp").write_text(EMULATION + _prelude() + kernels + main)
        compile_cmd = ["g++", "-std=c++20", "-O1", "-pthread", "-w", "-o", str(folder / "emu")]
        subprocess.run([*compile_cmd, str(folder / "emu.cpp")], check=True)
        subprocess.run([str(folder / "emu")], check=True)
        result = {}
        for k, name in enumerate(outs):
            t = types[name]
            data = np.fromfile(folder / f"out{k}.bin", dtype=numpy_dtype(t.dtype))
            result[name] = data.reshape(t.shape)
        return result
