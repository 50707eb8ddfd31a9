"""Programmatic Dependent Launch (PDL, sm_90+): our kernels launched through the driver API.

A kernel launched with `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` may start while
the kernel before it on its stream is still running; every generated kernel begins with
`griddepcontrol.wait` (`codegen.cuda_source.kernel_template`), which blocks until that kernel
has completed and its memory is visible, so only the launch latency overlaps. Stream capture
records the dependency as a programmatic graph edge.

`Variant.issue_list` (cuda_launch) uses it only for a kernel whose previous step on its stream
is one of our kernels (`pdl_steps`): after cuBLAS, a copy, a host function or an event the launch
is an ordinary one. `driver_for_pdl` returns the driver's `cuLaunchKernelEx` only where the
current device's compute capability is at least 9.0 and the driver has it.

The one entry point is looked up once per process, through `cuGetProcAddress_v2` with the CUDA
version the installed driver reports (`cuDriverGetVersion`), and called through ctypes with the
driver's own structs (`CUlaunchConfig`, `CUlaunchAttribute`). A binding that resolves its whole
table of entry points for a newer CUDA than the driver's makes the driver answer "invalid value"
for each one it lacks (compute-sanitizer memcheck reports every such answer as an API error).
Nothing here imports CuPy at import; `libcuda` is opened on the first `driver_for_pdl()`.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

from optgraph.codegen.plan.steps import KernelStep
from optgraph.runtime.cuda.device import cupy

MIN_COMPUTE_CAPABILITY = 90
CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6
CU_GET_PROC_ADDRESS_DEFAULT = 0
CUDA_SUCCESS = 0
LAUNCH_ENTRY = b"cuLaunchKernelEx"
MIN_LAUNCH_ENTRY_VERSION = 11080  # cuLaunchKernelEx appeared in CUDA 11.8


class LaunchAttributeValue(ctypes.Union):
    """`CUlaunchAttributeValue`: a 64-byte union; PDL sets its first int."""

    _fields_ = [("pad", ctypes.c_char * 64), ("programmatic", ctypes.c_int)]


class LaunchAttribute(ctypes.Structure):
    """`CUlaunchAttribute`: the id, padding to 8 bytes, the value."""

    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", LaunchAttributeValue)]


class LaunchConfig(ctypes.Structure):
    """`CUlaunchConfig` (CUDA 12 and 13)."""

    _fields_ = [
        ("gridDimX", ctypes.c_uint),
        ("gridDimY", ctypes.c_uint),
        ("gridDimZ", ctypes.c_uint),
        ("blockDimX", ctypes.c_uint),
        ("blockDimY", ctypes.c_uint),
        ("blockDimZ", ctypes.c_uint),
        ("sharedMemBytes", ctypes.c_uint),
        ("hStream", ctypes.c_void_p),
        ("attrs", ctypes.POINTER(LaunchAttribute)),
        ("numAttrs", ctypes.c_uint),
    ]


# CUresult cuLaunchKernelEx(const CUlaunchConfig*, CUfunction, void** kernelParams, void** extra)
LAUNCH_KERNEL_EX = ctypes.CFUNCTYPE(
    ctypes.c_int, ctypes.POINTER(LaunchConfig), ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p
)


@dataclass(frozen=True)
class DriverLaunch:
    """The driver's `cuLaunchKernelEx`, as looked up for `driver_version`."""

    driver_version: int
    launch_kernel_ex: Callable[..., int]


def open_driver_library() -> Any:
    """libcuda, or None where it is not installed (replaced by a fake in the tests)."""
    try:
        return ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None


def lookup_launch_entry(library: Any) -> DriverLaunch | None:
    """`cuLaunchKernelEx` from `library` for the CUDA version the driver supports, or None."""
    get_version = getattr(library, "cuDriverGetVersion", None)
    get_proc = getattr(library, "cuGetProcAddress_v2", None)
    if get_version is None or get_proc is None:
        return None
    version = ctypes.c_int(0)
    if get_version(ctypes.pointer(version)) != CUDA_SUCCESS:
        return None
    if version.value < MIN_LAUNCH_ENTRY_VERSION:
        return None
    address = ctypes.c_void_p(0)
    status = ctypes.c_int(0)
    found = get_proc(
        LAUNCH_ENTRY,
        ctypes.pointer(address),
        ctypes.c_int(version.value),
        ctypes.c_uint64(CU_GET_PROC_ADDRESS_DEFAULT),
        ctypes.pointer(status),
    )
    if found != CUDA_SUCCESS or status.value != 0 or not address.value:
        return None
    return DriverLaunch(version.value, LAUNCH_KERNEL_EX(address.value))


@cache
def driver_launch() -> DriverLaunch | None:
    """The launch entry point, looked up once per process."""
    library = open_driver_library()
    return None if library is None else lookup_launch_entry(library)


def driver_for_pdl() -> DriverLaunch | None:
    """The driver's launch entry point when PDL can be used on the current device, else None."""
    try:
        cc = int(cupy().cuda.Device().compute_capability)
    except Exception:  # noqa: BLE001 - no device, or not the real CuPy: no PDL
        return None
    return driver_launch() if cc >= MIN_COMPUTE_CAPABILITY else None


def follows_kernel(steps: Iterable[object]) -> set[int]:
    """Indices (in `steps`) of the steps whose previous step on the same stream is a kernel
    step: a kernel there may be launched with the programmatic attribute."""
    previous_is_kernel: dict[int, bool] = {}
    chosen: set[int] = set()
    for i, step in enumerate(steps):
        stream = getattr(step, "stream", 0)
        if previous_is_kernel.get(stream, False):
            chosen.add(i)
        previous_is_kernel[stream] = isinstance(step, KernelStep)
    return chosen


def pdl_steps(steps: Sequence[object]) -> set[int]:
    """Indices of the kernel steps that follow a kernel step on their stream (`follows_kernel`):
    those are launched with the programmatic attribute."""
    return {i for i in follows_kernel(steps) if isinstance(steps[i], KernelStep)}


class PdlLauncher:
    """Builds host calls that launch a CUfunction with the programmatic attribute."""

    def __init__(self, driver: DriverLaunch):
        self.driver = driver
        self.attrs = (LaunchAttribute * 1)()
        self.attrs[0].id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        self.attrs[0].value.programmatic = 1

    def launch(
        self,
        function_ptr: int,
        grid: Sequence[int],
        block: Sequence[int],
        args: Sequence[int],
        shared_mem: int,
        stream_ptr: int,
    ) -> Callable[[], None]:
        """A call that launches the kernel at `function_ptr` with pointer arguments `args`."""
        cfg = LaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (int(x) for x in grid)
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (int(x) for x in block)
        cfg.sharedMemBytes = int(shared_mem)
        cfg.hStream = int(stream_ptr) or None
        cfg.attrs = ctypes.cast(self.attrs, ctypes.POINTER(LaunchAttribute))
        cfg.numAttrs = len(self.attrs)
        n = len(args)
        # The driver takes an array of pointers, each to one argument's value (all ours are
        # device pointers); both arrays live as long as the call (the closure holds them).
        values = (ctypes.c_void_p * max(n, 1))(*(int(a) for a in args))
        base = ctypes.addressof(values)
        size = ctypes.sizeof(ctypes.c_void_p)
        pointers = (ctypes.c_void_p * max(n, 1))(*(base + size * i for i in range(n)))
        params = ctypes.addressof(pointers) if n else None
        function = int(function_ptr)
        launch_kernel_ex = self.driver.launch_kernel_ex
        attrs = self.attrs

        def call() -> None:
            keep = (values, pointers, attrs)  # noqa: F841 - the arrays outlive every launch
            err = launch_kernel_ex(ctypes.byref(cfg), function, params, None)
            if err != CUDA_SUCCESS:
                raise RuntimeError(f"cuLaunchKernelEx failed: CUresult {err}")

        return call
