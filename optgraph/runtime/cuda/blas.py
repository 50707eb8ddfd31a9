"""cuBLAS for the CUDA runtime: one handle per stream, each with its own workspace, called directly.

Why not CuPy's wrappers: once any code has made a CuPy stream current, every
`cupy_backends.cuda.libs.cublas` call first re-sets the handle's stream, and `cublasSetStream`
discards a user workspace (cuBLAS then falls back to its own pool, which allocates). Under stream
capture we want neither, so the library CuPy already loaded is called through ctypes:
`cublasSetStream` and `cublasSetWorkspace` once per handle before any capture, then only
`cublasGemmEx` / `cublasGemmStridedBatchedEx` (float32 compute, `CUBLAS_GEMM_DEFAULT`, host
pointer mode, reduced-precision split-K reductions disallowed so f16/bf16 accumulate in float32).

If the library cannot be located, `CupyBlas` uses CuPy's wrappers instead (same calls; the
workspace is set when CuPy exposes `setWorkspace`). `BLAS.kind` says which one is in use.

This module imports no CuPy: `runtime/cuda/runner.py` passes in CuPy's cublas module.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import glob
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

CUDA_DTYPES = {"f32": 0, "f16": 2, "bf16": 14}
CUBLAS_COMPUTE_32F = 68
CUBLAS_GEMM_DEFAULT = -1
CUBLAS_DEFAULT_MATH = 0
CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION = 16
WORKSPACE_BYTES = 32 << 20


def _loaded_cublas_path() -> str | None:
    """The libcublas this process has mapped (CuPy's), from /proc/self/maps."""
    try:
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.rsplit(" ", 1)[-1].strip()
                if os.path.basename(path).startswith("libcublas.so"):
                    return path
    except OSError:
        return None
    return None


def _candidate_paths() -> list[str]:
    found = _loaded_cublas_path()
    paths = [found] if found else []
    for root in filter(None, (os.environ.get("CUDA_PATH"), "/usr/local/cuda")):
        paths += sorted(glob.glob(os.path.join(root, "lib64", "libcublas.so*")))
    for entry in __import__("sys").path:
        paths += sorted(glob.glob(os.path.join(entry, "nvidia", "cu*", "lib", "libcublas.so*")))
        paths += sorted(glob.glob(os.path.join(entry, "nvidia", "cublas", "lib", "libcublas.so*")))
    name = ctypes.util.find_library("cublas")
    paths += [p for p in (name, "libcublas.so.13", "libcublas.so.12", "libcublas.so") if p]
    return paths


class CtypesBlas:
    """cuBLAS through ctypes on the library CuPy loaded."""

    kind = "ctypes"

    def __init__(self, lib: ctypes.CDLL, path: str):
        self.lib, self.path = lib, path
        vp, i, ll = ctypes.c_void_p, ctypes.c_int, ctypes.c_longlong
        lib.cublasCreate_v2.argtypes = [ctypes.POINTER(vp)]
        lib.cublasDestroy_v2.argtypes = [vp]
        lib.cublasSetStream_v2.argtypes = [vp, vp]
        lib.cublasSetWorkspace_v2.argtypes = [vp, vp, ctypes.c_size_t]
        lib.cublasSetMathMode.argtypes = [vp, i]
        lib.cublasGemmEx.argtypes = [vp, i, i, i, i, i, vp, vp, i, i, vp, i, i, vp, vp, i, i, i, i]
        lib.cublasGemmStridedBatchedEx.argtypes = [
            vp, i, i, i, i, i, vp, vp, i, i, ll, vp, i, i, ll, vp, vp, i, i, ll, i, i, i
        ]  # fmt: skip
        self._one = ctypes.c_float(1.0)
        self._zero = ctypes.c_float(0.0)
        self.alpha = ctypes.addressof(self._one)
        self.beta = ctypes.addressof(self._zero)

    def _check(self, status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"cuBLAS {what} failed with status {status}")

    def create(self, stream: int, workspace: int, workspace_bytes: int) -> int:
        handle = ctypes.c_void_p()
        self._check(self.lib.cublasCreate_v2(ctypes.byref(handle)), "create")
        h = int(handle.value or 0)
        self._check(self.lib.cublasSetStream_v2(h, stream), "setStream")
        self._check(self.lib.cublasSetWorkspace_v2(h, workspace, workspace_bytes), "setWorkspace")
        mode = CUBLAS_DEFAULT_MATH | CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION
        self._check(self.lib.cublasSetMathMode(h, mode), "setMathMode")
        return h

    def destroy(self, handle: int) -> None:
        self.lib.cublasDestroy_v2(handle)

    def gemm_call(self, handle: int, g: Any, a: int, b: int, c: int) -> Callable[[], None]:
        """A closure issuing one `Gemm` (codegen.cuda_matmul) with resolved pointers."""
        t, tc = CUDA_DTYPES[g.dtype], CUDA_DTYPES[g.c_dtype or g.dtype]
        check = self._check
        args: tuple[Any, ...]
        if g.batch == 1:
            fn = self.lib.cublasGemmEx
            args = (handle, g.transa, g.transb, g.m, g.n, g.k, self.alpha, a, t, g.lda, b, t,
                    g.ldb, self.beta, c, tc, g.ldc, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)  # fmt: skip
        else:
            fn = self.lib.cublasGemmStridedBatchedEx
            args = (handle, g.transa, g.transb, g.m, g.n, g.k, self.alpha, a, t, g.lda,
                    g.stride_a, b, t, g.ldb, g.stride_b, self.beta, c, tc, g.ldc, g.stride_c,
                    g.batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)  # fmt: skip

        def call() -> None:
            check(fn(*args), "gemm")

        return call


class CupyBlas:
    """The fallback: CuPy's own cuBLAS wrappers."""

    kind = "cupy"

    def __init__(self, cublas: ModuleType):
        self.cublas = cublas
        self._one = ctypes.c_float(1.0)
        self._zero = ctypes.c_float(0.0)
        self.alpha = ctypes.addressof(self._one)
        self.beta = ctypes.addressof(self._zero)

    def create(self, stream: int, workspace: int, workspace_bytes: int) -> int:
        h = self.cublas.create()
        self.cublas.setStream(h, stream)
        set_workspace = getattr(self.cublas, "setWorkspace", None)
        if set_workspace is not None:
            set_workspace(h, workspace, workspace_bytes)
        self.cublas.setMathMode(h, CUBLAS_MATH_DISALLOW_REDUCED_PRECISION_REDUCTION)
        return int(h)

    def destroy(self, handle: int) -> None:
        self.cublas.destroy(handle)

    def gemm_call(self, handle: int, g: Any, a: int, b: int, c: int) -> Callable[[], None]:
        t, tc = CUDA_DTYPES[g.dtype], CUDA_DTYPES[g.c_dtype or g.dtype]
        fn = self.cublas.gemmStridedBatchedEx
        args = (handle, g.transa, g.transb, g.m, g.n, g.k, self.alpha, a, t, g.lda, g.stride_a,
                b, t, g.ldb, g.stride_b, self.beta, c, tc, g.ldc, g.stride_c, max(g.batch, 1),
                CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT)  # fmt: skip
        return lambda: fn(*args)


BLAS = CtypesBlas | CupyBlas


def load_blas(cupy_cublas: ModuleType) -> BLAS:
    """ctypes cuBLAS on the library CuPy uses, else CuPy's wrappers."""
    with contextlib.suppress(Exception):  # load CuPy's cuBLAS so /proc/self/maps names it
        cupy_cublas.destroy(cupy_cublas.create())
    for path in _candidate_paths():
        try:
            lib = ctypes.CDLL(path)
            lib.cublasGemmStridedBatchedEx  # noqa: B018 - the symbols we need exist
            lib.cublasSetWorkspace_v2  # noqa: B018
            return CtypesBlas(lib, path)
        except (OSError, AttributeError):
            continue
    return CupyBlas(cupy_cublas)
