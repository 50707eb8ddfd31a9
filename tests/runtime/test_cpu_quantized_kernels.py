"""The compiled CPU kernels for quantized weights (`runtime/cpu/quantized.py`) against the
reference's dequantization, for every block type.

Products: |y − y_ref| ≤ 2·γ_K·(|x|·|W|ᵀ), γ_K = K·u/(1 − K·u), u = 2⁻²⁴ (both sums are within
γ_K of the exact one); against the exact product (float64 over the same f32 values) within
γ_K. Gathers and dequantize: equal bit for bit, also on raw random bytes (inf, NaN and subnormal
scales). Results are the same bits whatever the thread count. Without a compiler: the NumPy
fallback, one warning.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import warnings
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from optgraph.errors import InputError
from optgraph.ir.graph import QUANT_BLOCKS, TensorType
from optgraph.reference.dequantize import dequantize, random_blocks
from optgraph.runtime.cpu import host_compiler, quantized
from optgraph.runtime.cpu.quantized import (
    dequantize_blocks,
    quantized_matmul,
    quantized_rows,
)

TYPES = tuple(QUANT_BLOCKS)
U = 2.0**-24


def _weight(dtype: str, n: int, k: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(blocks, their f32 values) of a random [n, k] weight."""
    rng = np.random.default_rng(seed)
    blocks = random_blocks(rng, TensorType(dtype, (n, k)), 1.0 / np.sqrt(k))
    return blocks, dequantize(blocks, dtype, (n, k))


def _gamma(k: int) -> float:
    return k * U / (1 - k * U)


def _assert_within_bound(y: np.ndarray, x: np.ndarray, w: np.ndarray) -> None:
    x64, w64 = x.astype(np.float64).reshape(-1, w.shape[1]), w.astype(np.float64)
    magnitude = (np.abs(x64) @ np.abs(w64).T).reshape(y.shape)
    exact = (x64 @ w64.T).reshape(y.shape)
    reference = (x.astype(np.float32) @ w.T).astype(np.float64)
    k = w.shape[1]
    assert np.all(np.abs(y - exact) <= _gamma(k) * magnitude)
    assert np.all(np.abs(y - reference) <= 2 * _gamma(k) * magnitude)


def _same_bits(a: np.ndarray, b: np.ndarray) -> bool:
    """Equal bit for bit, NaN payloads aside (x86 quiets a NaN scale's payload alike, but
    NumPy's SIMD loops and C may pick either operand's NaN)."""
    nan = np.isnan(a)
    if not np.array_equal(nan, np.isnan(b)):
        return False
    return np.array_equal(a.view(np.uint32)[~nan], b.view(np.uint32)[~nan])


# K a whole number of blocks (several 2048-value panel chunks for the longest); N not a multiple
# of the 4 columns a panel decodes, nor of 2 or 3 threads.
SHAPES = {32: [(37, 96), (13, 2560)], 256: [(37, 256), (13, 2560)]}


@pytest.mark.parametrize("dtype", TYPES)
def test_products_are_within_f32_rounding_of_the_reference(dtype: str) -> None:
    elems = QUANT_BLOCKS[dtype][0]
    for s, (n, k) in enumerate(SHAPES[elems]):
        blocks, w = _weight(dtype, n, k, seed=s)
        for m, xdtype in ((1, np.float32), (3, np.float16), (64, ml_dtypes.bfloat16)):
            x = np.random.default_rng(m).standard_normal((m, k)).astype(xdtype)
            y = quantized_matmul(x, blocks, dtype, n, k, threads=1)
            assert y.shape == (m, n) and y.dtype == np.float32
            _assert_within_bound(y, x, w)
            for threads in (2, 3):
                again = quantized_matmul(x, blocks, dtype, n, k, threads=threads)
                assert np.array_equal(again, y), (dtype, n, k, m, threads)


def test_batched_rows_and_out() -> None:
    blocks, w = _weight("q4_k", 5, 512, seed=4)
    x = np.random.default_rng(0).standard_normal((2, 3, 512)).astype(np.float32)
    out = np.full((2, 3, 5), np.nan, np.float32)
    y = quantized_matmul(x, blocks, "q4_k", 5, 512, out=out)
    assert y is out
    _assert_within_bound(y, x, w)
    with pytest.raises(ValueError, match="C-contiguous float32"):
        quantized_matmul(x, blocks, "q4_k", 5, 512, out=np.empty((2, 3, 5), np.float16))
    with pytest.raises(ValueError, match=r"K \(500\) must be a multiple"):
        quantized_matmul(x[..., :500], blocks, "q4_k", 5, 500)
    with pytest.raises(ValueError, match="stored as uint8"):
        quantized_matmul(x, blocks[:4], "q4_k", 5, 512)


@pytest.mark.parametrize("dtype", TYPES)
def test_gathers_and_dequantize_are_the_references_bits_on_raw_bytes(dtype: str) -> None:
    """Every byte random: inf, NaN, subnormal and zero scales, every code and sub-block scale."""
    rows, k = 11, 2 * QUANT_BLOCKS[dtype][0]
    t = TensorType(dtype, (rows, k))
    raw = np.random.default_rng(7).integers(0, 256, t.array_shape, dtype=np.uint8)
    with np.errstate(all="ignore"):
        want = dequantize(raw, dtype, (rows, k))
    got = dequantize_blocks(raw, dtype, (rows, k), threads=2)
    assert _same_bits(got, want)
    ids = np.array([[3, 3, 0], [10, 5, 1]], np.int64)
    picked = quantized_rows(raw, dtype, ids, k, threads=2)
    assert picked.shape == (2, 3, k)
    assert _same_bits(picked, want[ids])


def test_gather_from_a_table_with_leading_dimensions_and_bad_ids() -> None:
    blocks, w = _weight("q8_0", 6, 64, seed=1)
    table = blocks.reshape(2, 3, -1)  # rows flattened, as get_rows reads a [2,3,64] table
    ids = np.array([5, 0], np.int32)
    assert np.array_equal(quantized_rows(table, "q8_0", ids, 64), w[[5, 0]])
    with pytest.raises(InputError, match="id 6 out of range for a table of 6 rows"):
        quantized_rows(table, "q8_0", np.array([6]), 64)
    with pytest.raises(InputError, match="id -1 out of range"):
        quantized_rows(table, "q8_0", np.array([-1]), 64)


def test_dequantize_of_a_three_dimensional_weight() -> None:
    t = TensorType("q5_k", (2, 3, 512))
    blocks = random_blocks(np.random.default_rng(2), t, 0.1)
    got = dequantize_blocks(blocks, "q5_k", t.shape)
    assert got.shape == t.shape
    assert _same_bits(got, dequantize(blocks, "q5_k", t.shape))


_COUNT_THREADS = """
import os, numpy as np
from optgraph.reference.dequantize import random_blocks
from optgraph.ir.graph import TensorType
from optgraph.runtime.cpu.quantized import quantized_matmul
blocks = random_blocks(np.random.default_rng(0), TensorType("q4_0", (256, 4096)), 0.02)
x = np.ones((8, 4096), np.float32)
quantized_matmul(x, blocks, "q4_0", 256, 4096, threads=1)
before = len(os.listdir("/proc/self/task"))
quantized_matmul(x, blocks, "q4_0", 256, 4096, threads=3)
print(before, len(os.listdir("/proc/self/task")))
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="counts /proc/self/task")
def test_the_pool_runs_parts_on_other_threads() -> None:
    """In a fresh process (this one's pool may have started already): one thread computes
    alone, three parts start two workers beside the caller."""
    done = subprocess.run(
        [sys.executable, "-c", _COUNT_THREADS], capture_output=True, text=True, check=True
    )
    before, after = map(int, done.stdout.split())
    assert after == before + 2


@pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="x86 flags")
def test_the_portable_paths_without_avx512_and_f16c(monkeypatch: pytest.MonkeyPatch) -> None:
    """Built for a host without AVX-512 and F16C: 8-lane sums and 2 x 4 tiles, the halves'
    bits converted by hand; the same checks."""
    flags = (*quantized.FLAGS, "-mno-avx512f", "-mno-f16c")
    monkeypatch.setattr(quantized, "_LOADER", quantized._Loader(quantized.COMPILERS, flags))
    if quantized.compiled_library() is None:
        pytest.skip("no C compiler")
    for dtype in TYPES:
        rows, k = 7, 2 * QUANT_BLOCKS[dtype][0]
        t = TensorType(dtype, (rows, k))
        raw = np.random.default_rng(8).integers(0, 256, t.array_shape, dtype=np.uint8)
        with np.errstate(all="ignore"):
            want = dequantize(raw, dtype, (rows, k))
        assert _same_bits(dequantize_blocks(raw, dtype, (rows, k)), want), dtype
        blocks, w = _weight(dtype, 13, 512, seed=9)
        for m in (1, 3):
            x = np.random.default_rng(m).standard_normal((m, 512)).astype(np.float32)
            y = quantized_matmul(x, blocks, dtype, 13, 512, threads=2)
            _assert_within_bound(y, x, w)


def test_threads_default_and_setting() -> None:
    assert quantized.default_threads() == len(os.sched_getaffinity(0))
    quantized.set_threads(1)
    try:
        assert quantized.default_threads() == 1
    finally:
        quantized.set_threads(None)
    with pytest.raises(ValueError, match="at least 1"):
        quantized.set_threads(0)


def test_without_a_compiler_numpy_computes_the_same_with_one_warning(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(quantized, "_LOADER", quantized._Loader(("optgraph-no-such-cc",)))
    blocks, w = _weight("q6_k", 300, 512, seed=5)  # more rows than one fallback panel
    x = np.random.default_rng(0).standard_normal((3, 512)).astype(np.float32)
    with pytest.warns(RuntimeWarning, match="no C compiler found .*fall back to NumPy"):
        y = quantized_matmul(x, blocks, "q6_k", 300, 512)
    _assert_within_bound(y, x, w)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # one warning a process, not one a call
        rows = quantized_rows(blocks, "q6_k", np.array([299, 0]), 512)
        values = dequantize_blocks(blocks, "q6_k", (300, 512))
    assert _same_bits(rows, w[[299, 0]]) and _same_bits(values, w)


def test_a_build_is_kept_and_reused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compiler = host_compiler.find_compiler(quantized.COMPILERS)
    if compiler is None:
        pytest.skip("no C compiler")
    command = (compiler, "-O1", "-fPIC", "-shared")
    source = "int og_answer(void) { return 42; }\n"
    first = host_compiler.build(command, source, tmp_path)
    assert first.exists() and first.suffix == ".so"
    calls: list[object] = []
    monkeypatch.setattr(host_compiler, "_run", lambda argv: calls.append(argv))
    assert host_compiler.build(command, source, tmp_path) == first
    assert calls == []  # found by its digest: nothing run
    monkeypatch.undo()
    with pytest.raises(host_compiler.BuildError, match="failed"):
        host_compiler.build(command, "int broken(void) { return }\n", tmp_path)
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []
