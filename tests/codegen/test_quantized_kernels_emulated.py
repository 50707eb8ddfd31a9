"""The quantized-weight kernels (`codegen/kernels/quantized.py`) in the CPU emulator against
`gguf.quants.dequantize`: random valid blocks of every type, dequantization bit for bit (f32,
and f16/bf16 rounded once), get_rows with ids outside the table, and the one-row product over
K that is one unit, not whole tiles, and not whole 16-byte units (the unstaged path)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from optgraph.codegen.cuda_source import module_source
from optgraph.codegen.kernels import quantized, quantized_integer_dot
from optgraph.ir.graph import TensorType
from tests.support import cuda_emulator

gguf_quants = pytest.importorskip("gguf.quants")
gguf_constants = pytest.importorskip("gguf.constants")
pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")

TYPES = sorted(quantized.DECODERS)
# The f16 fields of each block (byte offsets): scales and minima.
HALVES = {
    "q8_0": (0,), "q4_0": (0,), "q4_1": (0, 2), "q5_0": (0,),
    "q4_k": (0, 2), "q5_k": (0, 2), "q6_k": (208,), "mxfp4": (),
}  # fmt: skip
NUMPY = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}


def random_blocks(dtype: str, rows: int, k: int, seed: int = 0) -> np.ndarray:
    """rows x k values of `dtype` as GGUF bytes: random quants, finite f16 scales (some
    subnormal), mxfp4 exponents from the subnormal halves up."""
    elements, nbytes = quantized.QUANT_BLOCKS[dtype]
    rng = np.random.default_rng(seed)
    raw = rng.integers(0, 256, (rows * k // elements, nbytes), dtype=np.uint8)
    for at in HALVES[dtype]:
        half = (rng.standard_normal(len(raw)) * 0.02).astype(np.float16)
        half[::7] = np.float16(3e-6)  # a subnormal
        raw[:, at : at + 2] = half.view(np.uint8).reshape(-1, 2)
    if dtype == "mxfp4":
        raw[:, 0] = rng.integers(100, 131, len(raw), dtype=np.uint8)  # at most 4 · 12
        raw[:2, 0] = (0, 1)
    return raw.reshape(rows, k // elements * nbytes)


def reference(dtype: str, raw: np.ndarray) -> np.ndarray:
    qtype = getattr(gguf_constants.GGMLQuantizationType, dtype.upper())
    return np.asarray(gguf_quants.dequantize(raw, qtype), dtype=np.float32)


def _run(launch: quantized.Launch, buffers: list[np.ndarray]) -> list[np.ndarray]:
    return cuda_emulator.run_kernel(launch.kernel, launch.grid, launch.block, buffers)


def _bits(a: np.ndarray) -> np.ndarray:
    return a.view(np.uint16 if a.itemsize == 2 else np.uint32)


@pytest.mark.parametrize("dtype", TYPES)
def test_dequantize_is_the_reference_bit_for_bit(dtype: str) -> None:
    elements = quantized.QUANT_BLOCKS[dtype][0]
    rows, k = 3, elements * 3
    raw = random_blocks(dtype, rows, k)
    want = reference(dtype, raw).reshape(rows, k)
    launch = quantized.dequantize_launch(TensorType(dtype, (rows, k)), "f32")
    got = _run(launch, [np.zeros((rows, k), np.float32), raw])[0]
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize(("dtype", "out"), [("q4_k", "f16"), ("q8_0", "bf16"), ("q6_k", "bf16")])
def test_dequantize_rounds_once_to_f16_and_bf16(dtype: str, out: str) -> None:
    elements = quantized.QUANT_BLOCKS[dtype][0]
    raw = random_blocks(dtype, 2, elements * 2, seed=1)
    want = reference(dtype, raw).reshape(2, -1).astype(NUMPY[out])
    launch = quantized.dequantize_launch(TensorType(dtype, (2, elements * 2)), out)
    got = _run(launch, [np.zeros(want.shape, NUMPY[out]), raw])[0]
    np.testing.assert_array_equal(_bits(got), _bits(want))


@pytest.mark.parametrize("dtype", TYPES)
def test_get_rows_decodes_the_rows_and_zeros_outside(dtype: str) -> None:
    elements = quantized.QUANT_BLOCKS[dtype][0]
    vocab, width = 7, elements * 2
    raw = random_blocks(dtype, vocab, width, seed=2)
    table = reference(dtype, raw).reshape(vocab, width)
    ids = np.array([3, 0, 6, 3, -1, 7], dtype=np.int64)
    want = np.stack([table[i] if 0 <= i < vocab else np.zeros(width, np.float32) for i in ids])
    out = TensorType("f32", (len(ids), width))
    launch = quantized.get_rows_launch(
        TensorType(dtype, (vocab, width)), TensorType("i64", (len(ids),)), out
    )
    got = _run(launch, [np.zeros(want.shape, np.float32), raw, ids])[0]
    np.testing.assert_array_equal(_bits(got), _bits(want))


def _cases() -> list[tuple[str, int, int, str]]:
    """(type, K, rows of x, x dtype): one unit; whole 16-byte rows (staged) with a partial last
    tile; rows that are not whole 16-byte units (read in place)."""
    cases = []
    dtypes = ["f32", "f16", "bf16"]
    for i, t in enumerate(TYPES):
        elements = quantized.QUANT_BLOCKS[t][0]
        ks = [32, 96, 1280, 2144] if elements == 32 else [256, 1280, 2560, 2048]
        for j, k in enumerate(ks):
            cases.append((t, k, 1 + (i + j) % 3, dtypes[(i + j) % 3]))
    return cases


@pytest.mark.parametrize(("dtype", "k", "rows", "xdtype"), _cases())
def test_one_row_product_matches_the_dequantized_product(
    dtype: str, k: int, rows: int, xdtype: str
) -> None:
    n = 13  # not a whole block of output columns
    raw = random_blocks(dtype, n, k, seed=k)
    w = reference(dtype, raw).reshape(n, k).astype(np.float64)
    x = np.random.default_rng(k).standard_normal((rows, k)).astype(NUMPY[xdtype])
    want = x.astype(np.float64) @ w.T
    launch = quantized.one_row_launch(
        TensorType(xdtype, (rows, k)), TensorType(dtype, (n, k)), TensorType(xdtype, (rows, n))
    )
    staged = "og_stage" in launch.kernel.source
    integer = "__dp2a_lo" in launch.kernel.source  # q4_k (q6_k opt-in): quantized_integer_dot
    row_bytes = raw.shape[1]
    assert staged == (row_bytes % 16 == 0 and not integer)
    taken = dtype in quantized.INTEGER_DOT_TYPES and quantized_integer_dot.fits(dtype, k)
    assert integer == taken
    got = _run(launch, [np.zeros((rows, n), NUMPY[xdtype]), x, raw])[0].astype(np.float64)
    nmse = float(np.sum((got - want) ** 2) / np.sum(want**2))
    # the integer form: x's int16 codes carry 2^-16 of a unit's largest |x| (a few 1e-10)
    bound = {"f32": 1e-8 if integer else 1e-10, "f16": 1e-6, "bf16": 1e-4}[xdtype]
    assert nmse <= bound, (nmse, dtype, k, rows, xdtype)


def test_tiles_are_whole_blocks_and_16_byte_units() -> None:
    for dtype in TYPES:
        elements, nbytes = quantized.QUANT_BLOCKS[dtype]
        units = 32 * quantized.lanes_per_tile(dtype)
        assert units % (elements // 32) == 0
        assert units // (elements // 32) * nbytes % 16 == 0
    assert quantized.lanes_per_tile("q6_k") == 2


def test_decoders_only_in_modules_that_read_quantized_weights() -> None:
    launch = quantized.dequantize_launch(TensorType("q5_k", (2, 256)), "f32")
    source = launch.kernel.source
    assert "og_dq32_q5_k" in source and "og_q_scale_min" in source
    assert "og_dq32_q8_0" not in source
    assert launch.kernel.decls[0] == quantized.COMMON


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc (CUDA toolkit)")
def test_every_quantized_kernel_compiles_with_nvcc(tmp_path: Path) -> None:
    """Every type's dequantize (f32, f16, bf16), get_rows and one-row product (staged and read
    in place, every x dtype) as one module through nvcc for sm_90."""
    kernels = []
    for dtype in TYPES:
        elements = quantized.QUANT_BLOCKS[dtype][0]
        for out in ("f32", "f16", "bf16"):
            kernels.append(quantized.dequantize_launch(TensorType(dtype, (4, elements)), out))
            for k in (elements, elements * 8):
                x, w = TensorType(out, (1, k)), TensorType(dtype, (64, k))
                kernels.append(quantized.one_row_launch(x, w, TensorType(out, (1, 64))))
        table, ids = TensorType(dtype, (9, elements)), TensorType("i32", (3,))
        kernels.append(quantized.get_rows_launch(table, ids, TensorType("f32", (3, elements))))
    source = tmp_path / "quantized.cu"
    source.write_text(module_source(launch.kernel for launch in kernels))
    done = subprocess.run(
        ["nvcc", "-cubin", "-arch=sm_90", "-std=c++17", "-o", str(tmp_path / "q.cubin"),
         str(source)],
        check=False, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
