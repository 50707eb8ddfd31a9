# NumPy's stubs type most array expressions as Any; returning them is the point of a decoder.
# mypy: disable-error-code="no-any-return"
"""The values of quantized weights: ggml's block formats decoded to float32, and the reference
kernel of `dequantize`.

`dequantize(data, dtype, shape)` reads the stored bytes of a quantized value (`uint8`,
`TensorType.array_shape`, as a GGUF tensor's `data`) and returns its float32 values of `shape`,
equal bit for bit to `gguf.quants.dequantize` (tests/reference/test_dequantize.py): each scale is
an IEEE half (little-endian), every product and sum is one float32 operation in the order ggml's
reference `dequantize_row_*` performs it, so the roundings (and the signs of zeros) agree.

The block layouts (ggml-common.h; docs/ir.md, "Quantized weights"), per block:

    q8_0   d:f16, q:int8[32]                             x = d·q
    q4_0   d:f16, qs:u8[16] (lo nibbles 0..15, hi 16..31) x = d·(q − 8)
    q4_1   d:f16, m:f16, qs:u8[16]                       x = d·q + m
    q5_0   d:f16, qh:u8[4] (bit j: 5th bit of j), qs     x = d·(q − 16)
    q4_k   d, dmin:f16, scales:u8[12] (eight 6-bit scales and mins), qs:u8[128]
           sub-block j of 32: x = (d·sc_j)·q − (dmin·m_j)
    q5_k   as q4_k, qh:u8[32] (bit j of byte i: 5th bit of element i of sub-block j) before qs
    q6_k   ql:u8[128], qh:u8[64], scales:int8[16], d:f16  x = (d·sc_k)·(q − 32), k per 16
    mxfp4  e:u8 (E8M0), qs:u8[16] of E2M1 codes          x = 2^(e−128)·(2·fp4)

Cost: O(bytes) vectorized NumPy, a few temporaries of the decoded size.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from optgraph.errors import InputError
from optgraph.ir.graph import QUANT_BLOCKS, AttrValue, Node, TensorType

__all__ = ["dequantize", "dequantize_kernel", "dequantize_operands", "random_blocks"]

F32 = np.float32
Decoder = Callable[[np.ndarray], np.ndarray]


def _half(blocks: np.ndarray, at: int) -> np.ndarray:
    """The little-endian f16 at byte `at` of each block, as float32 `(n, 1)`."""
    bits = blocks[:, at].astype(np.uint16) | (blocks[:, at + 1].astype(np.uint16) << 8)
    return bits.view(np.float16).astype(F32).reshape(-1, 1)


def _nibbles(packed: np.ndarray) -> np.ndarray:
    """Bytes `(n, k)` -> codes `(n, 2k)`: the low nibbles of the k bytes, then the high ones."""
    return np.concatenate([packed & 0x0F, packed >> 4], axis=1)


def _bits(packed: np.ndarray) -> np.ndarray:
    """Bytes `(n, k)` -> bits `(n, 8k)`, bit b of byte i at 8i + b."""
    return np.unpackbits(packed, axis=1, bitorder="little")


def _q8_0(blocks: np.ndarray) -> np.ndarray:
    return _half(blocks, 0) * blocks[:, 2:].view(np.int8).astype(F32)


def _q4_0(blocks: np.ndarray) -> np.ndarray:
    q = _nibbles(blocks[:, 2:]).astype(np.int8) - np.int8(8)
    return _half(blocks, 0) * q.astype(F32)


def _q4_1(blocks: np.ndarray) -> np.ndarray:
    q = _nibbles(blocks[:, 4:]).astype(F32)
    return _half(blocks, 0) * q + _half(blocks, 2)


def _q5_0(blocks: np.ndarray) -> np.ndarray:
    q = _nibbles(blocks[:, 6:]) | (_bits(blocks[:, 2:6]) << 4)
    return _half(blocks, 0) * (q.astype(np.int8) - np.int8(16)).astype(F32)


def _k_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The eight 6-bit scales and mins of a q4_k/q5_k block from its 12 bytes `(n, 12)`:
    sub-blocks 0-3 in the low 6 bits of bytes 0-3 (scales) and 4-7 (mins); sub-blocks 4-7 in
    the nibbles of bytes 8-11 (scale low, min high) with their top 2 bits in the top 2 bits of
    bytes 0-3 (scales) and 4-7 (mins)."""
    low, mid, top = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    scales = np.concatenate([low & 0x3F, (top & 0x0F) | ((low >> 6) << 4)], axis=1)
    mins = np.concatenate([mid & 0x3F, (top >> 4) | ((mid >> 6) << 4)], axis=1)
    return scales.astype(F32), mins.astype(F32)


def _k_sub_blocks(blocks: np.ndarray, q: np.ndarray) -> np.ndarray:
    """(d·sc_j)·q − (dmin·m_j) over the eight sub-blocks `q (n, 8, 32)` of a q4_k/q5_k block."""
    scales, mins = _k_scales(blocks[:, 4:16])
    scale = (_half(blocks, 0) * scales)[:, :, None]
    shift = (_half(blocks, 2) * mins)[:, :, None]
    return (scale * q.astype(F32) - shift).reshape(len(blocks), 256)


def _k_low_nibbles(qs: np.ndarray) -> np.ndarray:
    """q4_k/q5_k codes `(n, 128)` -> `(n, 8, 32)`: 32 bytes hold sub-blocks 2c (low) and
    2c + 1 (high nibbles)."""
    chunks = qs.reshape(len(qs), 4, 1, 32)
    return np.concatenate([chunks & 0x0F, chunks >> 4], axis=2).reshape(len(qs), 8, 32)


def _q4_k(blocks: np.ndarray) -> np.ndarray:
    return _k_sub_blocks(blocks, _k_low_nibbles(blocks[:, 16:144]))


def _q5_k(blocks: np.ndarray) -> np.ndarray:
    high = _bits(blocks[:, 16:48]).reshape(len(blocks), 32, 8).transpose(0, 2, 1)
    return _k_sub_blocks(blocks, _k_low_nibbles(blocks[:, 48:176]) | (high << 4))


def _q6_k(blocks: np.ndarray) -> np.ndarray:
    """Two halves of 128 elements; element p of a half: the nibble p // 64 of its ql byte p % 64
    and bits 2·(p // 32) of its qh byte p % 32; a scale per 16 elements."""
    n = len(blocks)
    ql = blocks[:, 0:128].reshape(n, 2, 1, 64)
    low = np.concatenate([ql & 0x0F, ql >> 4], axis=2).reshape(n, 2, 128)
    qh = blocks[:, 128:192].reshape(n, 2, 1, 32)
    high = np.concatenate([(qh >> s) & 0x03 for s in (0, 2, 4, 6)], axis=2).reshape(n, 2, 128)
    q = ((low | (high << 4)).astype(np.int8) - np.int8(32)).reshape(n, 16, 16)
    scale = _half(blocks, 208) * blocks[:, 192:208].view(np.int8).astype(F32)
    return (scale[:, :, None] * q.astype(F32)).reshape(n, 256)


# E2M1 (sign, 2 exponent bits, 1 mantissa bit) doubled: 0, 0.5, 1, 1.5, 2, 3, 4, 6 times 2; code 8
# is +0 (a product with it keeps the scale's sign of zero, as ggml's int8 table does).
_FP4_DOUBLED = np.array([0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12], dtype=F32)


def _mxfp4(blocks: np.ndarray) -> np.ndarray:
    # E8M0 halved: 2^(e - 128), exact in float32 (e = 0 and 1 are subnormal).
    scale = np.ldexp(F32(1.0), blocks[:, 0:1].astype(np.int32) - 128).astype(F32)
    return scale * _FP4_DOUBLED[_nibbles(blocks[:, 1:17])]


_DECODERS: Mapping[str, Decoder] = {
    "q8_0": _q8_0,
    "q4_0": _q4_0,
    "q4_1": _q4_1,
    "q5_0": _q5_0,
    "q4_k": _q4_k,
    "q5_k": _q5_k,
    "q6_k": _q6_k,
    "mxfp4": _mxfp4,
}
assert tuple(_DECODERS) == tuple(QUANT_BLOCKS)


def dequantize(data: np.ndarray, dtype: str, shape: Sequence[int]) -> np.ndarray:
    """The float32 values of `shape` that the `dtype` blocks in `data` (uint8, the stored
    bytes: `TensorType(dtype, shape).array_shape`) hold."""
    expected = TensorType(dtype, tuple(shape))
    data = np.asarray(data)
    if data.dtype != np.uint8 or data.shape != expected.array_shape:
        raise ValueError(
            f"{expected} is stored as uint8{list(expected.array_shape)}, "
            f"got {data.dtype}{list(data.shape)}"
        )
    size = QUANT_BLOCKS[dtype][1]
    blocks = np.ascontiguousarray(data).reshape(-1, size)
    values = _DECODERS[dtype](blocks)
    return np.ascontiguousarray(values, dtype=F32).reshape(expected.shape)


def dequantize_operands(
    node: Node, args: Sequence[np.ndarray], types: Sequence[TensorType]
) -> list[np.ndarray]:
    """`args` with each quantized operand (bytes) replaced by its float32 values, for the
    reference kernels, which then compute as on any f32 operand. A `get_rows` table gives only
    the rows its ids pick (the ids renumbered to match): a decode step reads a few rows of a
    vocabulary-sized table."""
    out = list(args)
    for k, t in enumerate(types):
        if not t.is_quantized:
            continue
        if node.op == "get_rows" and k == 0:
            return _picked_rows(node, args, t)
        out[k] = dequantize(args[k], t.dtype, t.shape)
    return out


def _picked_rows(node: Node, args: Sequence[np.ndarray], table: TensorType) -> list[np.ndarray]:
    data, ids = args
    rows = data.reshape(-1, data.shape[-1])
    if ids.size and (ids.min() < 0 or ids.max() >= rows.shape[0]):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise InputError(
            f"get_rows: id {bad} out of range for a table of {rows.shape[0]} rows", node.span
        )
    picked = rows[ids.reshape(-1)]
    values = dequantize(picked, table.dtype, (len(picked), table.shape[-1]))
    return [values, np.arange(len(picked), dtype=ids.dtype).reshape(ids.shape)]


def dequantize_kernel(
    node: Node, args: Sequence[np.ndarray], attrs: Mapping[str, AttrValue]
) -> np.ndarray:
    """The reference kernel of `dequantize`: its operand arrives dequantized
    (`dequantize_operands`); the caller rounds to the node's dtype."""
    return args[0]


# Where each type keeps its f16 block scale and the factor that gives values of spread 1 (from
# the spread of its codes), and where it keeps its min (q4_1, K-quants) as a multiple of the
# scale: what `random_blocks` writes over random bytes.
_SCALES: Mapping[str, tuple[int, float, int | None, float]] = {
    "q8_0": (0, 1 / 73.0, None, 0.0),
    "q4_0": (0, 1 / 4.6, None, 0.0),
    "q4_1": (0, 1 / 4.6, 2, -7.5),  # m = -7.5·d centres the codes
    "q5_0": (0, 1 / 9.2, None, 0.0),
    "q4_k": (0, 1 / (36 * 4.6), 2, 7.5),  # dmin·m ≈ d·sc·7.5 on average
    "q5_k": (0, 1 / (36 * 9.2), 2, 15.5),
    "q6_k": (208, 1 / (74 * 18.5), None, 0.0),
}


def random_blocks(rng: np.random.Generator, t: TensorType, spread: float) -> np.ndarray:
    """Valid random blocks of quantized type `t` (uint8, `t.array_shape`) whose values spread
    about `spread`: random codes and sub-block scales, finite f16 (or E8M0) block scales."""
    size = QUANT_BLOCKS[t.dtype][1]
    count = t.nbytes // size
    blocks = rng.integers(0, 256, size=(count, size), dtype=np.uint8)
    jitter = rng.uniform(0.5, 1.5, size=count).astype(F32) * F32(spread)
    if t.dtype == "mxfp4":  # doubled E2M1 codes spread about 5.85
        exponent = np.round(np.log2(jitter / F32(5.85))) + 128
        blocks[:, 0] = np.clip(exponent, 0, 254).astype(np.uint8)
        return blocks.reshape(t.array_shape)
    at, factor, min_at, min_factor = _SCALES[t.dtype]
    scale = (jitter * F32(factor)).astype(np.float16)
    blocks[:, at : at + 2] = scale.view(np.uint8).reshape(count, 2)
    if min_at is not None:
        low = (scale.astype(F32) * F32(min_factor)).astype(np.float16)
        blocks[:, min_at : min_at + 2] = low.view(np.uint8).reshape(count, 2)
    return blocks.reshape(t.array_shape)
