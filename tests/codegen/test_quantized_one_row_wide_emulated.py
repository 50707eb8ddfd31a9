"""The wide layout of the quantized one-row product (`codegen/kernels/quantized_one_row.py`) in
the CPU emulator: with one part a column it sums what the layout before it sums, in the same
order, so the two give the same bits (the word decoders, the pipelined stage and the 16-byte
loads of x change no value); with parts of K, and with x or the weight not 16-byte aligned (x
read a value at a time, the weight in place), it stays within the reference's bounds. (q4_k in its float form: `quantized.INTEGER_DOT` off.)"""

from __future__ import annotations

import numpy as np
import pytest

from optgraph.codegen.kernels import quantized, quantized_one_row
from optgraph.ir.graph import TensorType
from tests.codegen.test_quantized_kernels_emulated import NUMPY, random_blocks, reference
from tests.support import cuda_emulator

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")


def _launch(wide: bool, dtype: str, n: int, k: int, rows: int, xdtype: str) -> quantized.Launch:
    x, w = TensorType(xdtype, (rows, k)), TensorType(dtype, (n, k))
    saved = quantized.WIDE_ONE_ROW, quantized.INTEGER_DOT
    quantized.WIDE_ONE_ROW, quantized.INTEGER_DOT = wide, False
    try:
        return quantized.one_row_launch(x, w, TensorType(xdtype, (rows, n)))
    finally:
        quantized.WIDE_ONE_ROW, quantized.INTEGER_DOT = saved


def _operands(dtype: str, n: int, k: int, rows: int, xdtype: str):
    raw = random_blocks(dtype, n, k, seed=k + n)
    x = np.random.default_rng(k).standard_normal((rows, k)).astype(NUMPY[xdtype])
    return x, raw


def _run(launch: quantized.Launch, x: np.ndarray, raw: np.ndarray, shift: tuple[int, int] = (0, 0)):
    """The launch on x and the weight bytes, each `shift` bytes past a 16-byte boundary."""
    rows, n = x.shape[0], raw.shape[0]
    buffers, setup = [np.zeros((rows, n), x.dtype)], []
    for i, (array, by) in enumerate(((x, shift[0]), (raw, shift[1])), start=1):
        if by:
            padded = np.zeros(array.nbytes + 16, np.uint8)
            padded[by : by + array.nbytes] = array.reshape(-1).view(np.uint8)
            array = padded
            setup.append(f"b{i} += {by};")
        buffers.append(array)
    got = cuda_emulator.run_kernel(launch.kernel, launch.grid, launch.block, buffers, setup=setup)
    return got[0]


@pytest.mark.parametrize(
    ("dtype", "k", "rows", "xdtype"),
    [
        ("q4_k", 2560, 1, "f16"),  # 80 units: two whole tiles and a half one
        ("q4_k", 1280, 2, "f32"),
        ("q6_k", 6144, 1, "bf16"),  # 192 units: three tiles of 64 (8 blocks, 1680 bytes)
        ("q6_k", 4096, 3, "f16"),
        ("q6_k", 2816, 1, "f16"),  # 11 blocks: not whole 16-byte units a row (in place)
        ("q8_0", 2144, 1, "f16"),  # 67 units: not whole 16-byte units a row (in place)
        ("q8_0", 2304, 2, "bf16"),  # 72 blocks: whole 16-byte units, tiles of 32 and a part
        ("q5_0", 1280, 1, "f16"),  # a byte decoder on the stage
    ],
)
def test_one_part_a_column_gives_the_bits_of_the_layout_before(
    monkeypatch: pytest.MonkeyPatch, dtype: str, k: int, rows: int, xdtype: str
) -> None:
    monkeypatch.setattr(quantized_one_row, "TARGET_WARPS", 0)  # a warp a column
    n = 11
    x, raw = _operands(dtype, n, k, rows, xdtype)
    wide = _launch(True, dtype, n, k, rows, xdtype)
    assert "og_part" not in wide.kernel.source and wide.grid == (2, rows, 1)
    staged = raw.shape[1] % 16 == 0
    assert ("og_stage" in wide.kernel.source) == staged
    if dtype in quantized_one_row.WORD_DECODERS:
        assert (f"og_dq32w_{dtype}(" in wide.kernel.source) == staged
    got = _run(wide, x, raw)
    before = _run(_launch(False, dtype, n, k, rows, xdtype), x, raw)
    np.testing.assert_array_equal(got.view(np.uint8), before.view(np.uint8))


@pytest.mark.parametrize(
    ("dtype", "k", "xdtype", "shift"),
    [
        ("q4_k", 4096, "f16", (0, 0)),  # 4 parts of one tile each
        ("q6_k", 4096, "f32", (0, 0)),  # 2 parts
        ("q8_0", 4096, "bf16", (0, 0)),
        ("q4_k", 2560, "f16", (2, 0)),  # x not 16-byte aligned: a load a value
        ("q6_k", 4096, "f16", (0, 4)),  # the weight not aligned: read in place
        ("q8_0", 2304, "f32", (4, 2)),
    ],
)
def test_parts_of_k_and_unaligned_operands_match_the_reference(
    dtype: str, k: int, xdtype: str, shift: tuple[int, int]
) -> None:
    n, rows = 13, 1
    x, raw = _operands(dtype, n, k, rows, xdtype)
    launch = _launch(True, dtype, n, k, rows, xdtype)
    assert "og_part" in launch.kernel.source  # 13 columns: parts of K
    got = _run(launch, x, raw, shift).astype(np.float64)
    want = x.astype(np.float64) @ reference(dtype, raw).reshape(n, k).astype(np.float64).T
    nmse = float(np.sum((got - want) ** 2) / np.sum(want**2))
    assert nmse <= {"f32": 1e-10, "f16": 1e-6, "bf16": 1e-4}[xdtype], nmse


def test_parts_fill_the_grid_for_the_llama_shapes() -> None:
    """Parts of K until the grid holds TARGET_WARPS warps, each part at least one tile."""

    def split(dtype: str, n: int, k: int) -> int:
        launch = _launch(True, dtype, n, k, 1, "f16")
        return 8 // (-(-n // launch.grid[0]))

    assert split("q4_k", 1024, 4096) == 2  # wk, wv: 2 tiles (1152 bytes) a row, one each
    assert split("q4_k", 4096, 4096) == 2  # wq, wo
    assert split("q4_k", 4096, 14336) == 2  # w_down
    assert split("q6_k", 1024, 4096) == 2  # tiles of 64 units: 2 a row
    assert split("q4_k", 14336, 4096) == 1  # w_gate, w_up
    assert split("q6_k", 32000, 4096) == 1  # the logits head
    assert split("q8_0", 1024, 4096) == 4
