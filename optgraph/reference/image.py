# NumPy's stubs type most array expressions as Any; returning them is the point of a kernel.
# mypy: disable-error-code="no-any-return"
"""The reference semantics of `resize` (docs/ir.md, `ir/op_rules_image.py`): nearest and
bilinear resampling of the last two axes, coordinates in float32 as PyTorch and ONNX Runtime
compute them.

    %y = resize(%x) {size = [8, 8]} : f32[1,2,8,8]        (x : f32[1,2,4,4]: each pixel twice)

Per output axis (`source`): the source coordinate of each output row, then for nearest its
rounding (`nearest`) clamped to the rows, for linear the two rows around it and their weights
(`linear_taps`). The CUDA kernel (`codegen/kernels/resize.py`) computes the same float32
expressions in the same order. Cost: O(output elements).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from optgraph.ir.graph import AttrValue, Node

F32 = np.float32
Attrs = Mapping[str, AttrValue]


def ratio(in_len: int, out_len: int, scale: AttrValue | None) -> np.float32:
    """Input rows per output row: 1 / the given scale factor, else in / out (float32)."""
    if scale is not None:
        assert isinstance(scale, int | float)
        return F32(1.0) / F32(scale)
    return F32(in_len) / F32(out_len)


def source(in_len: int, out_len: int, scale: AttrValue | None, coordinates: str) -> np.ndarray:
    """The float32 source coordinate of each of `out_len` output rows."""
    y = np.arange(out_len, dtype=F32)
    if coordinates == "align_corners":
        if out_len == 1:
            return np.zeros(1, F32)
        return y * (F32(in_len - 1) / F32(out_len - 1))
    r = ratio(in_len, out_len, scale)
    if coordinates == "asymmetric":
        return y * r
    if coordinates == "pytorch_half_pixel" and out_len == 1:
        return np.zeros(1, F32)
    return (y + F32(0.5)) * r - F32(0.5)


def nearest(src: np.ndarray, mode: str, in_len: int) -> np.ndarray:
    """The row each coordinate reads (`floor`, `ceil`, halves down or up), clamped."""
    if mode == "floor":
        rows = np.floor(src)
    elif mode == "ceil":
        rows = np.ceil(src)
    elif mode == "round_prefer_floor":
        rows = np.ceil(src - F32(0.5))
    else:
        rows = np.floor(src + F32(0.5))
    return np.clip(rows.astype(np.int64), 0, in_len - 1)


def linear_taps(src: np.ndarray, in_len: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(first row, second row, weight of the second) of each coordinate, clamped to the rows."""
    clamped = np.clip(src, F32(0), F32(in_len - 1))
    first = np.floor(clamped).astype(np.int64)
    second = np.minimum(first + 1, in_len - 1)
    return first, second, (clamped - first.astype(F32)).astype(F32)


def resize(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x = np.asarray(args[0], F32)
    size = attrs["size"]
    assert isinstance(size, tuple)
    (h, w), (oh, ow) = x.shape[2:], (int(size[0]), int(size[1]))
    coordinates, mode = str(attrs["coordinates"]), str(attrs["mode"])
    rows = source(h, oh, attrs.get("scale_h"), coordinates)
    cols = source(w, ow, attrs.get("scale_w"), coordinates)
    if mode == "nearest":
        picked = nearest(rows, str(attrs["nearest"]), h)
        return x[:, :, picked][:, :, :, nearest(cols, str(attrs["nearest"]), w)]
    r0, r1, wr = linear_taps(rows, h)
    c0, c1, wc = linear_taps(cols, w)
    top, bottom = x[:, :, r0], x[:, :, r1]
    wr1, wc1 = wr[:, None], wc[None, :]
    wr0, wc0 = F32(1) - wr1, F32(1) - wc1
    upper = wc0 * top[:, :, :, c0] + wc1 * top[:, :, :, c1]
    lower = wc0 * bottom[:, :, :, c0] + wc1 * bottom[:, :, :, c1]
    return (wr0 * upper + wr1 * lower).astype(F32)
