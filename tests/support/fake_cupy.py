"""A stand-in for CuPy, so the CUDA runtime's host side runs in CI (no GPU, no CuPy).

What it models: device and pinned memory (host memory underneath, so copies really move bytes;
`memGetInfo` reports `device_free`), streams and events (no-ops: everything runs in issue order),
stream capture (calls made while capturing are recorded into a graph instead of run; launching
the instantiated graph runs them), `cudaGraphExecUpdate`, the current allocator, and CuPy's
cuBLAS wrappers. Kernels and GEMMs are recorded by name and do not compute anything, so output
*values* mean nothing here: tests assert what the runtime did (counters, which calls, which
buffers), never results.

    with fake_cupy(monkeypatch) as fake:      # installs cupy, cupy_backends and cuda.bindings
        program = cuda_program(graph)
        program.run(inputs)
        fake.launches                         # kernel names launched eagerly or by replay
"""

from __future__ import annotations

import contextlib
import ctypes
import enum
import itertools
import sys
import threading
import types
from collections.abc import Callable, Iterator
from typing import Any, Self

import numpy as np
import pytest

from tests.support.fake_nccl import NcclCommunicator, nccl_module

_ids = itertools.count(0x1000, 0x10)


class OutOfMemoryError(Exception):
    pass


class _Memory:
    def __init__(self, size: int):
        self.size = size


class MemoryPointer:
    """`cupy.cuda.alloc`'s result: `.ptr` and `.mem.size`, host bytes underneath."""

    def __init__(self, nbytes: int):
        self.array = np.zeros(max(nbytes, 1), np.uint8)
        self.ptr = int(self.array.ctypes.data)
        self.mem = _Memory(nbytes)

    def bytes(self, offset: int, nbytes: int) -> np.ndarray:
        return self.array[offset : offset + nbytes]


class Stream:
    def __init__(self, non_blocking: bool = False):
        self.ptr = next(_ids)

    def synchronize(self) -> None:
        pass

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


class Event:
    def __init__(self, block: bool = False, disable_timing: bool = False):
        self.ptr = next(_ids)

    def record(self, stream: Stream | None = None) -> None:
        pass

    def synchronize(self) -> None:
        pass


class DeviceArray:
    """`cupy.ndarray` enough for the runtime: shape, dtype, C-contiguous flag, `.data.ptr`."""

    def __init__(self, fake: FakeCupy, host: np.ndarray):
        host = np.ascontiguousarray(host)
        self.fake = fake
        self.shape, self.dtype = host.shape, host.dtype
        self.flags = types.SimpleNamespace(c_contiguous=True)
        self.data = fake.alloc(host.nbytes)
        self.data.bytes(0, host.nbytes)[...] = host.reshape(-1).view(np.uint8)

    def get(self) -> np.ndarray:
        nbytes = int(np.prod(self.shape)) * self.dtype.itemsize
        return self.data.bytes(0, nbytes).view(self.dtype).reshape(self.shape).copy()

    def set(self, host: np.ndarray) -> None:
        """`cupy.ndarray.set`: the host array's values copied in (same shape and dtype)."""
        host = np.ascontiguousarray(host, dtype=self.dtype).reshape(self.shape)
        self.data.bytes(0, host.nbytes)[...] = host.reshape(-1).view(np.uint8)

    @property
    def T(self) -> DeviceArray:
        """The transpose, as a new C-contiguous array (CuPy's is a view; the runtime copies it
        at once: `.T.copy()`)."""
        return DeviceArray(self.fake, self.get().T)

    def copy(self) -> DeviceArray:
        return DeviceArray(self.fake, self.get())


class FakeCupy:
    """The state behind the fake modules: allocations, captures, graphs, what was launched."""

    def __init__(self) -> None:
        self.allocator: Callable[[int], Any] | None = None
        self.allocations: list[MemoryPointer] = []
        self._local = threading.local()  # a capture per thread: ranks may be threads
        self.device_count = 1
        self.devices_used: list[int] = []
        self.graphs: dict[int, list[tuple[str, Callable[[], None]]]] = {}
        self.execs: dict[int, list[tuple[str, Callable[[], None]]]] = {}
        self.launches: list[str] = []  # kernel names, as they run (eagerly or replayed)
        self.gemms = 0
        self.graph_launches = 0
        self.instantiations = 0
        self.memcpys = 0
        self.driver: FakeDriver | None = None
        self.device_free = 80 << 30  # what memGetInfo says is free (a test lowers it)
        self.pool_free = 0  # free blocks in CuPy's default memory pool

    @property
    def capture(self) -> list[tuple[str, Callable[[], None]]] | None:
        return getattr(self._local, "capture", None)

    @capture.setter
    def capture(self, value: list[tuple[str, Callable[[], None]]] | None) -> None:
        self._local.capture = value

    # -- calls that run now or go into the capturing graph ------------------------------------

    def issue(self, label: str, call: Callable[[], None]) -> None:
        if self.capture is not None:
            self.capture.append((label, call))
        else:
            call()

    def alloc(self, nbytes: int) -> MemoryPointer:
        if self.allocator is not None:
            return self.allocator(nbytes)
        mem = MemoryPointer(nbytes)
        self.allocations.append(mem)
        return mem

    def alloc_pinned(self, nbytes: int) -> bytearray:
        return bytearray(max(nbytes, 1))

    @contextlib.contextmanager
    def using_allocator(self, allocator: Callable[[int], Any]) -> Iterator[None]:
        previous, self.allocator = self.allocator, allocator
        try:
            yield
        finally:
            self.allocator = previous

    def memcpy_async(self, dst: int, src: int, nbytes: int, kind: int, stream: int) -> None:
        def copy() -> None:
            self.memcpys += 1
            ctypes.memmove(dst, src, nbytes)

        self.issue("MEMCPY", copy)

    def memcpy_2d_async(
        self, dst: int, dpitch: int, src: int, spitch: int, width: int, height: int, *rest: int
    ) -> None:
        def copy() -> None:
            self.memcpys += 1
            for row in range(height):
                ctypes.memmove(dst + row * dpitch, src + row * spitch, width)

        self.issue("MEMCPY2D", copy)

    def memcpy(self, dst: int, src: int, nbytes: int, kind: int) -> None:
        if self.capture is not None:
            raise RuntimeError("synchronous cudaMemcpy during capture")
        ctypes.memmove(dst, src, nbytes)

    def kernel(self, name: str) -> Callable[..., None]:
        def launch(*args: Any, **kwargs: Any) -> None:
            self.issue(f"KERNEL {name}", lambda: self.launches.append(name))

        return launch

    def gemm(self, *args: Any) -> None:
        def run() -> None:
            self.gemms += 1

        self.issue("KERNEL gemm", run)

    # -- capture and graphs -----------------------------------------------------------------

    def begin_capture(self, stream: int, mode: int) -> None:
        assert self.capture is None, "capture already in progress"
        self.capture = []

    def end_capture(self, stream: int) -> int:
        assert self.capture is not None, "no capture in progress"
        graph = next(_ids)
        self.graphs[graph], self.capture = self.capture, None
        return graph

    def instantiate(self, graph: int) -> int:
        exec_ = next(_ids)
        self.instantiations += 1
        self.execs[exec_] = list(self.graphs[graph])
        return exec_

    def launch_graph(self, exec_: int, stream: int) -> None:
        self.graph_launches += 1
        for _, call in self.execs[exec_]:
            call()

    def exec_update(self, exec_: Any, graph: Any) -> tuple[Any, ...]:
        exec_ = getattr(exec_, "value", exec_)
        graph = getattr(graph, "value", graph)
        ops, new = self.execs[exec_], self.graphs[graph]
        if [label for label, _ in ops] != [label for label, _ in new]:
            return (CudaError.cudaErrorGraphExecUpdateFailure,)
        self.execs[exec_] = list(new)
        return (CudaError.cudaSuccess,)

    def dot_print(self, graph: int, path: str, flags: int) -> None:
        lines = ["digraph dot {", "subgraph cluster_1 {"]
        for i, (label, _) in enumerate(self.graphs[graph]):
            body = "\n".join(label.split(" "))
            lines.append(f'"graph_1_node_{i}"[shape="rectangle" label="{i}\n{body}"];')
        lines += ["}", "}"]
        with open(path, "w") as f:
            f.write("\n".join(lines))

    def asarray(self, host: np.ndarray) -> DeviceArray:
        return DeviceArray(self, host)

    @property
    def live_graphs(self) -> int:
        return len(self.graphs) + len(self.execs)


class CudaError(enum.Enum):
    cudaSuccess = 0
    cudaErrorGraphExecUpdateFailure = 910


class _Handle:
    def __init__(self, init_value: int = 0):
        self.value = init_value


def _modules(fake: FakeCupy) -> dict[str, types.ModuleType]:
    def destroy(table: dict[int, Any]) -> Callable[[int], None]:
        return lambda handle: table.pop(handle)

    runtime = types.SimpleNamespace(
        getDeviceCount=lambda: fake.device_count,
        memGetInfo=lambda: (fake.device_free, 80 << 30),
        memcpyAsync=fake.memcpy_async,
        memcpy2DAsync=fake.memcpy_2d_async,
        memcpy=fake.memcpy,
        eventRecord=lambda event, stream: fake.issue("EVENT_RECORD", lambda: None),
        streamWaitEvent=lambda stream, event, flags: fake.issue("WAIT_EVENT", lambda: None),
        streamBeginCapture=fake.begin_capture,
        streamEndCapture=fake.end_capture,
        graphInstantiate=fake.instantiate,
        graphUpload=lambda exec_, stream: None,
        graphLaunch=fake.launch_graph,
        graphDestroy=destroy(fake.graphs),
        graphExecDestroy=destroy(fake.execs),
        graphDebugDotPrint=fake.dot_print,
        # no peer access: the fake runs no kernels, so the peer all_reduce keeps to the GPU tests
        deviceCanAccessPeer=lambda device, peer: 0,
    )
    memory = types.SimpleNamespace(OutOfMemoryError=OutOfMemoryError)
    cuda = types.ModuleType("cupy.cuda")
    cuda.runtime = runtime  # type: ignore[attr-defined]
    cuda.memory = memory  # type: ignore[attr-defined]
    cuda.alloc = fake.alloc  # type: ignore[attr-defined]
    cuda.alloc_pinned_memory = fake.alloc_pinned  # type: ignore[attr-defined]
    cuda.using_allocator = fake.using_allocator  # type: ignore[attr-defined]
    cuda.Stream = Stream  # type: ignore[attr-defined]
    cuda.Event = Event  # type: ignore[attr-defined]
    current_stream = Stream()
    cuda.get_current_stream = lambda: current_stream  # type: ignore[attr-defined]
    cuda.get_elapsed_time = lambda start, end: 0.25  # type: ignore[attr-defined]
    cuda.nccl = nccl_module(fake.issue)  # type: ignore[attr-defined]

    class Device:
        def __init__(self, device: int = 0):
            self.id = device

        def use(self) -> None:
            fake.devices_used.append(self.id)

    cuda.Device = Device  # type: ignore[attr-defined]

    class RawModule:
        def __init__(self, code: str, options: tuple[str, ...] = ()):
            self.code = code

        def get_function(self, name: str) -> Any:
            return types.SimpleNamespace(kernel=fake.kernel(name))

    cupy = types.ModuleType("cupy")
    cupy.cuda = cuda  # type: ignore[attr-defined]
    cupy.RawModule = RawModule  # type: ignore[attr-defined]
    cupy.ndarray = DeviceArray  # type: ignore[attr-defined]
    cupy.ascontiguousarray = lambda array: array  # type: ignore[attr-defined]
    cupy.asarray = fake.asarray  # type: ignore[attr-defined]
    cupy.empty = lambda shape, dtype: DeviceArray(fake, np.zeros(shape, dtype))  # type: ignore[attr-defined]
    cupy.get_default_memory_pool = lambda: types.SimpleNamespace(  # type: ignore[attr-defined]
        free_bytes=lambda: fake.pool_free, free_all_blocks=lambda: None
    )
    cupy.fake = fake  # type: ignore[attr-defined]

    handles = itertools.count(1)
    cublas = types.ModuleType("cupy_backends.cuda.libs.cublas")
    cublas.create = lambda: next(handles)  # type: ignore[attr-defined]
    cublas.destroy = lambda handle: None  # type: ignore[attr-defined]
    cublas.setStream = lambda handle, stream: None  # type: ignore[attr-defined]
    cublas.setMathMode = lambda handle, mode: None  # type: ignore[attr-defined]
    cublas.gemmStridedBatchedEx = fake.gemm  # type: ignore[attr-defined]
    libs = types.ModuleType("cupy_backends.cuda.libs")
    libs.cublas = cublas  # type: ignore[attr-defined]

    bindings_runtime = types.ModuleType("cuda.bindings.runtime")
    bindings_runtime.cudaGraphExecUpdate = fake.exec_update  # type: ignore[attr-defined]
    bindings_runtime.cudaError_t = CudaError  # type: ignore[attr-defined]
    bindings_runtime.cudaGraphExec_t = _Handle  # type: ignore[attr-defined]
    bindings_runtime.cudaGraph_t = _Handle  # type: ignore[attr-defined]
    bindings = types.ModuleType("cuda.bindings")
    bindings.runtime = bindings_runtime  # type: ignore[attr-defined]
    cuda_pkg = types.ModuleType("cuda")
    cuda_pkg.bindings = bindings  # type: ignore[attr-defined]
    return {
        "cupy": cupy,
        "cupy.cuda": cuda,
        "cupy.cuda.nccl": cuda.nccl,  # type: ignore[attr-defined]
        "cupy_backends": types.ModuleType("cupy_backends"),
        "cupy_backends.cuda": types.ModuleType("cupy_backends.cuda"),
        "cupy_backends.cuda.libs": libs,
        "cupy_backends.cuda.libs.cublas": cublas,
        "cuda": cuda_pkg,
        "cuda.bindings": bindings,
        "cuda.bindings.runtime": bindings_runtime,
    }


class FakeDriver:
    """libcuda's `cuLaunchHostFunc` (runtime/cuda/offload.py calls it through ctypes): the host
    function runs in issue order, or at replay when issued during a capture."""

    def __init__(self, fake: FakeCupy):
        self.fake = fake
        self.host_functions = 0

    def cuLaunchHostFunc(self, stream: Any, callback: Callable[[Any], None], arg: Any) -> int:
        def call() -> None:
            self.host_functions += 1
            callback(None)

        self.fake.issue("HOST_FUNC", call)
        return 0


def install_in_process() -> FakeCupy:
    """Install the fake modules for the rest of this process (a spawned rank process of the
    several-GPU tests: `MultiGpuProgram(..., setup=install_in_process)`)."""
    from optgraph.runtime.cuda import blas, launch

    fake = FakeCupy()
    fake.device_count = 8
    sys.modules.update(_modules(fake))
    blas._candidate_paths = list  # type: ignore[assignment]
    launch._MODULES.clear()
    return fake


@contextlib.contextmanager
def fake_cupy(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeCupy]:
    """Install the fake modules for the duration (skips where the real CuPy is importable, so
    nothing here can leak into the GPU tests' CuPy state)."""
    import importlib.util

    if importlib.util.find_spec("cupy") is not None:
        pytest.skip("the real CuPy is installed: the GPU tests cover the runtime here")
    from optgraph.runtime.cuda import blas

    fake = FakeCupy()
    NcclCommunicator.created.clear()
    for name, module in _modules(fake).items():
        monkeypatch.setitem(sys.modules, name, module)
    monkeypatch.setattr(blas, "_candidate_paths", list)  # CuPy's wrappers, not ctypes
    from optgraph.runtime.cuda import launch, offload

    fake.driver = FakeDriver(fake)
    monkeypatch.setattr(offload, "_DRIVER", fake.driver)

    monkeypatch.setattr(launch, "_MODULES", {})  # compiled modules outlive programs
    yield fake
