"""Programmatic Dependent Launch (PDL, sm_90+): our kernels launched through the driver API.

A kernel launched with `CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION` may start while
the kernel before it on its stream is still running; every generated kernel begins with
`griddepcontrol.wait` (`codegen.cuda_source.kernel_template`), which blocks until that kernel
has completed and its memory is visible, so only the launch latency overlaps. Stream capture
records the dependency as a programmatic graph edge.

`Variant.issue_list` (cuda_launch) uses it only for a kernel whose previous step on its stream
is one of our kernels (`pdl_steps`): after cuBLAS, a copy, a host function or an event the
launch is an ordinary one. `driver_for_pdl` returns the driver binding only where it imports
and the current device's compute capability is at least 9.0 (the fake CuPy of the tests has
neither: the CuPy launch path runs there). Nothing here imports CuPy or cuda-bindings at import.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from optgraph.codegen.cuda_steps import KernelStep
from optgraph.runtime.cuda_device import cupy

MIN_COMPUTE_CAPABILITY = 90


def driver_for_pdl() -> Any | None:
    """`cuda.bindings.driver` when PDL can be used on the current device, else None."""
    try:
        from cuda.bindings import driver
    except ImportError:
        return None
    try:
        cc = int(cupy().cuda.Device().compute_capability)
    except Exception:  # noqa: BLE001 - no device, or not the real CuPy: no PDL
        return None
    return driver if cc >= MIN_COMPUTE_CAPABILITY else None


def pdl_steps(steps: Iterable[object]) -> set[int]:
    """Indices (in `steps`) of the kernel steps whose previous step on the same stream is a
    kernel step: those may be launched with the programmatic attribute."""
    last_is_kernel: dict[int, bool] = {}
    chosen: set[int] = set()
    for i, step in enumerate(steps):
        stream = getattr(step, "stream", 0)
        is_kernel = isinstance(step, KernelStep)
        if is_kernel and last_is_kernel.get(stream, False):
            chosen.add(i)
        last_is_kernel[stream] = is_kernel
    return chosen


class PdlLauncher:
    """Builds host calls that launch a CUfunction with the programmatic attribute."""

    def __init__(self, driver: Any):
        self.driver = driver
        attr = driver.CUlaunchAttribute()
        attr.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION
        attr.value.programmaticStreamSerializationAllowed = 1
        self.attrs = [attr]

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
        d = self.driver
        cfg = d.CUlaunchConfig()
        cfg.gridDimX, cfg.gridDimY, cfg.gridDimZ = (int(x) for x in grid)
        cfg.blockDimX, cfg.blockDimY, cfg.blockDimZ = (int(x) for x in block)
        cfg.sharedMemBytes = int(shared_mem)
        cfg.hStream = d.CUstream(int(stream_ptr))
        cfg.attrs = self.attrs
        cfg.numAttrs = len(self.attrs)
        n = len(args)
        # The driver takes an array of pointers, each to one argument's value (all ours are
        # device pointers); both arrays live as long as the call (the closure holds them).
        values = (ctypes.c_void_p * max(n, 1))(*(int(a) for a in args))
        base = ctypes.addressof(values)
        size = ctypes.sizeof(ctypes.c_void_p)
        pointers = (ctypes.c_void_p * max(n, 1))(*(base + size * i for i in range(n)))
        params = ctypes.addressof(pointers) if n else 0
        function = d.CUfunction(int(function_ptr))
        success = d.CUresult.CUDA_SUCCESS

        def call() -> None:
            keep = (values, pointers)  # noqa: F841 - the argument arrays outlive every launch
            (err,) = d.cuLaunchKernelEx(cfg, function, params, 0)
            if err != success:
                raise RuntimeError(f"cuLaunchKernelEx failed: {err!r}")

        return call
