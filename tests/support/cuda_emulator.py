"""Run generated CUDA kernels on the CPU: a test helper for machines without a GPU.

The kernel text of `codegen.cuda_source` is compiled as C++20 with g++ against a small emulation
of the CUDA device API and run; nothing about an op is re-implemented here. Blocks run one after
another on one host thread. A kernel that never synchronizes its threads (no `__syncthreads`,
warp shuffle or block reduction in its text) runs them one after another; any other runs each
thread of the block as a fiber that yields at every barrier, `__syncthreads` waiting for the
block, `__syncwarp` and the shuffles (a per-warp slot array between two warp barriers) for the
warp. `__shared__` variables are function statics, f16 uses `_Float16`. Enough for kernels whose
shuffles and barriers are reached by every thread of the warp / block (ours are: a barrier that
some threads never reach aborts the run as a deadlock), not a general CUDA emulator: no timing,
no memory model beyond sequential consistency, no races (threads never run at once).

    outputs = run_graph(graph, inputs, weights)   # every node must lower to kernel launches only
    outputs = run_plan(lower_cuda(planned), inputs, weights)   # a plan's steps at its offsets

`run_plan` runs a `CudaPlan` in issue order (a legal order of every stream's steps): kernel steps
(merged ones too) in one byte arena at the planned offsets, weights at theirs, each input in its
own buffer; cuBLAS calls (`GemmStep`) as a naive float32 loop nest, copies as memcpy; events are
no-ops. Host steps (CPU nodes) are not emulated.
"""

from __future__ import annotations

import atexit
import hashlib
import re
import shutil
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

import numpy as np

from optgraph.codegen.cuda_dispatch import node_code
from optgraph.codegen.cuda_prelude import PRELUDE
from optgraph.codegen.cuda_source import (
    STORAGE,
    Kernel,
    Launch,
    kernels_source,
    load,
    store,
)
from optgraph.codegen.lower_cuda import (
    CopyStep,
    CudaPlan,
    EventStep,
    GemmStep,
    KernelStep,
    Location,
)
from optgraph.ir.graph import QUANT_BLOCKS, Graph
from optgraph.ir.layout import alias_roots
from optgraph.ir.weight_layout import stored_weights
from optgraph.reference.kernels import numpy_dtype
from optgraph.runtime.cpu.host_compiler import BuildError, build

EMULATION = r"""
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <setjmp.h>
#include <ucontext.h>
#include <vector>
#include <math.h>
struct dim3 { unsigned int x = 1, y = 1, z = 1; };
struct uint2 { unsigned int x, y; };
struct uint4 { unsigned int x, y, z, w; };
struct float4 { float x, y, z, w; };
dim3 threadIdx, blockIdx, blockDim, gridDim;
// A block's threads are fibers on one host thread: each runs until it waits at a barrier (or
// ends), then the next one runs; a barrier opens when its last thread arrives. A fiber starts
// with setcontext and switches with _setjmp/_longjmp (no signal-mask system call per switch).
struct og_emu_fiber { ucontext_t start; jmp_buf resume; char* stack; bool started, done; };
static jmp_buf og_emu_scheduler;
static og_emu_fiber og_emu_fibers[1024];
static unsigned int og_emu_current;
static unsigned long long og_emu_progress;  // arrivals and ends: a round without any is a deadlock
static void (*og_emu_body)(void*);
static void* og_emu_arg;
struct og_emu_barrier { unsigned int expected, arrived, generation; };
static og_emu_barrier og_emu_block, og_emu_warp[32];
static unsigned long long og_emu_slot[32][32];
static bool og_emu_sequential;  // threads run one after another: no barrier may be reached
[[noreturn]] inline void og_emu_fail(const char* why) {
  std::fprintf(stderr, "emulator: %s\n", why);
  std::abort();
}
__attribute__((noinline)) static void og_emu_yield() {
  if (!_setjmp(og_emu_fibers[og_emu_current].resume)) _longjmp(og_emu_scheduler, 1);
}
inline void og_emu_wait(og_emu_barrier& b) {
  if (og_emu_sequential) og_emu_fail("a kernel run thread by thread reached a barrier or shuffle");
  ++og_emu_progress;
  const unsigned int generation = b.generation;
  if (++b.arrived == b.expected) { b.arrived = 0; ++b.generation; return; }
  while (b.generation == generation) og_emu_yield();
}
#define __global__
#define __device__
#define __shared__ static
#define __forceinline__ inline
#define __launch_bounds__(...)
inline void __syncthreads() { og_emu_wait(og_emu_block); }
inline void __syncwarp(unsigned int = 0xffffffffu) { og_emu_wait(og_emu_warp[threadIdx.x >> 5]); }
template <typename T> T __shfl_xor_sync(unsigned int, T v, int o) {
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  unsigned long long bits = 0; std::memcpy(&bits, &v, sizeof(T));
  og_emu_slot[w][l] = bits;
  og_emu_wait(og_emu_warp[w]);
  unsigned long long got = og_emu_slot[w][l ^ o];
  og_emu_wait(og_emu_warp[w]);
  T out; std::memcpy(&out, &got, sizeof(T)); return out;
}
template <typename T> T __shfl_up_sync(unsigned int, T v, unsigned int d) {
  const int w = threadIdx.x >> 5, l = threadIdx.x & 31;
  unsigned long long bits = 0; std::memcpy(&bits, &v, sizeof(T));
  og_emu_slot[w][l] = bits;
  og_emu_wait(og_emu_warp[w]);
  unsigned long long got = og_emu_slot[w][(unsigned int)l >= d ? l - d : l];
  og_emu_wait(og_emu_warp[w]);
  T out; std::memcpy(&out, &got, sizeof(T)); return out;
}
inline float __fmul_rn(float a, float b) { return a * b; }  // ISO C++: never contracted
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline int __float2int_rn(float f) { return (int)std::nearbyint(f); }  // ties to even
// dp2a: two int16 of a by two int8 of b (bytes 0-1: lo, 2-3: hi), summed into c.
inline int og_emu_dp2a(int a, int b, int c, int at) {
  const int a0 = (short)(a & 0xffff), a1 = (short)((unsigned int)a >> 16);
  const int b0 = (signed char)(((unsigned int)b >> (8 * at)) & 255u);
  const int b1 = (signed char)(((unsigned int)b >> (8 * at + 8)) & 255u);
  return c + a0 * b0 + a1 * b1;
}
inline int __dp2a_lo(int a, int b, int c) { return og_emu_dp2a(a, b, c, 0); }
inline int __dp2a_hi(int a, int b, int c) { return og_emu_dp2a(a, b, c, 2); }
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
static void og_emu_entry() {
  og_emu_body(og_emu_arg);
  og_emu_fibers[og_emu_current].done = true;
  ++og_emu_progress;
  _longjmp(og_emu_scheduler, 1);
}
// Run fiber `t` until it waits or ends: from its start or from where it last waited.
__attribute__((noinline)) static void og_emu_resume(unsigned int t) {
  og_emu_current = t; threadIdx.x = t;
  og_emu_fiber& f = og_emu_fibers[t];
  if (_setjmp(og_emu_scheduler)) return;
  if (f.started) _longjmp(f.resume, 1);
  f.started = true;
  setcontext(&f.start);
}
static void og_emu_run(dim3 grid, dim3 block, bool sequential, void (*body)(void*), void* arg) {
  gridDim = grid; blockDim = block;
  og_emu_sequential = sequential;
  if (sequential) {  // a kernel without barriers or shuffles: its threads never wait on each other
    for (unsigned int bz = 0; bz < grid.z; ++bz)
      for (unsigned int by = 0; by < grid.y; ++by)
        for (unsigned int bx = 0; bx < grid.x; ++bx)
          for (unsigned int t = 0; t < block.x; ++t) {
            blockIdx.x = bx; blockIdx.y = by; blockIdx.z = bz; threadIdx.x = t;
            body(arg);
          }
    return;
  }
  if (block.x > 1024) og_emu_fail("more than 1024 threads a block");
  og_emu_body = body;
  og_emu_arg = arg;
  og_emu_block = {block.x, 0, 0};
  for (unsigned int w = 0; w < (block.x + 31) / 32; ++w)
    og_emu_warp[w] = {block.x - 32 * w < 32 ? block.x - 32 * w : 32, 0, 0};
  constexpr size_t stack_bytes = 256 * 1024;
  for (unsigned int bz = 0; bz < grid.z; ++bz)
    for (unsigned int by = 0; by < grid.y; ++by)
      for (unsigned int bx = 0; bx < grid.x; ++bx) {  // blocks one after another
        blockIdx.x = bx; blockIdx.y = by; blockIdx.z = bz;
        for (unsigned int t = 0; t < block.x; ++t) {
          og_emu_fiber& f = og_emu_fibers[t];
          if (!f.stack) {  // made once, restarted from its entry by every block
            f.stack = (char*)std::malloc(stack_bytes);
            getcontext(&f.start);
            f.start.uc_stack.ss_sp = f.stack;
            f.start.uc_stack.ss_size = stack_bytes;
            f.start.uc_link = nullptr;
            makecontext(&f.start, og_emu_entry, 0);
          }
          f.started = f.done = false;
        }
        for (unsigned int live = block.x; live;) {
          const unsigned long long before = og_emu_progress;
          for (unsigned int t = 0; t < block.x; ++t) {
            if (og_emu_fibers[t].done) continue;
            og_emu_resume(t);
            if (og_emu_fibers[t].done) --live;
          }
          if (live && og_emu_progress == before)
            og_emu_fail("deadlock: threads wait at a barrier that others of the block never reach");
        }
      }
}
template <typename F> void og_emu_launch(dim3 grid, dim3 block, bool sequential, F kernel) {
  og_emu_run(grid, block, sequential, [](void* f) { (*static_cast<F*>(f))(); }, &kernel);
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
    sources: dict[str, Kernel] = {}
    calls: list[str] = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        buffers: dict[str, str] = {}
        setup: list[str] = []
        for k, (name, array) in enumerate({**inputs, **weights}.items()):
            t = types[name]
            arr = _host(array, t.dtype)
            arr.tofile(folder / f"in{k}.bin")
            buffers[name] = f"b{k}"
            setup.append(
                f'auto* b{k} = ({_storage(t.dtype)}*)og_emu_read("in{k}.bin", {arr.nbytes});'
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
                    f"auto* v{n} = ({_storage(t.dtype)}*)((char*){buffers[root]} + {offset});"
                )
                continue
            setup.append(f"auto* v{n} = ({_storage(t.dtype)}*)std::calloc({t.nbytes} + 16, 1);")
            for work in node_code(node, [types[o] for o in node.operands]):
                if not isinstance(work, Launch):
                    raise NotImplementedError(f"{node.op}: only kernel launches are emulated")
                sources[work.kernel.name] = work.kernel
                roles = {"out": buffers[node.name]}
                roles.update({f"in{i}": buffers[o] for i, o in enumerate(node.operands)})
                args = [roles[a] for a in work.args]
                calls.append(_launch(work.kernel, work.grid, work.block, args))
        outs = list(dict.fromkeys(graph.output_names()))
        for k, name in enumerate(outs):
            calls.append(
                f'{{ FILE* f = std::fopen("out{k}.bin", "wb"); '
                f"std::fwrite({buffers[name]}, 1, {types[name].nbytes}, f); std::fclose(f); }}"
            )
        _build_and_run(folder, kernels_source(sources.values()), setup + calls)
        result = {}
        for k, name in enumerate(outs):
            t = types[name]
            data = np.fromfile(folder / f"out{k}.bin", dtype=_numpy(t.dtype))
            result[name] = data.reshape(t.shape)
        return result


# What makes a block's threads wait for each other: the emulated primitives and the prelude's
# block reduction built on them. A kernel naming none runs thread by thread; one that reaches a
# barrier anyway (through a helper not listed here) aborts the run rather than compute wrong bits.
THREAD_SYNC = ("__syncthreads", "__syncwarp", "__shfl", "og_block_reduce", "og_warp_sum")


def _launch(
    kernel: Kernel, grid: tuple[int, int, int], block: tuple[int, int, int], args: list[str]
) -> str:
    """The statement launching `kernel` over `grid` x `block` with the pointer expressions
    `args`; blocks whose threads never synchronize run on one host thread (much faster)."""
    sequential = not any(word in kernel.source for word in THREAD_SYNC)
    (gx, gy, gz), (bx, _, _) = grid, block
    pointers = ", ".join(f"og_emu_any{{{a}}}" for a in args)
    return (
        f"og_emu_launch(dim3{{{gx}u, {gy}u, {gz}u}}, dim3{{{bx}u, 1u, 1u}}, "
        f"{'true' if sequential else 'false'}, [&] {{ {kernel.name}({pointers}); }});"
    )


class EmulationError(RuntimeError):
    """The emulated program did not build or did not run to its end (g++'s or its own message)."""


# g++ as the emulator runs it. No _FORTIFY_SOURCE: its checked longjmp refuses to jump between
# fiber stacks. No optimization: a test's program runs for a fraction of its build time, and the
# bits are the same (ISO C++ contracts no float expressions; x86-64 without -march has no FMA).
GXX = ("g++", "-std=c++20", "-O0", "-U_FORTIFY_SOURCE", "-w")


class _Builds:
    """What this process has built, in one temporary folder removed at exit (each build by
    `host_compiler.build`, named by the digest of its command and text): the emulation and the
    prelude (the same in nearly every program) as a precompiled header, and each program's
    binary. A program's source names its files relative to the folder it runs in, so the tests
    that emulate the same kernels on other values (and the two runs of a merged and an unmerged
    plan that lower alike) build once. g++ reads the header's text where the precompiled one
    does not fit, so the header only ever saves time."""

    def __init__(self) -> None:
        self.folder: Path | None = None
        self.includes: dict[str, list[str]] = {}  # header digest -> g++'s flags that include it
        self.binaries: dict[str, Path] = {}

    def _folder(self) -> Path:
        if self.folder is None:
            self.folder = Path(tempfile.mkdtemp(prefix="optgraph-emulator-"))
            atexit.register(shutil.rmtree, self.folder, ignore_errors=True)
        return self.folder

    def _include(self, header: str) -> list[str]:
        """The flags that include `header`, precompiled once (none where it would not build)."""
        key = hashlib.sha1(header.encode()).hexdigest()
        if key not in self.includes:
            command = (*GXX, "-x", "c++-header")
            try:
                gch = build(command, header, self._folder(), source_suffix=".h",
                            output_suffix=".h.gch", language="c++")  # fmt: skip
            except BuildError:
                self.includes[key] = []
            else:
                self.includes[key] = ["-include", str(gch.with_suffix(""))]
        return self.includes[key]

    def binary(self, header: str, source: str) -> Path:
        """The emulated program whose text is `header` (the emulation and the prelude), then
        `source` (the kernels and main)."""
        key = hashlib.sha1((header + source).encode()).hexdigest()
        if key in self.binaries:
            return self.binaries[key]
        include = self._include(header)
        text = source if include else header + source
        try:
            binary = build((*GXX, *include), text, self._folder(), source_suffix=".cpp",
                           output_suffix="", language="c++")  # fmt: skip
        except BuildError as err:
            raise EmulationError(f"emulated build failed: {err}") from None
        self.binaries[key] = binary
        return binary


_BUILDS = _Builds()


def _build_and_run(folder: Path, kernels: str, statements: list[str]) -> None:
    """Build (or take the build of the same source) and run in `folder`, where its files are."""
    main = "int main() {\n  " + "\n  ".join(statements) + "\n  return 0;\n}\n"
    binary = _BUILDS.binary(EMULATION + _prelude(), kernels + main)
    done = subprocess.run([str(binary)], cwd=folder, check=False, capture_output=True, text=True)
    if done.returncode != 0:
        raise EmulationError(f"emulated run failed ({done.returncode}):\n{done.stderr[-4000:]}")


def run_kernel(
    kernel: Kernel,
    grid: tuple[int, int, int],
    block: tuple[int, int, int],
    buffers: list[np.ndarray],
    hooks: str = "",
    extra: Sequence[np.ndarray] = (),
    setup: Sequence[str] = (),
) -> list[np.ndarray]:
    """One launch of `kernel` with a copy of each of `buffers` as its arguments (b0, b1, ...),
    in order; returns the buffers after the launch. For tests that emulate another kernel's
    effect: `hooks`, file-scope C++ before the kernel (functions its text may call); `extra`,
    buffers x0, x1, ... that are no arguments; `setup`, statements run before the launch."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        loads, names = [], []
        for prefix, arrays in (("b", buffers), ("x", extra)):
            for k, array in enumerate(arrays):
                path = folder / f"{prefix}{k}.bin"
                np.ascontiguousarray(array).tofile(path)
                loads.append(
                    f'char* {prefix}{k} = (char*)og_emu_read("{path.name}", {array.nbytes});'
                )
            names += [f"{prefix}{k}" for k in range(len(arrays))] if prefix == "b" else []
        writes = [
            f'{{ FILE* f = std::fopen("b{k}.bin", "wb"); '
            f"std::fwrite(b{k}, 1, {array.nbytes}, f); std::fclose(f); }}"
            for k, array in enumerate(buffers)
        ]
        launch = _launch(kernel, grid, block, names)
        source = hooks + kernels_source([kernel])
        _build_and_run(folder, source, [*loads, *setup, launch, *writes])
        return [
            np.fromfile(folder / f"b{k}.bin", dtype=a.dtype).reshape(a.shape)
            for k, a in enumerate(buffers)
        ]


def _gemm(step: GemmStep, a: str, b: str, c: str) -> str:
    """One cublasGemmStridedBatchedEx (column-major, alpha 1, beta 0) as a float32 loop nest over
    the buffers at pointer expressions `a`, `b`, `c`."""
    g, st = step.gemm, STORAGE[step.gemm.dtype]
    ct = STORAGE[g.out_dtype]
    a_at = f"l + i * {g.lda}u" if g.transa else f"i + l * {g.lda}u"  # op(A)(i, l)
    b_at = f"j + l * {g.ldb}u" if g.transb else f"l + j * {g.ldb}u"  # op(B)(l, j)
    return (
        f"for (unsigned p = 0; p < {g.batch}u; ++p) for (unsigned j = 0; j < {g.n}u; ++j) "
        f"for (unsigned i = 0; i < {g.m}u; ++i) {{ float acc = 0.0f; "
        f"const {st}* A = ({st}*){a} + p * {g.stride_a}u; "
        f"const {st}* B = ({st}*){b} + p * {g.stride_b}u; "
        f"for (unsigned l = 0; l < {g.k}u; ++l) "
        f"acc += {load(g.dtype, f'A[{a_at}]')} * {load(g.dtype, f'B[{b_at}]')}; "
        f"(({ct}*){c} + p * {g.stride_c}u)[i + j * {g.ldc}u] = {store(g.out_dtype, 'acc')}; }}"
    )


def run_plan(
    plan: CudaPlan,
    inputs: Mapping[str, np.ndarray],
    weights: Mapping[str, np.ndarray],
    graph: Graph | None = None,
) -> dict[str, np.ndarray]:
    """The plan's steps in issue order on the CPU; returns the graph's outputs. `weights` are as
    the plan reads them, or, with the planned `graph`, the model's arrays (a weight transpose-weights
    stored transposed is transposed here, as the CUDA runtime's upload does)."""
    if graph is not None:
        weights = stored_weights(graph, weights)
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        setup = [
            f"char* og_arena = (char*)std::calloc({plan.arena_bytes} + 64, 1);",
            f"char* og_weights = (char*)std::calloc({plan.weights_bytes} + 64, 1);",
            f"char* og_host_weights = (char*)std::calloc({plan.host_weights_bytes} + 64, 1);",
            f"char* og_host_arena = (char*)std::calloc({plan.host_arena_bytes} + 64, 1);",
        ]
        where = {
            "arena": "og_arena",
            "weights": "og_weights",
            "host_weights": "og_host_weights",  # pinned host memory is one more buffer here
            "host_arena": "og_host_arena",
        }
        placed = [
            ("og_weights", plan.weight_offsets),
            ("og_host_weights", plan.host_weight_offsets),
        ]
        for buffer, offsets in placed:
            for name, offset in offsets.items():
                path = folder / f"w_{len(setup)}.bin"
                _host(weights[name], plan.types[name].dtype).tofile(path)
                setup.append(
                    f'std::memcpy({buffer} + {offset}, og_emu_read("{path.name}", '
                    f"{plan.types[name].nbytes}), {plan.types[name].nbytes});"
                )
        buffers: dict[tuple[str, str], str] = {}
        for k, name in enumerate(plan.inputs):
            path = folder / f"in{k}.bin"
            _host(inputs[name], plan.types[name].dtype).tofile(path)
            buffers["input", name] = f"og_in{k}"
            nbytes = plan.types[name].nbytes
            setup.append(
                f"char* og_in{k} = (char*)std::calloc({nbytes} + 64, 1); "
                f'std::memcpy(og_in{k}, og_emu_read("{path.name}", {nbytes}), {nbytes});'
            )
        for k, (name, nbytes) in enumerate(plan.value_bytes.items()):
            buffers["value", name] = f"og_val{k}"
            setup.append(f"char* og_val{k} = (char*)std::calloc({nbytes} + 64, 1);")

        def ptr(loc: Location) -> str:
            if loc.space in where:
                return f"({where[loc.space]} + {loc.offset})"
            if (loc.space, loc.key) not in buffers:
                raise NotImplementedError(f"space {loc.space}: not emulated")
            return f"({buffers[loc.space, loc.key]} + {loc.offset})"

        calls: list[str] = []
        for step in plan.steps:
            if isinstance(step, EventStep):
                continue
            if isinstance(step, KernelStep):
                args = [ptr(a) for a in step.args]
                calls.append(_launch(plan.kernels[step.kernel], step.grid, step.block, args))
            elif isinstance(step, GemmStep):
                calls.append(_gemm(step, ptr(step.a), ptr(step.b), ptr(step.c)))
            elif isinstance(step, CopyStep):
                calls.append(f"std::memmove({ptr(step.dst)}, {ptr(step.src)}, {step.nbytes});")
            else:
                raise NotImplementedError(f"{type(step).__name__}: not emulated")
        outs = list(dict.fromkeys(plan.outputs))
        for k, name in enumerate(outs):
            calls.append(
                f'{{ FILE* f = std::fopen("out{k}.bin", "wb"); '
                f"std::fwrite({ptr(plan.locations[name])}, 1, {plan.types[name].nbytes}, f); "
                "std::fclose(f); }"
            )
        _build_and_run(folder, kernels_source(plan.kernels.values()), setup + calls)
        result = {}
        for k, name in enumerate(outs):
            t = plan.types[name]
            data = np.fromfile(folder / f"out{k}.bin", dtype=_numpy(t.dtype))
            result[name] = data.reshape(t.shape)
        return result


def _host(array: np.ndarray, dtype: str) -> np.ndarray:
    return np.ascontiguousarray(np.asarray(array, dtype=_numpy(dtype)))


def _numpy(dtype: str) -> np.dtype:
    """The NumPy dtype of a value's array: a quantized weight's is its GGUF bytes."""
    return np.dtype(np.uint8) if dtype in QUANT_BLOCKS else numpy_dtype(dtype)


def _storage(dtype: str) -> str:
    return "unsigned char" if dtype in QUANT_BLOCKS else STORAGE[dtype]
