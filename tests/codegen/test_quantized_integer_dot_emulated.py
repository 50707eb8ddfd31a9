"""The integer form of the quantized one-row product (`codegen/kernels/quantized_integer_dot.py`)
in the CPU emulator: x's int16 codes and exact dp2a sums give the reference's product of the
dequantized weight within the rounding of x's codes (2^-16 of each unit's largest |x|), far
inside the f16 bound, for every type it takes, one to four rows, parts of K or not, and the
shapes of a Llama layer; types and shapes it does not take keep the float form."""

from __future__ import annotations

import numpy as np
import pytest

from optgraph.codegen.kernels import quantized, quantized_integer_dot, quantized_one_row
from optgraph.ir.graph import QUANT_BLOCKS, TensorType
from tests.codegen.test_quantized_kernels_emulated import NUMPY, random_blocks, reference
from tests.support import cuda_emulator

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")


def _product(dtype: str, n: int, k: int, rows: int, xdtype: str, seed: int = 0):
    launch = quantized.one_row_launch(
        TensorType(xdtype, (rows, k)), TensorType(dtype, (n, k)), TensorType("f32", (rows, n))
    )
    raw = random_blocks(dtype, n, k, seed=seed + n + k)
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((rows, k)) * rng.uniform(0.01, 30.0, (rows, k // 32, 1)).repeat(
        32, 2
    ).reshape(rows, k)
    x = x.astype(NUMPY[xdtype])
    buffers = [np.zeros((rows, n), np.float32), x, raw]
    got = cuda_emulator.run_kernel(launch.kernel, launch.grid, launch.block, buffers)[0]
    want = x.astype(np.float64) @ reference(dtype, raw).reshape(n, k).astype(np.float64).T
    return launch, got.astype(np.float64), want


@pytest.mark.parametrize(
    ("dtype", "n", "k", "rows", "xdtype"),
    [
        ("q4_k", 9, 2048, 1, "f16"),
        ("q4_k", 5, 1024, 3, "f32"),
        ("q6_k", 7, 4096, 1, "bf16"),
        ("q6_k", 3, 2048, 2, "f32"),
        ("q8_0", 11, 1536, 1, "f16"),
        ("q8_0", 4, 2304, 4, "f32"),
    ],
)
def test_integer_form_matches_the_reference(
    dtype: str, n: int, k: int, rows: int, xdtype: str
) -> None:
    launch, got, want = _product(dtype, n, k, rows, xdtype)
    assert "__dp2a_hi" in launch.kernel.source and "og_xq16" in launch.kernel.source
    nmse = float(np.sum((got - want) ** 2) / np.sum(want**2))
    # the int16 codes of x: a few 1e-10; the f32 output of f16 x is held to the f32-path bound
    assert nmse <= 1e-8, nmse


def test_a_row_of_zeros_and_a_unit_of_zeros_give_exact_zeros() -> None:
    """A unit whose largest |x| is 0 has scale 0 and codes 0: no division by zero."""
    dtype, n, k = "q4_k", 3, 1024
    launch = quantized.one_row_launch(
        TensorType("f32", (2, k)), TensorType(dtype, (n, k)), TensorType("f32", (2, n))
    )
    raw = random_blocks(dtype, n, k, seed=4)
    x = np.random.default_rng(1).standard_normal((2, k)).astype(np.float32)
    x[0] = 0.0
    x[1, 32:64] = 0.0
    got = cuda_emulator.run_kernel(
        launch.kernel, launch.grid, launch.block, [np.zeros((2, n), np.float32), x, raw]
    )[0]
    assert np.all(got[0] == 0.0)
    want = x[1].astype(np.float64) @ reference(dtype, raw).reshape(n, k).astype(np.float64).T
    assert np.all(np.isfinite(got[1]))
    assert float(np.sum((got[1] - want) ** 2) / np.sum(want**2)) <= 1e-8


@pytest.mark.parametrize("dtype", ["q4_0", "q4_1", "q5_0", "q5_k", "mxfp4"])
def test_other_types_keep_the_float_form(dtype: str) -> None:
    k = 1024
    launch = quantized.one_row_launch(
        TensorType("f16", (1, k)), TensorType(dtype, (8, k)), TensorType("f16", (1, 8))
    )
    assert "__dp2a" not in launch.kernel.source


def test_shared_memory_decides_the_form() -> None:
    """x's codes, scales and sums sit beside the stage in 48 KiB: 14336 values a row fit (the
    down product of a Llama layer), 20480 do not and keep the float form."""

    def integer(k: int) -> bool:
        launch = quantized.one_row_launch(
            TensorType("f16", (1, k)), TensorType("q4_k", (64, k)), TensorType("f16", (1, 64))
        )
        return "__dp2a_lo" in launch.kernel.source

    assert integer(14336) and not integer(20480)
    elements, nbytes = QUANT_BLOCKS["q4_k"]
    assert quantized_integer_dot.fits("q4_k", 14336, 14336 // elements * nbytes, 8 * 1168)


def test_parts_of_k_are_kept_in_integer_form(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(quantized_one_row, "TARGET_WARPS", 1 << 20)  # as many parts as fit
    launch, got, want = _product("q4_k", 2, 4096, 1, "f16", seed=3)
    assert "og_part" in launch.kernel.source
    assert float(np.sum((got - want) ** 2) / np.sum(want**2)) <= 1e-8
