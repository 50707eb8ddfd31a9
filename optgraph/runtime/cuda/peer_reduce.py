"""Small all_reduces as one kernel that writes straight into the peers' memory (NVLink, PCIe).

A decode step's all_reduces are a few kilobytes each (a row of the hidden state), so their cost
is latency, not bandwidth, and NCCL's kernel spends it mostly on protocol (measured against this
one: docs/results/2026-11-24-h200x2-several-gpus.md). `PeerReduce` does such an all_reduce in one short kernel per rank:

    rank r, block b, replay n (epoch e = n + 1, parity e % 2):
      1. store its slice of the operand into every peer's buffer, slot [parity][r]
      2. release-store e into every peer's flag [r][b] (system scope)
      3. wait until its own flags [p][b] >= e for every peer p (acquire, system scope)
      4. out = sum over p in rank order of slot [parity][p] (its own operand for p = r), in f32,
         rounded; with an addend (`CollectiveStep.then_add`), out = addend + that, rounded again
         (what the add after it computes), written to the add's result, the add's launch skipped

Every rank sums the same values in the same order, so all ranks hold the same bits, as NCCL's
result does. Two parities suffice: a peer can be at most one replay ahead (it needs this rank's
flag of the next replay to get past it), and that replay writes the other parity.

Each all_reduce step of the program gets its own slot (flags, per-block epochs, two data
regions), so steps on different streams never share memory. The buffers are plain `cudaMalloc`
memory shared through CUDA IPC handles, exchanged over the world NCCL communicator when the first
variant is prepared (every rank prepares the same steps in the same order). Used for all_reduces
over every rank of at most `MAX_BYTES`, when every pair of the run's GPUs can reach each other's
memory (`peers_reachable`, asked by the parent that starts the ranks);
the rest go to NCCL (`NcclCollectives`). Whether a step takes this path depends only on the step,
the same on every rank (a rank that called NCCL while its peer ran this kernel would wait
forever); pointers off 16 bytes are staged. Ranks in one process (the "thread" launcher) cannot
open each other's IPC handles, so they keep NCCL.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any

import numpy as np

from optgraph.codegen.plan.steps import CollectiveStep
from optgraph.ir.graph import DTYPE_BYTES
from optgraph.runtime.cuda.device import cupy
from optgraph.runtime.cuda.memory import D2D
from optgraph.runtime.cuda.pdl import PdlLauncher

MAX_BYTES = 1 << 20  # above this NCCL's ring moves the bytes faster than one shot
MAX_BLOCKS = 64
THREADS = 256
VECTOR = 16  # bytes per thread per load/store
IPC_LAZY_PEER_ACCESS = 1  # cudaIpcMemLazyEnablePeerAccess
NCCL_UINT8 = 1
TYPES = {"f16": "__half", "bf16": "__nv_bfloat16", "f32": "float"}

SOURCE = r"""
#include <cuda_fp16.h>
#include <cuda_bf16.h>
__device__ __forceinline__ float to_f32(float x) { return x; }
__device__ __forceinline__ float to_f32(__half x) { return __half2float(x); }
__device__ __forceinline__ float to_f32(__nv_bfloat16 x) { return __bfloat162float(x); }
template <typename T> __device__ __forceinline__ T from_f32(float x);
template <> __device__ __forceinline__ float from_f32<float>(float x) { return x; }
template <> __device__ __forceinline__ __half from_f32<__half>(float x) { return __float2half(x); }
template <> __device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float x) {
  return __float2bfloat16(x);
}

// slot (bytes): flags[world][MAXB] u32 | epochs[MAXB] u32 | data[2][world][n] T
template <typename T>
__global__ void __launch_bounds__(256) peer_all_reduce(
    const T* __restrict__ in, T* out, long long n, long long world, long long rank,
    const unsigned long long* __restrict__ slots, const T* addend)
{
  // Launched with the programmatic attribute after a kernel: wait for it before reading `in`
  // (a no-op otherwise); the next kernel may launch now, since it waits for this one likewise.
#if __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
  // addend: null, or out = addend + (the sum rounded to T), as the add after it would compute
  constexpr int PER = 16 / sizeof(T);
  constexpr int MAXB = 64;
  const int b = blockIdx.x;
  char* own = (char*)slots[rank];
  unsigned int* epochs = (unsigned int*)(own + world * MAXB * 4);
  __shared__ unsigned int s_epoch;
  if (threadIdx.x == 0) s_epoch = epochs[b] + 1;
  __syncthreads();
  const unsigned int epoch = s_epoch;
  const long long data = world * MAXB * 4 + MAXB * 4;
  const long long region = (long long)(epoch & 1) * world * n;
  const long long per_block = ((n / PER + gridDim.x - 1) / gridDim.x) * PER;
  const long long lo = b * per_block, hi = min(n, lo + per_block);
  for (int p = 0; p < world; ++p) {
    if (p == rank) continue;
    T* dst = (T*)((char*)slots[p] + data) + region + (long long)rank * n;
    for (long long i = lo + threadIdx.x * PER; i < hi; i += blockDim.x * PER)
      *(uint4*)(dst + i) = *(const uint4*)(in + i);
  }
  __syncthreads();
  if (threadIdx.x < world && threadIdx.x != rank) {
    unsigned int* flag = (unsigned int*)slots[threadIdx.x] + rank * MAXB + b;
    asm volatile("st.release.sys.global.u32 [%0], %1;" :: "l"(flag), "r"(epoch) : "memory");
    unsigned int* mine = (unsigned int*)own + threadIdx.x * MAXB + b;
    unsigned int seen;
    do {
      asm volatile("ld.acquire.sys.global.u32 %0, [%1];" : "=r"(seen) : "l"(mine) : "memory");
    } while ((int)(seen - epoch) < 0);
  }
  __syncthreads();
  const T* got = (const T*)(own + data) + region;
  for (long long i = lo + threadIdx.x * PER; i < hi; i += blockDim.x * PER) {
    float acc[PER];
    #pragma unroll
    for (int k = 0; k < PER; ++k) acc[k] = 0.0f;
    for (int p = 0; p < world; ++p) {
      uint4 raw = p == rank ? *(const uint4*)(in + i) : __ldcg((const uint4*)(got + (long long)p * n + i));
      const T* v = (const T*)&raw;
      #pragma unroll
      for (int k = 0; k < PER; ++k) acc[k] += to_f32(v[k]);
    }
    uint4 packed;
    T* o = (T*)&packed;
    #pragma unroll
    for (int k = 0; k < PER; ++k) o[k] = from_f32<T>(acc[k]);
    if (addend != nullptr) {
      const uint4 raw = *(const uint4*)(addend + i);
      const T* a = (const T*)&raw;
      #pragma unroll
      for (int k = 0; k < PER; ++k) o[k] = from_f32<T>(to_f32(a[k]) + to_f32(o[k]));
    }
    *(uint4*)(out + i) = packed;
  }
  if (threadIdx.x == 0) epochs[b] = epoch;
}
"""


@dataclass(frozen=True)
class CollectiveIssue:
    """Where and how one collective step is issued: its operand and result pointers, its stream
    (a raw pointer), the add after it where the backend does it (`CollectiveStep.then_add`:
    addend and result pointers, (0, 0) otherwise) and, where the step comes right after a kernel
    on its stream, the PDL launcher (None otherwise)."""

    src: int
    dst: int
    stream: int
    add: tuple[int, int] = (0, 0)
    pdl: PdlLauncher | None = None


def eligible(step: CollectiveStep, world: int) -> bool:
    """Whether `PeerReduce` takes `step`: an all_reduce over every rank, of a dtype it sums,
    whole 16-byte vectors, at most `MAX_BYTES`."""
    nbytes = step.count * DTYPE_BYTES.get(step.dtype, 0)
    return (
        step.kind == "all_reduce"
        and step.dtype in TYPES
        and world > 1
        and step.group == tuple(range(world))
        and 0 < nbytes <= MAX_BYTES
        and nbytes % VECTOR == 0
    )


def blocks_for(step: CollectiveStep) -> int:
    """One 16-byte vector per thread, at most `MAX_BLOCKS` blocks."""
    vectors = step.count * DTYPE_BYTES[step.dtype] // VECTOR
    return max(1, min(MAX_BLOCKS, -(-vectors // THREADS)))


def slot_bytes(step: CollectiveStep, world: int) -> int:
    """A step's slot: flags, per-block epochs, two data regions (see the kernel), 256-aligned."""
    size = (
        world * MAX_BLOCKS * 4 + MAX_BLOCKS * 4 + 2 * world * step.count * DTYPE_BYTES[step.dtype]
    )
    return -(-size // 256) * 256


def peers_reachable(devices: Sequence[int]) -> bool:
    """Whether each of the GPUs `devices` (CUDA device ids) can access every other one's memory."""
    rt = cupy().cuda.runtime
    return all(bool(rt.deviceCanAccessPeer(a, b)) for a in devices for b in devices if a != b)


class PeerReduce:
    """The peer all_reduce of one rank (see the module docstring). `comm`: the world NCCL
    communicator (exchanges the IPC handles); `rank`, `world`: this rank and the rank count."""

    def __init__(self, comm: Any, rank: int, world: int):
        self.comm, self.rank, self.world = comm, rank, world
        self.offsets: dict[str, int] = {}  # step node -> its slot's offset in every rank's buffer
        self.base = 0
        self.peers: list[int] = []  # every rank's buffer, as this process sees it
        self.table: Any = None  # the same pointers on the device (the kernel's `slots`)
        self.kernels: dict[str, Any] = {}
        self.staging: dict[str, Any] = {}

    def prepare(self, steps: list[CollectiveStep]) -> None:
        """Allocate and exchange the buffers for `steps` (every rank calls this with the same
        steps, once, before any capture: a CUDA graph bakes the pointers in)."""
        if self.table is not None:
            missing = [s.node for s in steps if s.node not in self.offsets]
            if missing:
                raise RuntimeError(f"peer all_reduce: steps {missing} were not prepared first")
            return
        cp = cupy()
        rt = cp.cuda.runtime
        total = 0
        for step in sorted(steps, key=lambda s: s.node):  # the same layout on every rank
            self.offsets[step.node] = total
            total += slot_bytes(step, self.world)
        self.base = int(rt.malloc(max(total, 256)))
        rt.memset(self.base, 0, max(total, 256))
        handle = np.frombuffer(bytes(rt.ipcGetMemHandle(self.base)), np.uint8)
        mine, every = cp.asarray(handle), cp.empty(handle.size * self.world, np.uint8)
        self.comm.allGather(mine.data.ptr, every.data.ptr, handle.size, NCCL_UINT8,
                            cp.cuda.get_current_stream().ptr)  # fmt: skip
        cp.cuda.get_current_stream().synchronize()
        handles = cp.asnumpy(every).reshape(self.world, -1)
        for peer in range(self.world):
            if peer == self.rank:
                self.peers.append(self.base)
            else:
                opened = rt.ipcOpenMemHandle(bytes(handles[peer]), IPC_LAZY_PEER_ACCESS)
                self.peers.append(int(opened))
        self.table = {  # one pointer table per step: each points at that step's slots
            node: cp.asarray(np.array([p + off for p in self.peers], np.uint64))
            for node, off in self.offsets.items()
        }
        self.staging = {  # operand and result, for pointers off 16 bytes (`calls`)
            s.node: cp.cuda.alloc(2 * s.count * DTYPE_BYTES[s.dtype]) for s in steps
        }
        module = cp.RawModule(
            code=SOURCE,
            options=("--std=c++17",),
            name_expressions=[f"peer_all_reduce<{t}>" for t in TYPES.values()],
        )
        self.kernels = {d: module.get_function(f"peer_all_reduce<{t}>") for d, t in TYPES.items()}

    def calls(self, step: CollectiveStep, at: CollectiveIssue) -> list[Any]:
        """The host calls of `step` (`at`: its pointers, stream, add and PDL launcher): the
        kernel's launch; with `at.add` = (addend, result) not (0, 0) (all four pointers on 16
        bytes), it writes `result = addend + sum` instead of `dst`; with `at.pdl` (the step right
        after a kernel on its stream), launched with the programmatic attribute, so that it
        starts while that kernel finishes. An operand or result off a 16-byte boundary (a view, a
        plan with a smaller alignment) goes through this step's aligned staging buffer: every
        rank must take the same path, and another rank's pointers may be aligned."""
        rt = cupy().cuda.runtime
        nbytes = step.count * DTYPE_BYTES[step.dtype]
        stage = int(self.staging[step.node].ptr)
        before: list[Any] = []
        after: list[Any] = []
        if at.src % VECTOR:
            before.append(partial(rt.memcpyAsync, stage, at.src, nbytes, D2D, at.stream))
            at = replace(at, src=stage, pdl=None)  # a copy, not a kernel, comes right before
        if at.add == (0, 0) and at.dst % VECTOR:
            after.append(partial(rt.memcpyAsync, at.dst, stage + nbytes, nbytes, D2D, at.stream))
            at = replace(at, dst=stage + nbytes)
        return [*before, self._launch(step, at), *after]

    def _launch(self, step: CollectiveStep, at: CollectiveIssue) -> Any:
        cp = cupy()
        kernel = self.kernels[step.dtype]
        addend, out = at.add if at.add != (0, 0) else (0, at.dst)
        values = (at.src, out, step.count, self.world, self.rank,
                  self.table[step.node].data.ptr, addend)  # fmt: skip
        grid, block = (blocks_for(step), 1, 1), (THREADS, 1, 1)
        function = getattr(getattr(kernel, "kernel", None), "ptr", None)  # the CUfunction
        if at.pdl is not None and isinstance(function, int):
            return at.pdl.launch(function, grid, block, values, 0, at.stream)
        args = tuple(np.uint64(v) for v in values)  # every parameter is 8 bytes
        external = cp.cuda.ExternalStream(at.stream)

        def launch() -> None:
            with external:
                kernel(grid, block, args)

        return partial(launch)

    def close(self, barrier: Callable[[Any], None]) -> None:
        """Close the peers' handles, wait until every rank has closed its own (`barrier(stream)`:
        `Communicators.barrier`), then free this rank's buffer (freeing exported memory that
        another process still maps is undefined). Every rank calls it, like `prepare`."""
        if self.table is None:
            return
        cp = cupy()
        rt = cp.cuda.runtime
        for peer, ptr in enumerate(self.peers):
            if peer != self.rank:
                rt.ipcCloseMemHandle(ptr)
        stream = cp.cuda.get_current_stream()
        barrier(stream)
        stream.synchronize()
        rt.free(self.base)
        self.table, self.peers, self.staging = None, [], {}
