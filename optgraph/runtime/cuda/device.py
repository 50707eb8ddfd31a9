"""The CUDA runtime's one door to CuPy: a lazy import and the device probe.

Every runtime module that calls CuPy (`cuda`, `memory`, `launch`, `capture`) gets
it through `cupy()`, inside functions, never at import time: `import optgraph.runtime.cuda.runner` works
where CuPy is missing, and `is_available()` then says so. The runtime's other modules
(`blas`, `offload`, `graph_cache`) take what they need of CuPy as arguments.
"""

from __future__ import annotations

from typing import Any


def cupy() -> Any:
    """The `cupy` module, imported on first use (`ImportError` where it is not installed)."""
    import cupy as module

    return module


def nccl() -> Any:
    """`cupy.cuda.nccl` (NCCL through CuPy), imported on first use: a submodule `import cupy`
    does not load, and one that is missing where CuPy was built without NCCL."""
    import cupy.cuda.nccl as module

    return module


def is_available() -> bool:
    """Whether CuPy imports and sees at least one CUDA device."""
    try:
        return int(cupy().cuda.runtime.getDeviceCount()) > 0
    except Exception:  # noqa: BLE001 - any failure means no usable GPU
        return False
