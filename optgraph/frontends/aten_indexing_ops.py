"""ATen indexing ops -> IR `expand`, `tile`, `pad`, `cumsum`, `argmax`, `prelu`.

    x.expand(2, -1, 4)              aten.expand           -> expand {shape}  (the export's shape)
    x.repeat(1, 2)                  aten.repeat           -> tile {repeats} (after a reshape when
                                                             repeats has more axes than x)
    F.pad(x, (1, 2))                aten.constant_pad_nd  -> pad {pads} (ATen's last-axis-first
                                                             pairs turned into ONNX order)
    x.cumsum(1), x.argmax(-1)       -> cumsum {axis}, argmax {axis, keepdims}
    F.prelu(x, w)                   aten._prelu_kernel    -> prelu, w [C] reshaped to [C,1,..]

Refused with their reason: negative pads (cropping), argmax without a dim (of the flattened
tensor), a cumsum that changes dtype.
"""

from __future__ import annotations

from typing import Any

from optgraph.frontends.torch_values import Converter, TorchContext, arg, unsupported
from optgraph.ir.graph import AttrValue


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


INDEXING_CONVERTERS: dict[str, Converter] = {
    "aten._prelu_kernel.default": _prelu,
    "aten.argmax.default": _argmax,
    "aten.constant_pad_nd.default": _constant_pad,
    "aten.cumsum.default": _cumsum,
    "aten.expand.default": _expand,
    "aten.prelu.default": _prelu,
    "aten.repeat.default": _repeat,
}
