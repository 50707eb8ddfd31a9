"""ONNX convolutions, pools, batch and instance normalization -> IR nodes (2-D, NCHW; a 1-D Conv
as a conv2d of height 1)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optgraph.frontends.conv1d_group_norm import conv1d, group_norm
from optgraph.frontends.onnx_context import Converter, OnnxContext
from optgraph.ir.graph import AttrValue


def _symmetric_pads(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> tuple[int, int]:
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
        raise ctx.error(node, "auto_pad SAME_* is not supported (give explicit pads)")
    pads = [int(p) for p in attrs.get("pads", (0, 0, 0, 0))]
    if len(pads) != 4 or pads[:2] != pads[2:]:
        raise ctx.error(node, f"only 2-D symmetric pads are supported, got {pads}")
    return pads[0], pads[1]


def _conv(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    if any(int(d) != 1 for d in attrs.get("dilations", (1, 1))):
        raise ctx.error(node, "dilated convolutions are not supported")
    if ctx.type_of(node.input[0]).rank == 3:
        _conv1d(ctx, node, attrs)
        return
    if ctx.type_of(node.input[0]).rank != 4:
        raise ctx.error(node, "only 1-D (NCL) and 2-D (NCHW) convolutions are supported")
    out: dict[str, AttrValue] = {
        "stride": tuple(int(s) for s in attrs.get("strides", (1, 1))),
        "padding": _symmetric_pads(ctx, node, attrs),
        "groups": int(attrs.get("group", 1)),
    }
    ctx.emit(node, "conv2d", [ctx.name(i) for i in node.input if i], out)


def _conv1d(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    """A 1-D Conv (`conv1d_group_norm.conv1d`: a conv2d of height 1)."""
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
        raise ctx.error(node, "auto_pad SAME_* is not supported (give explicit pads)")
    pads = [int(p) for p in attrs.get("pads", (0, 0))]
    if len(pads) != 2 or pads[0] != pads[1]:
        raise ctx.error(node, f"only symmetric pads are supported, got {pads}")
    x, w = ((ctx.name(i), ctx.type_of(i)) for i in node.input[:2])
    if w[1].rank != 3:
        raise ctx.error(node, f"expected a [O, C/g, K] weight, got {w[1]}")
    bias = ctx.name(node.input[2]) if len(node.input) > 2 and node.input[2] else None
    conv = (int(attrs.get("strides", (1,))[0]), pads[0], int(attrs.get("group", 1)))
    conv1d(ctx.emitter(node), x, w, bias, conv)


def _instance_norm(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    """InstanceNormalization(x, scale, B): a group norm of one channel a group
    (`conv1d_group_norm.group_norm`; how the exporter writes GroupNorm: wav2vec2)."""
    x = ctx.type_of(node.input[0])
    if x.rank < 3:
        raise ctx.error(node, f"expected [N, C, ...], got {x}")
    affine = (ctx.name(node.input[1]), ctx.name(node.input[2]))
    eps = float(attrs.get("epsilon", 1e-5))
    group_norm(ctx.emitter(node), (ctx.name(node.input[0]), x), x.shape[1], eps, affine)


def _pool(op: str) -> Converter:
    def convert(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
        if attrs.get("ceil_mode", 0) or any(int(d) != 1 for d in attrs.get("dilations", (1, 1))):
            raise ctx.error(node, "pooling with ceil_mode or dilations is not supported")
        padding = _symmetric_pads(ctx, node, attrs)
        if op == "avg_pool2d" and padding != (0, 0) and attrs.get("count_include_pad", 0):
            raise ctx.error(node, "padded average pooling with count_include_pad is not supported")
        kernel = tuple(int(k) for k in attrs["kernel_shape"])
        stride = tuple(int(s) for s in attrs.get("strides", (1, 1)))
        ctx.emit(node, op, [ctx.name(node.input[0])],
                 {"kernel": kernel, "stride": stride, "padding": padding})  # fmt: skip

    return convert


def _global_average_pool(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    ctx.emit(node, "mean", [ctx.name(node.input[0])], {"axes": (2, 3), "keepdims": True})


def _batch_norm(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    """(x - mean) · scale / sqrt(var + eps) + b, on the real weights."""
    x, scale, bias, mean, var = (ctx.name(i) for i in node.input[:5])
    rank = ctx.type_of(node.input[0]).rank
    channels = ctx.type_of(node.input[0]).shape[1]
    shaped = {"shape": (channels,) + (1,) * (rank - 2)}
    eps = ctx.scalar_like(float(attrs.get("epsilon", 1e-5)), var)
    factor = ctx.step(node, "rsqrt", [ctx.step(node, "add", [var, eps])])
    factor = ctx.step(node, "reshape", [ctx.step(node, "mul", [factor, scale])], shaped)
    centered = ctx.step(node, "sub", [x, ctx.step(node, "reshape", [mean], shaped)])
    scaled = ctx.step(node, "mul", [centered, factor])
    ctx.emit(node, "add", [scaled, ctx.step(node, "reshape", [bias], shaped)])


IMAGE_CONVERTERS: dict[str, Converter] = {
    "AveragePool": _pool("avg_pool2d"),
    "BatchNormalization": _batch_norm,
    "Conv": _conv,
    "InstanceNormalization": _instance_norm,
    "GlobalAveragePool": _global_average_pool,
    "MaxPool": _pool("max_pool2d"),
}
