"""Products, gathers and dequantization of quantized weights on the CPU, from their blocks.

    y = quantized_matmul(x, blocks, "q4_k", n=4096, k=4096)     # x [..., K] -> f32 [..., N]
    rows = quantized_rows(table, "q8_0", ids, k=4096)           # f32 [*ids.shape, K]
    values = dequantize_blocks(blocks, "q6_k", (256, 512))      # f32 [256, 512]

`blocks` is a weight's stored bytes (uint8, `TensorType(dtype, (N, K)).array_shape`, as a GGUF
tensor's data), W its values [N, K]; `quantized_matmul` is x · Wᵀ, what `matmul(x, w)
{transpose_b = true}` computes for a quantized w. The kernels are C (`quantized_source.py`),
built on first use with the host's C compiler (gcc, else cc or clang) at `-O3 -march=native`
and kept in `~/.cache/optgraph/kernels` by the digest of source, flags and compiler
(`host_compiler.py`), then loaded with ctypes (which releases the GIL during a call).

Why C built here rather than numba (not a dependency, and a JIT whose vectorization we could not
pin down) or NumPy (dequantizes whole matrices per call): one small C file gives bit-exact
decoders beside the product loops, the same compiler the CUDA emulator already needs, and
`-march=native` because it is built on the machine that runs it.

Numerics: x is widened to f32 (exact for f16/bf16); the weight's values are the reference's bit
for bit (`reference/dequantize.py`), so `quantized_rows` and `dequantize_blocks` equal the
reference exactly; a product differs from the reference's f32 matmul only in the order of its
sums: |y − y_ref| ≤ 2·γ_K·(|x|·|W|ᵀ), γ_K = K·u/(1 − K·u), u = 2⁻²⁴ (both are within γ_K of the
exact sum). Results do not depend on the thread count.

Threads: `threads=None` takes `default_threads()`: the cores this process may run on
(`os.sched_getaffinity`) unless `set_threads(n)` said otherwise. Without a C compiler (or when the
build fails) every function falls back to NumPy over the reference's dequantization, with one
warning: products then dequantize 256 rows of W at a time (never the whole matrix), one thread.

Does not handle: x strided other than row-major (copied), big-endian hosts.
"""

from __future__ import annotations

import atexit
import ctypes
import os
import shutil
import tempfile
import threading
import warnings
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from optgraph.errors import InputError
from optgraph.ir.graph import QUANT_BLOCKS, TensorType
from optgraph.reference.dequantize import dequantize
from optgraph.runtime.cpu.host_compiler import BuildError, build, cache_folder, find_compiler
from optgraph.runtime.cpu.quantized_source import quantized_source

__all__ = [
    "FLAGS",
    "compiled_library",
    "default_threads",
    "dequantize_blocks",
    "quantized_matmul",
    "quantized_rows",
    "set_threads",
]

COMPILERS = ("gcc", "cc", "clang")
# -ffp-contract=off: the decoders' products and sums stay separate roundings, as the reference's.
FLAGS = ("-O3", "-march=native", "-ffp-contract=off", "-fPIC", "-shared", "-pthread", "-w")
_INDEX = {name: i for i, name in enumerate(QUANT_BLOCKS)}
# The NumPy fallback's product dequantizes this many rows of W at a time.
FALLBACK_ROWS = 256

_P = ctypes.c_void_p
_I64 = ctypes.c_int64
_INT = ctypes.c_int


class _Loader:
    """The compiled kernels of this process: built (or found in the cache) and loaded once; None,
    after one warning, where no compiler is found or the build fails."""

    def __init__(self, compilers: Sequence[str], flags: Sequence[str] = FLAGS):
        self.compilers = tuple(compilers)
        self.flags = tuple(flags)
        self.lock = threading.Lock()
        self.tried = False
        self.library: ctypes.CDLL | None = None

    def load(self) -> ctypes.CDLL | None:
        with self.lock:
            if not self.tried:
                self.tried = True
                self.library = self._build()
            return self.library

    def _build(self) -> ctypes.CDLL | None:
        compiler = find_compiler(self.compilers)
        if compiler is None:
            tried = ", ".join(self.compilers)
            _fall_back(f"no C compiler found (tried {tried})")
            return None
        try:
            path = build((compiler, *self.flags), quantized_source(), _folder())
            library = ctypes.CDLL(str(path))
        except (BuildError, OSError) as err:
            _fall_back(f"the kernels did not build: {err}")
            return None
        for name, args in (
            ("og_matmul", [_INT, _P, _I64, _P, _I64, _I64, _P, _INT]),
            ("og_rows", [_INT, _P, _I64, _P, _I64, _P, _INT]),
            ("og_dequantize", [_INT, _P, _I64, _P, _INT]),
        ):
            function = getattr(library, name)
            function.argtypes = args
            function.restype = _INT
        return library


def _folder() -> Path:
    try:
        return cache_folder("kernels")
    except OSError:  # no writable home: a folder for this process
        folder = Path(tempfile.mkdtemp(prefix="optgraph-kernels-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        return folder


def _fall_back(why: str) -> None:
    warnings.warn(
        f"optgraph: {why}; quantized products, gathers and dequantize on the CPU fall back to "
        f"NumPy (one thread; a product dequantizes {FALLBACK_ROWS} rows of its weight at a time)",
        RuntimeWarning,
        stacklevel=4,
    )


_LOADER = _Loader(COMPILERS)
_THREADS: int | None = None


def compiled_library() -> ctypes.CDLL | None:
    """The loaded kernels (built on first call), or None where they could not be built."""
    return _LOADER.load()


def default_threads() -> int:
    """`set_threads`'s count, else the cores this process may run on."""
    if _THREADS is not None:
        return _THREADS
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # no affinity on this platform
        return os.cpu_count() or 1


def set_threads(count: int | None) -> None:
    """The threads the kernels use when a call names none (None: the cores available)."""
    global _THREADS
    if count is not None and count < 1:
        raise ValueError(f"threads must be at least 1, got {count}")
    _THREADS = count


def _threads(threads: int | None) -> int:
    if threads is not None and threads < 1:
        raise ValueError(f"threads must be at least 1, got {threads}")
    return default_threads() if threads is None else threads


def _row_bytes(dtype: str, k: int) -> int:
    """The stored bytes of a row of K `dtype` values (K a whole number of blocks)."""
    if dtype not in QUANT_BLOCKS:
        raise ValueError(f"unknown quantized dtype '{dtype}' (one of {', '.join(QUANT_BLOCKS)})")
    elems, size = QUANT_BLOCKS[dtype]
    if k % elems:
        raise ValueError(f"{dtype}: K ({k}) must be a multiple of the block ({elems} values)")
    return k // elems * size


def _blocks(blocks: np.ndarray, dtype: str, rows: int, k: int) -> np.ndarray:
    """`blocks` checked (uint8 of `rows` rows of K values) as a C-contiguous [rows, row bytes]."""
    row_bytes = _row_bytes(dtype, k)
    blocks = np.asarray(blocks)
    if blocks.dtype != np.uint8 or blocks.size != rows * row_bytes:
        expected = TensorType(dtype, (rows, k))
        raise ValueError(
            f"{expected} is stored as uint8[{rows * row_bytes}] (any shape), "
            f"got {blocks.dtype}{list(blocks.shape)}"
        )
    return np.ascontiguousarray(blocks).reshape(rows, row_bytes)


def _result(out: np.ndarray | None, shape: tuple[int, ...]) -> np.ndarray:
    if out is None:
        return np.empty(shape, np.float32)
    if out.dtype != np.float32 or out.shape != shape or not out.flags.c_contiguous:
        raise ValueError(
            f"out must be a C-contiguous float32{list(shape)}, got {out.dtype}"
            f"{list(out.shape)}{'' if out.flags.c_contiguous else ' (strided)'}"
        )
    return out


def _pointer(array: np.ndarray) -> int:
    return int(array.ctypes.data)


def quantized_matmul(
    x: np.ndarray,
    blocks: np.ndarray,
    dtype: str,
    n: int,
    k: int,
    *,
    threads: int | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """x [..., K] (f32, f16 or bf16) times Wᵀ, W [N, K] the values of `dtype` blocks `blocks`:
    float32 [..., N] (into `out` when given)."""
    x = np.asarray(x)
    if x.ndim < 1 or x.shape[-1] != k:
        raise ValueError(f"x must be [..., {k}], got {list(x.shape)}")
    w = _blocks(blocks, dtype, n, k)
    rows = np.ascontiguousarray(x.reshape(-1, k), dtype=np.float32)
    y = _result(out, (*x.shape[:-1], n))
    m = rows.shape[0]
    if m == 0 or n == 0:
        return y
    if k == 0:
        y[...] = 0.0
        return y
    library = compiled_library()
    if library is None:
        flat = y.reshape(m, n)
        for j in range(0, n, FALLBACK_ROWS):
            panel = dequantize(w[j : j + FALLBACK_ROWS], dtype, (min(FALLBACK_ROWS, n - j), k))
            flat[:, j : j + FALLBACK_ROWS] = rows @ panel.T
        return y
    status = library.og_matmul(
        _INDEX[dtype], _pointer(rows), m, _pointer(w), n, k, _pointer(y), _threads(threads)
    )
    if status:
        raise MemoryError(f"quantized_matmul: no memory for a {m}-row panel buffer")
    return y


def quantized_rows(
    table: np.ndarray,
    dtype: str,
    ids: np.ndarray,
    k: int,
    *,
    threads: int | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """The rows `ids` of the table whose rows hold K values of `dtype` blocks (`table`'s leading
    dimensions flattened into rows, as `get_rows`): float32 [*ids.shape, K]. An id outside the
    table is an `InputError`."""
    table = np.asarray(table)
    row_bytes = _row_bytes(dtype, k)
    count = table.size // row_bytes if row_bytes else 0
    data = _blocks(table, dtype, count, k)
    ids = np.asarray(ids)
    picked = np.ascontiguousarray(ids.reshape(-1), dtype=np.int64)
    if picked.size and (picked.min() < 0 or picked.max() >= count):
        bad = int(picked.min()) if picked.min() < 0 else int(picked.max())
        raise InputError(f"get_rows: id {bad} out of range for a table of {count} rows")
    y = _result(out, (*ids.shape, k))
    if picked.size == 0 or k == 0:
        return y
    library = compiled_library()
    if library is None:
        y.reshape(-1, k)[...] = dequantize(data[picked], dtype, (picked.size, k))
        return y
    library.og_rows(
        _INDEX[dtype], _pointer(data), k, _pointer(picked), picked.size, _pointer(y),
        _threads(threads),
    )  # fmt: skip
    return y


def dequantize_blocks(
    blocks: np.ndarray,
    dtype: str,
    shape: Sequence[int],
    *,
    threads: int | None = None,
    out: np.ndarray | None = None,
) -> np.ndarray:
    """Every value of a `dtype` weight of `shape` (what the `dequantize` op asks for): float32,
    equal bit for bit to `reference.dequantize.dequantize`."""
    shape = tuple(shape)
    if not shape:
        raise ValueError("a quantized value has at least one axis")
    k = shape[-1]
    rows = int(np.prod(shape[:-1], dtype=np.int64))
    data = _blocks(blocks, dtype, rows, k)
    y = _result(out, shape)
    if y.size == 0:
        return y
    library = compiled_library()
    if library is None:
        y[...] = dequantize(data.reshape(TensorType(dtype, shape).array_shape), dtype, shape)
        return y
    count = data.size // QUANT_BLOCKS[dtype][1]
    library.og_dequantize(_INDEX[dtype], _pointer(data), count, _pointer(y), _threads(threads))
    return y
