"""Dequantization of ggml's block formats: bit for bit what `gguf.quants.dequantize` gives, on
random blocks, extreme and zero scales, every K-quant sub-block scale/min layout; the reference
semantics of the ops that read quantized weights, and `random_weights`' blocks."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.errors import InputError
from optgraph.ir.graph import QUANT_BLOCKS, QUANT_DTYPES, TensorType
from optgraph.reference.dequantize import dequantize
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference

gguf = pytest.importorskip("gguf")

# Byte offsets of each type's f16 scales (the block scale d, and dmin or m where there is one).
HALVES = {
    "q8_0": (0,),
    "q4_0": (0,),
    "q4_1": (0, 2),
    "q5_0": (0,),
    "q4_k": (0, 2),
    "q5_k": (0, 2),
    "q6_k": (208,),
    "mxfp4": (),
}
EXTREME_HALVES = [
    np.float16(65504.0),  # largest
    np.float16(-65504.0),
    np.float16(6.104e-05),  # smallest normal
    np.float16(-6.104e-05),
    np.float16(6e-08),  # smallest subnormal
    np.float16(0.0),
    np.float16(-0.0),
    np.float16(1.0),
    np.float16(-0.333),
]


def expected(data: np.ndarray, dtype: str) -> np.ndarray:
    return gguf.quants.dequantize(data, gguf.GGMLQuantizationType[dtype.upper()])


def assert_bits_equal(ours: np.ndarray, theirs: np.ndarray) -> None:
    assert ours.dtype == np.float32 and ours.shape == theirs.shape
    same = ours.view(np.uint32) == theirs.astype(np.float32).view(np.uint32)
    assert same.all(), f"{(~same).sum()} of {same.size} values differ"


def random_data(dtype: str, rows: int, blocks: int, seed: int) -> np.ndarray:
    size = QUANT_BLOCKS[dtype][1]
    return np.random.default_rng(seed).integers(0, 256, (rows, blocks * size), dtype=np.uint8)


def with_halves(data: np.ndarray, dtype: str, values: list[np.float16], seed: int) -> np.ndarray:
    """`data` with its f16 scale fields set to values drawn from `values`."""
    size = QUANT_BLOCKS[dtype][1]
    blocks = data.reshape(-1, size).copy()
    rng = np.random.default_rng(seed)
    for at in HALVES[dtype]:
        picked = np.array(values, dtype=np.float16)[rng.integers(0, len(values), len(blocks))]
        blocks[:, at : at + 2] = picked.view(np.uint8).reshape(-1, 2)
    return blocks.reshape(data.shape)


def shape_of(data: np.ndarray, dtype: str) -> tuple[int, ...]:
    elems, size = QUANT_BLOCKS[dtype]
    return (*data.shape[:-1], data.shape[-1] // size * elems)


@pytest.mark.parametrize("dtype", QUANT_DTYPES)
def test_random_blocks_equal_gguf_bit_for_bit(dtype: str) -> None:
    """Random bytes: every code, any scale (NaN and inf among the f16 ones)."""
    for seed in range(3):
        data = random_data(dtype, 5, 7, seed)
        with np.errstate(all="ignore"):
            ours = dequantize(data, dtype, shape_of(data, dtype))
            theirs = expected(data, dtype)
        same = (ours.view(np.uint32) == theirs.view(np.uint32)) | (
            np.isnan(ours) & np.isnan(theirs)
        )
        assert same.all(), dtype


@pytest.mark.parametrize("dtype", [d for d in QUANT_DTYPES if HALVES[d]])
def test_extreme_zero_and_negative_scales(dtype: str) -> None:
    data = with_halves(random_data(dtype, 4, 40, 1), dtype, EXTREME_HALVES, seed=2)
    with np.errstate(over="ignore"):
        ours = dequantize(data, dtype, shape_of(data, dtype))
        theirs = expected(data, dtype)
    assert_bits_equal(ours, theirs)


def test_every_mxfp4_exponent() -> None:
    data = random_data("mxfp4", 256, 2, 3)
    data[:, 0] = np.arange(256, dtype=np.uint8)  # E8M0 0 (subnormal scale) to 255
    data[:, 17] = np.arange(256, dtype=np.uint8)[::-1]
    with np.errstate(over="ignore"):
        assert_bits_equal(dequantize(data, "mxfp4", (256, 64)), expected(data, "mxfp4"))


@pytest.mark.parametrize("dtype", QUANT_DTYPES)
def test_zero_blocks(dtype: str) -> None:
    data = np.zeros((3, 2 * QUANT_BLOCKS[dtype][1]), dtype=np.uint8)
    ours = dequantize(data, dtype, shape_of(data, dtype))
    assert_bits_equal(ours, expected(data, dtype))
    assert not ours.any()


@pytest.mark.parametrize("dtype", ["q4_k", "q5_k"])
def test_every_k_quant_scale_and_min_layout(dtype: str) -> None:
    """Each of the eight sub-blocks alone at the largest 6-bit scale and min (63), then all at
    once, then every 6-bit value in every position: the packing of the 12 scale bytes."""
    size = QUANT_BLOCKS[dtype][1]
    rng = np.random.default_rng(4)
    cases = []
    for which in [*range(8), None]:
        scales, mins = np.zeros(8, np.uint8), np.zeros(8, np.uint8)
        if which is None:
            scales[:], mins[:] = 63, 63
        else:
            scales[which] = mins[which] = 63
        cases.append((scales, mins))
    for value in range(64):
        cases.append((np.full(8, value, np.uint8), np.roll(np.arange(8, dtype=np.uint8), value)))
        cases.append((rng.integers(0, 64, 8, np.uint8), np.full(8, 63 - value, np.uint8)))
    blocks = rng.integers(0, 256, (len(cases), size), dtype=np.uint8)
    blocks[:, 0:2] = np.float16(0.5).reshape(1).view(np.uint8)
    blocks[:, 2:4] = np.float16(-0.25).reshape(1).view(np.uint8)
    for i, (sc, m) in enumerate(cases):
        blocks[i, 4:16] = pack_k_scales(sc, m)
    ours = dequantize(blocks, dtype, (len(cases), 256))
    assert_bits_equal(ours, expected(blocks, dtype))
    # and the unpacking is right, not only equal: a lone sub-block's scale shows only there
    ones = blocks[:8].copy()
    ones[:, 16:] = 0x11 if dtype == "q4_k" else 0  # every q4_k code 1; q5_k codes 0
    values = dequantize(ones, dtype, (8, 256)).reshape(8, 8, 32)
    for which in range(8):
        others = np.delete(values[which], which, axis=0)
        assert not others.any()
        assert values[which, which].any()


def pack_k_scales(scales: np.ndarray, mins: np.ndarray) -> np.ndarray:
    """ggml's 12-byte packing of eight 6-bit scales and mins (written from its description:
    docs/ir.md, optgraph/reference/dequantize.py)."""
    out = np.zeros(12, np.uint8)
    out[0:4] = (scales[0:4] & 63) | ((scales[4:8] >> 4) << 6)
    out[4:8] = (mins[0:4] & 63) | ((mins[4:8] >> 4) << 6)
    out[8:12] = (scales[4:8] & 15) | ((mins[4:8] & 15) << 4)
    return out


def test_q6_k_every_scale_and_code() -> None:
    rng = np.random.default_rng(5)
    blocks = rng.integers(0, 256, (256, 210), dtype=np.uint8)
    blocks[:, 192:208] = np.arange(256, dtype=np.uint8).reshape(256, 1)  # every int8 scale
    blocks[:, 208:210] = np.float16(-1.5).reshape(1).view(np.uint8)
    assert_bits_equal(dequantize(blocks, "q6_k", (256, 256)), expected(blocks, "q6_k"))


@pytest.mark.parametrize("dtype", ["q8_0", "q4_0", "q4_1", "q5_0", "mxfp4"])
def test_quantized_floats_come_back(dtype: str) -> None:
    """Blocks made by gguf's own quantizer (where it has one) from real floats."""
    values = np.random.default_rng(6).standard_normal((6, 128)).astype(np.float32)
    data = gguf.quants.quantize(values, gguf.GGMLQuantizationType[dtype.upper()])
    ours = dequantize(data, dtype, values.shape)
    assert_bits_equal(ours, expected(data, dtype))
    assert np.abs(ours - values).max() < 0.6


def test_wrong_arrays_are_refused() -> None:
    with pytest.raises(ValueError, match=r"q8_0\[2,32\] is stored as uint8\[2, 34\]"):
        dequantize(np.zeros((2, 32), np.uint8), "q8_0", (2, 32))
    with pytest.raises(ValueError, match="got float32"):
        dequantize(np.zeros((2, 34), np.float32), "q8_0", (2, 32))


@pytest.mark.parametrize("dtype", QUANT_DTYPES)
def test_random_weights_make_valid_blocks(dtype: str) -> None:
    elems = QUANT_BLOCKS[dtype][0]
    text = f"""graph g {{
  input %x : f32[3,{2 * elems}]
  weight %w : {dtype}[8,{2 * elems}]
  %y = matmul(%x, %w) {{transpose_b = true}} : f32[3,8]
  output %y
}}"""
    g = og.parse(text)
    w = random_weights(g, seed=1)["w"]
    t = g.weights[0].type
    assert w.dtype == np.uint8 and w.shape == t.array_shape
    values = dequantize(w, dtype, t.shape)
    assert np.isfinite(values).all()
    spread = float(values.std())
    assert 0.02 < spread < 1.0, spread  # about N(0,1)/sqrt(fan_in), fan_in = 2·block
    assert np.array_equal(random_weights(g, seed=1)["w"], w)


DECODE = """graph decode {
  input %x : f16[2,256]
  input %ids : i32[2]
  weight %w : q4_k[16,256]
  weight %emb : q6_k[10,256]
  weight %d : mxfp4[4,32]
  %y = matmul(%x, %w) {transpose_b = true} : f16[2,16]
  %e = get_rows(%emb, %ids) : f32[2,256]
  %f = dequantize(%d) {dtype = "bf16"} : bf16[4,32]
  output %y, %e, %f
}
"""


def test_the_reference_computes_on_the_dequantized_values() -> None:
    g = og.parse(DECODE)
    inputs, weights = random_inputs(g, seed=2), random_weights(g, seed=2)
    out = run_reference(g, inputs, weights)
    w = dequantize(weights["w"], "q4_k", (16, 256))
    emb = dequantize(weights["emb"], "q6_k", (10, 256))
    d = dequantize(weights["d"], "mxfp4", (4, 32))
    x = inputs["x"].astype(np.float32)
    assert out["y"].dtype == np.float16
    assert np.array_equal(out["y"], (x @ w.T).astype(np.float16))
    assert np.array_equal(out["e"], emb[inputs["ids"]])
    assert np.array_equal(out["f"], d.astype(out["f"].dtype))


def test_get_rows_of_a_quantized_table_checks_its_ids() -> None:
    g = og.parse(DECODE)
    inputs, weights = random_inputs(g), random_weights(g)
    inputs["ids"] = np.array([3, 10], np.int32)
    with pytest.raises(InputError, match="get_rows: id 10 out of range for a table of 10 rows"):
        run_reference(g, inputs, weights)


def test_quantized_weight_arrays_are_checked() -> None:
    g = og.parse(DECODE)
    weights = random_weights(g)
    weights["w"] = np.zeros((16, 256), np.float32)
    with pytest.raises(InputError, match=r"expected q4_k\[16,256\] \(stored as uint8\[16,144\]\)"):
        run_reference(g, random_inputs(g), weights)


def test_stored_bytes_are_the_weights_nbytes() -> None:
    for dtype in QUANT_DTYPES:
        t = TensorType(dtype, (4, QUANT_BLOCKS[dtype][0] * 3))
        assert np.zeros(t.array_shape, np.uint8).nbytes == t.nbytes
