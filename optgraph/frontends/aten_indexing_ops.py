"""ATen indexing ops -> IR `expand`, `tile`, `pad`, `cumsum`, `argmax`, `prelu`.

    x.expand(2, -1, 4)              aten.expand           -> expand {shape}  (the export's shape)
    x.repeat(1, 2)                  aten.repeat           -> tile {repeats} (after a reshape when
                                                             repeats has more axes than x)
    F.pad(x, (1, 2))                aten.constant_pad_nd  -> pad {pads} (ATen's last-axis-first
                                                             pairs turned into ONNX order)
    x.cumsum(1), x.argmax(-1)       -> cumsum {axis}, argmax {axis, keepdims}
    F.prelu(x, w)                   aten._prelu_kernel    -> prelu, w [C] reshaped to [C,1,..]
    mask[b_idx, kv_idx]             aten.index.Tensor     -> get_rows of the indexed leading
                                                             axes (flattened) at the constant
                                                             flat positions, then a reshape

Refused with their reason: negative pads (cropping), argmax without a dim (of the flattened
tensor), a cumsum that changes dtype, indexing with run-time, boolean or out-of-range indices or
with a slice before an index tensor.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from optgraph.frontends.torch_values import Converter, TorchContext, arg, unsupported
from optgraph.ir.graph import AttrValue, TensorType


def _expand(ctx: TorchContext, node: Any) -> None:
    out = ctx.result_type(node)
    if ctx.type_of(node.args[0]).shape == out.shape:
        ctx.alias(node, node.args[0])
        return
    ctx.emit(node, "expand", [ctx.name_of(node.args[0])], {"shape": out.shape})


def _repeat(ctx: TorchContext, node: Any) -> None:
    x = ctx.type_of(node.args[0])
    repeats = tuple(int(r) for r in node.args[1])
    name = ctx.name_of(node.args[0])
    if len(repeats) > x.rank:
        padded = x.with_shape((1,) * (len(repeats) - x.rank) + x.shape)
        name = ctx.step(node, "reshape", [name], padded, {"shape": padded.shape})
    ctx.emit(node, "tile", [name], {"repeats": repeats})


def _constant_pad(ctx: TorchContext, node: Any) -> None:
    x = ctx.type_of(node.args[0])
    pairs = [int(p) for p in node.args[1]]
    if min(pairs, default=0) < 0:
        raise unsupported(node, "negative pads (cropping) are not supported")
    before, after = [0] * x.rank, [0] * x.rank
    for k in range(len(pairs) // 2):  # ATen: (last axis before, after, next-to-last ...)
        axis = x.rank - 1 - k
        before[axis], after[axis] = pairs[2 * k], pairs[2 * k + 1]
    attrs: dict[str, AttrValue] = {
        "pads": tuple(before + after),
        "value": float(arg(node, 2, "value", 0.0)),
    }
    ctx.emit(node, "pad", [ctx.name_of(node.args[0])], attrs)


def _cumsum(ctx: TorchContext, node: Any) -> None:
    x = ctx.type_of(node.args[0])
    if ctx.result_type(node).dtype != x.dtype:
        raise unsupported(node, f"a cumsum from {x.dtype} to {ctx.result_type(node).dtype}")
    axis = int(node.args[1]) % max(x.rank, 1)
    ctx.emit(node, "cumsum", [ctx.name_of(node.args[0])], {"axis": axis})


def _argmax(ctx: TorchContext, node: Any) -> None:
    dim = arg(node, 1, "dim")
    if dim is None:
        raise unsupported(node, "argmax without a dim (of the flattened tensor)")
    attrs: dict[str, AttrValue] = {
        "axis": int(dim),
        "keepdims": bool(arg(node, 2, "keepdim", False)),
    }
    ctx.emit(node, "argmax", [ctx.name_of(node.args[0])], attrs)


def _prelu(ctx: TorchContext, node: Any) -> None:
    x, w = ctx.type_of(node.args[0]), ctx.type_of(node.args[1])
    slope = ctx.name_of(node.args[1])
    if w.rank == 1 and w.numel > 1 and x.rank >= 2:  # one slope per channel (axis 1)
        per_channel = w.with_shape((w.numel,) + (1,) * (x.rank - 2))
        slope = ctx.step(node, "reshape", [slope], per_channel, {"shape": per_channel.shape})
    ctx.emit(node, "prelu", [ctx.name_of(node.args[0]), slope])


def _constant_indices(ctx: TorchContext, node: Any, lead: tuple[int, ...]) -> np.ndarray:
    """The flat positions (row-major over `lead`) the constant index tensors select."""
    arrays = []
    for index in node.args[1]:
        value = None if index is None else ctx.draft.constants.get(ctx.name_of(index))
        if index is None:
            raise unsupported(node, "a slice before an index tensor is not supported")
        if value is None:
            raise unsupported(node, "an index computed at run time (only constant indices map)")
        if value.dtype == np.bool_:
            raise unsupported(node, "boolean mask indexing is not supported")
        arrays.append(value.astype(np.int64))
    try:
        arrays = list(np.broadcast_arrays(*arrays))
    except ValueError:
        raise unsupported(node, "index tensors that do not broadcast") from None
    for a, (axis, size) in zip(arrays, enumerate(lead)):
        if a.size and (a.min() < -size or a.max() >= size):
            raise unsupported(node, f"an index out of range for axis {axis} of size {size}")
    normalized = tuple(np.where(a < 0, a + size, a) for a, size in zip(arrays, lead))
    return np.ravel_multi_index(normalized, lead) if lead else np.zeros((), np.int64)


def _index(ctx: TorchContext, node: Any) -> None:
    """x[i0, .., ik-1] with constant indices (HF attention masks index the padding mask so)."""
    x, out = ctx.type_of(node.args[0]), ctx.result_type(node)
    lead = x.shape[: len(node.args[1])]
    flat = _constant_indices(ctx, node, lead)
    width = math.prod(x.shape[len(lead) :])
    table = x.with_shape((math.prod(lead), width))
    rows = ctx.step(node, "reshape", [ctx.name_of(node.args[0])], table, {"shape": table.shape})
    ids = ctx.draft.constant(flat.astype(np.int64), "index")
    picked = TensorType(x.dtype, (*ctx.draft.type_of(ids).shape, width))
    gathered = ctx.step(node, "get_rows", [rows, ids], picked)
    ctx.emit(node, "reshape", [gathered], {"shape": out.shape})


INDEXING_CONVERTERS: dict[str, Converter] = {
    "aten._prelu_kernel.default": _prelu,
    "aten.argmax.default": _argmax,
    "aten.constant_pad_nd.default": _constant_pad,
    "aten.cumsum.default": _cumsum,
    "aten.expand.default": _expand,
    "aten.index.Tensor": _index,
    "aten.prelu.default": _prelu,
    "aten.repeat.default": _repeat,
}
