"""The integer form of the q4_k, q6_k and q8_0 one-row products (`codegen/kernels/
quantized_integer_dot.py`) in the CPU emulator: x's int16 codes and exact dp2a sums give the
reference's product of the dequantized weight within the rounding of x's codes (2^-16 of each
unit's largest |x|), far inside the f16 bound, for one to four rows, columns not a multiple of
the block's, K not a multiple of the warps' blocks, unaligned weights (q6_k: blocks 2 bytes past
a 4-byte boundary, rows of an odd number of blocks, a base only 2-byte aligned), extreme q6_k
scales and zero blocks; q8_0 (opt-in): K any multiple of 32 (not of 256: the last group of 8
blocks partial), 34-byte blocks in both 4-byte phases, bases 2 and 4 bytes past 16, the largest
f16 d with codes -128 and 127, d 0; other types and shapes keep the float form."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from optgraph.codegen.cuda_source import module_source
from optgraph.codegen.kernels import quantized, quantized_integer_dot
from optgraph.ir.graph import TensorType
from tests.codegen.test_quantized_kernels_emulated import NUMPY, random_blocks, reference
from tests.support import cuda_emulator

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")


@pytest.fixture(autouse=True)
def opt_in_integer_forms(monkeypatch: pytest.MonkeyPatch) -> None:
    """q6_k's and q8_0's integer forms are opt-in (`quantized.INTEGER_DOT_TYPES`): these tests
    switch them on."""
    monkeypatch.setattr(quantized, "INTEGER_DOT_TYPES", frozenset({"q4_k", "q6_k", "q8_0"}))


def test_q6_k_takes_the_float_form_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    assert quantized.INTEGER_DOT_TYPES == frozenset({"q4_k"})
    assert "__dp2a" not in _launch("q6_k", 8, 1024, 1, "f16").kernel.source
    assert "__dp2a" in _launch("q4_k", 8, 1024, 1, "f16").kernel.source


@pytest.mark.parametrize("k", [1024, 288])
def test_q8_0_takes_the_float_form_by_default(monkeypatch: pytest.MonkeyPatch, k: int) -> None:
    monkeypatch.undo()
    assert "q8_0" not in quantized.INTEGER_DOT_TYPES
    launch = _launch("q8_0", 8, k, 1, "f16")
    assert launch.kernel.name.startswith("og_one_row_q_"), launch.kernel.name
    assert "__dp2a" not in launch.kernel.source and "og_q8_0_quarter" not in launch.kernel.source


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


def _q8_0_blocks(n: int, k: int, seed: int, extreme: bool = False) -> np.ndarray:
    """Random q8_0 blocks, and among a third of them: blocks of zero bytes, codes -128 and 127
    at random, all -128, all 127, d 0 over random codes. `extreme`: every block's d the largest
    finite f16 (either sign), half of them with codes -128 and 127 at random (so no kind of
    block outweighs the others in the product and every code's place counts)."""
    raw = random_blocks("q8_0", n, k, seed=seed)
    blocks = raw.reshape(-1, 34)
    rng = np.random.default_rng(seed)
    sides = np.array([128, 127], np.uint8)  # -128, 127
    if extreme:
        big = np.float16(65504.0) * np.where(rng.random(len(blocks)) < 0.5, -1, 1)
        blocks[:, 0:2] = big.astype(np.float16).view(np.uint8).reshape(-1, 2)
        half = rng.random(len(blocks)) < 0.5
        blocks[half, 2:] = rng.choice(sides, (int(half.sum()), 32))
        return blocks.reshape(raw.shape)
    chosen = rng.permutation(len(blocks))[: max(1, len(blocks) // 3)]
    kinds = np.arange(len(chosen)) % 5
    blocks[chosen[kinds == 0]] = 0
    mixed = chosen[kinds == 1]
    blocks[mixed, 2:] = rng.choice(sides, (len(mixed), 32))
    blocks[chosen[kinds == 2], 2:] = sides[0]
    blocks[chosen[kinds == 3], 2:] = sides[1]
    blocks[chosen[kinds == 4], 0:2] = 0
    return blocks.reshape(raw.shape)


@pytest.mark.parametrize(
    ("n", "k", "rows", "xdtype", "shift", "extreme"),
    [
        (16, 2048, 1, "f16", 0, False),  # one block of columns, 8 groups of 8 blocks: one a warp
        (21, 288, 2, "f32", 0, False),  # 9 blocks (K not a multiple of 256): the last group one
        (21, 288, 2, "f32", 0, True),
        (9, 4096, 4, "bf16", 0, False),  # four rows, 16 groups (2 a warp)
        (5, 14336, 1, "f16", 0, False),  # 448 blocks, 56 groups
        (19, 1056, 3, "f32", 4, False),  # 33 blocks a row (odd): rows alternate their 4-byte phase
        (19, 1056, 3, "f32", 4, True),
        (7, 800, 1, "bf16", 2, False),  # the weight's base 2-byte aligned only: read by bytes
        (3, 32, 2, "f16", 4, True),  # one block a row: warps 1-7 and quarters 1-3 have none
        (17, 2080, 4, "f32", 2, True),  # 65 blocks a row, bytes, the last group one block
    ],
)
def test_q8_0_integer_form_matches_the_reference(
    n: int, k: int, rows: int, xdtype: str, shift: int, extreme: bool
) -> None:
    launch = _launch("q8_0", n, k, rows, xdtype)
    assert launch.kernel.name.startswith("og_one_row_qi_"), launch.kernel.name
    assert "og_q8_0_quarter" in launch.kernel.source and "og_xq16" in launch.kernel.source
    assert launch.grid == (-(-n // quantized_integer_dot.COLUMNS), rows, 1)
    raw = _q8_0_blocks(n, k, seed=n + k, extreme=extreme)
    x = _x(rows, k, xdtype, seed=k)
    got = _run(launch, x, raw, shift)
    want = x.astype(np.float64) @ reference("q8_0", raw).reshape(n, k).astype(np.float64).T
    assert np.all(np.isfinite(got))
    assert _nmse(got, want) <= 1e-8, _nmse(got, want)


def test_q8_0_extreme_blocks_alone() -> None:
    """Every block the largest f16 d with codes all 127 (the dp2a sums' largest, 32 · 32767 ·
    127 a block) or all -128, x's units at their largest code: no overflow, the product within
    float32 rounding of the terms' magnitudes (the blocks' signs alternate: it cancels)."""
    n, k = 4, 512
    blocks = np.zeros((n * k // 32, 34), np.uint8)
    blocks[:, 0:2] = np.frombuffer(np.float16(65504.0).tobytes(), np.uint8)
    blocks[0::2, 2:] = 127
    blocks[1::2, 2:] = np.int8(-128).view(np.uint8)
    raw = blocks.reshape(n, k // 32 * 34)
    x = np.ones((1, k), np.float32)
    x[0, 1::3] = -1.0
    got = _run(_launch("q8_0", n, k, 1, "f32"), x, raw)
    want = x.astype(np.float64) @ reference("q8_0", raw).reshape(n, k).astype(np.float64).T
    assert np.all(np.isfinite(got))
    w = reference("q8_0", raw).reshape(n, k).astype(np.float64)
    scale = np.abs(x.astype(np.float64)) @ np.abs(w).T  # 2.1e9 a column
    assert np.all(np.abs(got - want) <= 1e-6 * scale), (got, want)
    assert np.all(np.abs(want) > 1e-3 * scale)  # not all cancelled: the result is checked


@pytest.mark.parametrize("dtype", ["q4_k", "q6_k", "q8_0"])
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
    for dtype in ("q4_k", "q6_k", "q8_0"):
        assert "__dp2a" in _launch(dtype, 8, 1024, 1, "f16").kernel.source
    for dtype in ("q4_0", "q4_1", "q5_0", "q5_k", "mxfp4"):
        assert "__dp2a" not in _launch(dtype, 8, 1024, 1, "f16").kernel.source, dtype
    saved = quantized.INTEGER_DOT, quantized.INTEGER_DOT_TYPES
    try:
        quantized.INTEGER_DOT = False
        for dtype in ("q4_k", "q6_k", "q8_0"):
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


@pytest.mark.parametrize(("dtype", "k"), [("q4_k", 19200), ("q6_k", 18432), ("q8_0", 20224)])
def test_the_largest_fitting_k_counts_every_shared_array(dtype: str, k: int) -> None:
    """`fits` counts the warps' column sums too: the largest K that fits gives a kernel within
    48 KiB, the next (one block of 256 more) takes the float form (q4_k's 19456 and q6_k's 18688
    passed `fits` before at 49168 and 49584 bytes, which ptxas refuses)."""
    launch = _launch(dtype, 8, k, 1, "f16")
    assert "__dp2a" in launch.kernel.source
    assert launch.kernel.shared_bytes is not None
    assert launch.kernel.shared_bytes <= quantized_integer_dot.SHARED_LIMIT
    padded = -(-k // 256) * 256
    sums = quantized_integer_dot.SUM_VALUES.get(dtype, 0)
    assert quantized_integer_dot.shared_bytes(padded, sums) == launch.kernel.shared_bytes
    assert not quantized_integer_dot.fits(dtype, k + 256)
    assert "__dp2a" not in _launch(dtype, 8, k + 256, 1, "f16").kernel.source


def test_q8_0_shared_memory_decides_the_form() -> None:
    """q8_0 keeps no integer sums and covers K rounded up to 256: 20224 values a row fit (and
    20192, rounded to them), 20256 (rounded to 20480) do not and keep the float form."""
    assert quantized_integer_dot.fits("q8_0", 14336)
    assert quantized_integer_dot.fits("q8_0", 20224)
    assert not quantized_integer_dot.fits("q8_0", 20256)
    assert "__dp2a" not in _launch("q8_0", 8, 20256, 1, "f16").kernel.source
    for k in (20224, 20192):
        launch = _launch("q8_0", 8, k, 1, "f16")
        assert "og_q8_0_quarter" in launch.kernel.source
        assert launch.kernel.shared_bytes is not None
        assert launch.kernel.shared_bytes <= quantized_integer_dot.SHARED_LIMIT


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")
def test_integer_forms_compile_with_nvcc_within_the_bounds(tmp_path: Path) -> None:
    """The integer kernels (q8_0 with K whole groups of 256 and not, the largest K that fits;
    every x dtype) through nvcc for sm_90: built, within `__launch_bounds__(256, 2)`'s 128
    registers, nothing spilled."""
    kernels = []
    for dtype, k in (("q4_k", 4096), ("q6_k", 14336), ("q8_0", 4096), ("q8_0", 1056)):
        for xdtype in ("f32", "f16", "bf16"):
            kernels.append(_launch(dtype, 64, k, 1, xdtype).kernel)
    kernels.append(_launch("q8_0", 8, 20224, 2, "f16").kernel)
    assert all("__dp2a" in kernel.source for kernel in kernels)
    source = tmp_path / "qi.cu"
    source.write_text(module_source(kernels))
    done = subprocess.run(
        ["nvcc", "-cubin", "-arch=sm_90", "-std=c++17", "-Xptxas", "-v", "-o",
         str(tmp_path / "qi.cubin"), str(source)],
        check=False, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    registers = [int(r) for r in re.findall(r"Used (\d+) registers", done.stderr)]
    assert len(registers) == len({kernel.name for kernel in kernels}), done.stderr[-4000:]
    assert max(registers) <= 128, registers
    assert "bytes spill" not in done.stderr.replace("0 bytes spill", ""), done.stderr[-4000:]
