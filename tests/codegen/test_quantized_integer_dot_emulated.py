"""The integer form of the q4_k and q6_k one-row products (`codegen/kernels/
quantized_integer_dot.py`) in the CPU emulator: x's int16 codes and exact dp2a sums give the
reference's product of the dequantized weight within the rounding of x's codes (2^-16 of each
unit's largest |x|), far inside the f16 bound, for one to four rows, columns not a multiple of
the block's, K not a multiple of the warps' blocks, unaligned weights (q6_k: blocks 2 bytes past
a 4-byte boundary, rows of an odd number of blocks, a base only 2-byte aligned), extreme q6_k
scales and zero blocks; other types and shapes keep the float form."""

from __future__ import annotations

import numpy as np
import pytest

from optgraph.codegen.kernels import quantized, quantized_integer_dot
from optgraph.ir.graph import TensorType
from tests.codegen.test_quantized_kernels_emulated import NUMPY, random_blocks, reference
from tests.support import cuda_emulator

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")


@pytest.fixture(autouse=True)
def q6_k_integer_form(monkeypatch: pytest.MonkeyPatch) -> None:
    """q6_k's integer form is opt-in (`quantized.INTEGER_DOT_TYPES`): these tests switch it on."""
    monkeypatch.setattr(quantized, "INTEGER_DOT_TYPES", frozenset({"q4_k", "q6_k"}))


def test_q6_k_takes_the_float_form_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    assert quantized.INTEGER_DOT_TYPES == frozenset({"q4_k"})
    assert "__dp2a" not in _launch("q6_k", 8, 1024, 1, "f16").kernel.source
    assert "__dp2a" in _launch("q4_k", 8, 1024, 1, "f16").kernel.source


def _launch(dtype: str, n: int, k: int, rows: int, xdtype: str) -> quantized.Launch:
    return quantized.one_row_launch(
        TensorType(xdtype, (rows, k)), TensorType(dtype, (n, k)), TensorType("f32", (rows, n))
    )


def _x(rows: int, k: int, xdtype: str, seed: int) -> np.ndarray:
    """Normal values whose units of 32 have scales from 0.01 to 30 (each unit its own dx)."""
    rng = np.random.default_rng(seed)
    scales = rng.uniform(0.01, 30.0, (rows, k // 32, 1))
    x = (rng.standard_normal((rows, k // 32, 32)) * scales).reshape(rows, k)
    return x.astype(NUMPY[xdtype])


def _nmse(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.sum((got - want) ** 2) / np.sum(want**2))


def _run(launch: quantized.Launch, x: np.ndarray, raw: np.ndarray, shift: int = 0) -> np.ndarray:
    rows, n = x.shape[0], raw.shape[0]
    weight, setup = raw, []
    if shift:  # the weight `shift` bytes past a 16-byte boundary
        weight = np.zeros(raw.nbytes + 16, np.uint8)
        weight[shift : shift + raw.nbytes] = raw.reshape(-1)
        setup = [f"b2 += {shift};"]
    buffers = [np.zeros((rows, n), np.float32), x, weight]
    got = cuda_emulator.run_kernel(launch.kernel, launch.grid, launch.block, buffers, setup=setup)
    return got[0].astype(np.float64)


@pytest.mark.parametrize(
    ("n", "k", "rows", "xdtype", "shift"),
    [
        (16, 2048, 1, "f16", 0),  # a block of columns, 8 blocks of K: one a warp
        (21, 2560, 1, "f32", 0),  # columns past the last block's; 10 blocks of K (2 warps twice)
        (9, 1024, 3, "bf16", 0),  # three rows; 4 blocks of K (warps 4-7 have none)
        (5, 4096, 4, "f16", 0),
        (7, 1536, 1, "f32", 4),  # an unaligned weight: read by bytes
    ],
)
def test_integer_form_matches_the_reference(
    n: int, k: int, rows: int, xdtype: str, shift: int
) -> None:
    launch = _launch("q4_k", n, k, rows, xdtype)
    assert "__dp2a_hi" in launch.kernel.source and "og_xq16" in launch.kernel.source
    assert launch.grid == (-(-n // quantized_integer_dot.COLUMNS), rows, 1)
    raw = random_blocks("q4_k", n, k, seed=n + k)
    x = _x(rows, k, xdtype, seed=k)
    got = _run(launch, x, raw, shift)
    want = x.astype(np.float64) @ reference("q4_k", raw).reshape(n, k).astype(np.float64).T
    # x's int16 codes: a few 1e-10 (the f32 bound of the GPU tests is 1e-7, f16's 1e-6)
    assert _nmse(got, want) <= 1e-8, _nmse(got, want)


def _q6_k_blocks(n: int, k: int, seed: int) -> np.ndarray:
    """Random q6_k blocks, and among them: blocks of zero bytes, blocks whose scales are all
    -128 or all 127 with the largest finite d, codes all 0 (q - 32 = -32) or all 63 (31), d 0
    over random codes."""
    raw = random_blocks("q6_k", n, k, seed=seed)
    blocks = raw.reshape(-1, 210)
    rng = np.random.default_rng(seed)
    at = rng.permutation(len(blocks))
    big = np.frombuffer(np.float16(65504.0).tobytes(), np.uint8)
    for i, b in enumerate(at[: max(1, len(blocks) // 3)]):
        kind = i % 5
        if kind == 0:
            blocks[b] = 0
        elif kind in (1, 2):
            blocks[b, 192:208] = np.int8(-128 if kind == 1 else 127).view(np.uint8)
            blocks[b, 208:210] = big
        elif kind == 3:
            blocks[b, 0:192] = 0 if i % 2 else 255
        else:
            blocks[b, 208:210] = 0
    return blocks.reshape(raw.shape)


@pytest.mark.parametrize(
    ("n", "k", "rows", "xdtype", "shift"),
    [
        (16, 2048, 1, "f16", 0),  # one block of columns; blocks 0, 2, .. 14 bytes past 16
        (21, 256, 2, "f32", 0),  # K = 256: rows of one 210-byte block, every other row 2 past 4
        (9, 4096, 4, "bf16", 0),  # four rows, 16 blocks of K
        (5, 14336, 1, "f16", 0),  # the down product's K (56 blocks, 7 a warp)
        (19, 1280, 3, "f32", 4),  # 5 blocks a row (odd): rows alternate their 4-byte phase
        (7, 768, 1, "bf16", 2),  # the weight's base 2-byte aligned only: read by bytes
    ],
)
def test_q6_k_integer_form_matches_the_reference(
    n: int, k: int, rows: int, xdtype: str, shift: int
) -> None:
    launch = _launch("q6_k", n, k, rows, xdtype)
    assert launch.kernel.name.startswith("og_one_row_qi_"), launch.kernel.name
    assert "og_q6k_quarter" in launch.kernel.source and "og_xq16" in launch.kernel.source
    assert launch.grid == (-(-n // quantized_integer_dot.COLUMNS), rows, 1)
    raw = _q6_k_blocks(n, k, seed=n + k)
    x = _x(rows, k, xdtype, seed=k)
    got = _run(launch, x, raw, shift)
    want = x.astype(np.float64) @ reference("q6_k", raw).reshape(n, k).astype(np.float64).T
    assert np.all(np.isfinite(got))
    assert _nmse(got, want) <= 1e-8, _nmse(got, want)


@pytest.mark.parametrize("dtype", ["q4_k", "q6_k"])
def test_zero_units_give_no_nan_and_a_zero_row_gives_zeros(dtype: str) -> None:
    """A unit whose largest |x| is 0 has scale 0 and codes 0: no division by zero."""
    n, k = 3, 1024
    launch = _launch(dtype, n, k, 2, "f32")
    raw = random_blocks(dtype, n, k, seed=4)
    x = np.random.default_rng(1).standard_normal((2, k)).astype(np.float32)
    x[0] = 0.0
    x[1, 32:64] = 0.0
    got = _run(launch, x, raw)
    assert np.all(got[0] == 0.0) and np.all(np.isfinite(got[1]))
    want = x[1].astype(np.float64) @ reference(dtype, raw).reshape(n, k).astype(np.float64).T
    assert _nmse(got[1], want) <= 1e-8


def test_the_float_form_switches_and_the_types_they_keep() -> None:
    for dtype in ("q4_k", "q6_k"):
        assert "__dp2a" in _launch(dtype, 8, 1024, 1, "f16").kernel.source
    for dtype in ("q4_0", "q4_1", "q5_0", "q5_k", "q8_0", "mxfp4"):
        assert "__dp2a" not in _launch(dtype, 8, 1024, 1, "f16").kernel.source, dtype
    saved = quantized.INTEGER_DOT, quantized.INTEGER_DOT_TYPES
    try:
        quantized.INTEGER_DOT = False
        for dtype in ("q4_k", "q6_k"):
            assert "__dp2a" not in _launch(dtype, 8, 1024, 1, "f16").kernel.source
        quantized.INTEGER_DOT, quantized.INTEGER_DOT_TYPES = True, frozenset({"q4_k"})
        assert "__dp2a" in _launch("q4_k", 8, 1024, 1, "f16").kernel.source
        launch = _launch("q6_k", 8, 1024, 1, "f16")
        assert "__dp2a" not in launch.kernel.source
        assert launch.kernel.name.startswith("og_one_row_q_")
    finally:
        quantized.INTEGER_DOT, quantized.INTEGER_DOT_TYPES = saved


@pytest.mark.parametrize("dtype", ["q4_k", "q6_k"])
def test_shared_memory_decides_the_form(dtype: str) -> None:
    """x's padded codes, scales and sums (q6_k: a sum a 16 values) in 48 KiB: 14336 values a row
    fit (the down product of a Llama layer), 20480 do not and keep the float form."""
    assert quantized_integer_dot.fits(dtype, 14336)
    assert not quantized_integer_dot.fits(dtype, 20480)
    assert "__dp2a" not in _launch(dtype, 8, 20480, 1, "f16").kernel.source
    launch = _launch(dtype, 8, 14336, 1, "f16")
    assert launch.kernel.shared_bytes is not None
    assert launch.kernel.shared_bytes <= quantized_integer_dot.SHARED_LIMIT
