"""ONNX convolutions, pools, batch and instance normalization, Resize, HardSigmoid and HardSwish
-> IR nodes (2-D, NCHW; a 1-D Conv as a conv2d of height 1).

    Resize(x, roi, scales = [1, 1, 2, 2]) {mode = "nearest", coordinate_transformation_mode =
    "asymmetric", nearest_mode = "floor"}   -> resize {size = [2H, 2W]}
    Resize(x, sizes) {mode = "linear"}      -> resize {coordinates = "half_pixel", mode =
                                               "linear", size}

Resize: a given scale factor is the coordinate map's (`scale_h`, `scale_w` where it differs from
the sizes' ratio), applied as a product by 1 / scale in float32 (PyTorch's arithmetic; ONNX's
evaluator divides by the scale in float64: a nearest row may differ where the two round to
either side of a whole number). Refused, each named: cubic, tf_crop_and_resize and
half_pixel_symmetric, antialiased downsampling, keep_aspect_ratio_policy, resizing N or C,
other ranks, non-constant scales or sizes, opsets before 11."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

from optgraph.frontends.conv1d_group_norm import conv1d, group_norm
from optgraph.frontends.hard_activations import SIXTH, hard_sigmoid
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
    x, *rest = (ctx.name(i) for i in node.input if i)
    padding, x = _conv_pads(ctx, node, attrs, x)
    out: dict[str, AttrValue] = {
        "stride": tuple(int(s) for s in attrs.get("strides", (1, 1))),
        "padding": padding,
        "groups": int(attrs.get("group", 1)),
    }
    ctx.emit(node, "conv2d", [x, *rest], out)


def _conv_pads(
    ctx: OnnxContext, node: Any, attrs: Mapping[str, Any], x: str
) -> tuple[tuple[int, int], str]:
    """(conv2d's symmetric padding, its input): pads that differ before and after (TF's "same"
    padding, a `F.pad` the exporter folded into the Conv: MobileNetV2) keep their common part
    as the padding and pad the rest with zeros first."""
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
        raise ctx.error(node, "auto_pad SAME_* is not supported (give explicit pads)")
    pads = [int(p) for p in attrs.get("pads", (0, 0, 0, 0))]
    if len(pads) != 4 or min(pads) < 0:
        raise ctx.error(node, f"only 2-D non-negative pads are supported, got {pads}")
    common = (min(pads[0], pads[2]), min(pads[1], pads[3]))
    extra = [p - c for p, c in zip(pads, common * 2)]
    if any(extra):
        spread = (0, 0, extra[0], extra[1], 0, 0, extra[2], extra[3])
        x = ctx.step(node, "pad", [x], {"pads": spread, "value": 0.0})
    return common, x


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


def _text(attrs: Mapping[str, Any], key: str, default: str) -> str:
    value = attrs.get(key, default)
    return value.decode() if isinstance(value, bytes) else str(value)


_COORDINATES = ("asymmetric", "half_pixel", "pytorch_half_pixel", "align_corners")
_NEAREST_MODES = ("floor", "ceil", "round_prefer_floor", "round_prefer_ceil")


def _resize_sizes(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> tuple[
    tuple[int, int], tuple[float | None, float | None]
]:  # fmt: skip
    """((Ho, Wo), the scale factors given) of a Resize of `[N,C,H,W]` (opset 11+: X, roi,
    scales, sizes), from its constant scales or sizes."""
    x = ctx.type_of(node.input[0])
    if x.rank != 4:
        raise ctx.error(node, f"only [N, C, H, W] resizing is supported, got {x}")
    axes = attrs.get("axes")
    if axes is not None and sorted(int(a) % 4 for a in axes) != [2, 3]:
        raise ctx.error(node, f"only resizing the last two axes is supported (axes {list(axes)})")

    def given(index: int) -> list[float] | None:
        """Input `index`'s values (a constant or an initializer), in axis order."""
        if len(node.input) <= index or not node.input[index]:
            return None
        name = ctx.name(node.input[index])
        known = ctx.draft.constants.get(name, ctx.draft.weights.get(name))
        if known is None:
            raise ctx.error(node, f"input {index} (scales or sizes) must be a constant")
        values = [float(v) for v in known.reshape(-1)]
        if values and axes is not None and len(values) == len(axes):  # listed by `axes`
            by_axis = dict(zip((int(a) % 4 for a in axes), values))
            values = [by_axis[2], by_axis[3]]
        return values or None

    scales, sizes = given(2), given(3)
    if (scales is None) == (sizes is None):
        raise ctx.error(node, "exactly one of scales and sizes must be given")
    if scales is not None:
        spatial = scales[-2:]
        if len(scales) == 4 and scales[:2] != [1.0, 1.0]:
            raise ctx.error(node, f"only the last two axes may be resized (scales {scales})")
        out = tuple(math.floor(d * f) for d, f in zip(x.shape[2:], spatial))
        return (out[0], out[1]), (spatial[0], spatial[1])
    assert sizes is not None
    if _text(attrs, "keep_aspect_ratio_policy", "stretch") != "stretch":
        raise ctx.error(node, "keep_aspect_ratio_policy other than 'stretch' is not supported")
    if len(sizes) == 4 and [int(v) for v in sizes[:2]] != list(x.shape[:2]):
        raise ctx.error(node, f"only the last two axes may be resized (sizes {sizes})")
    return (int(sizes[-2]), int(sizes[-1])), (None, None)


def _resize(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    """Resize (opsets 11+) -> resize: modes nearest and linear; coordinate transformation modes
    asymmetric, half_pixel, pytorch_half_pixel, align_corners; every nearest_mode."""
    if ctx.opset < 11:
        raise ctx.error(node, "Resize before opset 11 is not supported")
    mode = _text(attrs, "mode", "nearest")
    coordinates = _text(attrs, "coordinate_transformation_mode", "half_pixel")
    nearest = _text(attrs, "nearest_mode", "round_prefer_floor")
    if mode not in ("nearest", "linear"):
        raise ctx.error(node, f"mode '{mode}' is not supported (nearest and linear are)")
    if coordinates not in _COORDINATES:
        raise ctx.error(node, f"coordinate_transformation_mode '{coordinates}' is not supported")
    if nearest not in _NEAREST_MODES:
        raise ctx.error(node, f"nearest_mode '{nearest}' is not supported")
    size, scales = _resize_sizes(ctx, node, attrs)
    x = ctx.type_of(node.input[0])
    if attrs.get("antialias", 0) and (size[0] < x.shape[2] or size[1] < x.shape[3]):
        raise ctx.error(node, "antialiased downsampling is not supported")
    out: dict[str, AttrValue] = {"size": size}
    for key, scale, before, after in zip(("scale_h", "scale_w"), scales, x.shape[2:], size):
        if scale is not None and scale * before != after:
            if coordinates == "align_corners":
                raise ctx.error(node, f"align_corners with scale {scale} of {before} rows")
            out[key] = scale
    defaults = {"mode": "nearest", "coordinates": "asymmetric", "nearest": "floor"}
    chosen = {"mode": mode, "coordinates": coordinates, "nearest": nearest}
    if mode == "linear":
        chosen.pop("nearest")
    out.update((k, v) for k, v in chosen.items() if defaults[k] != v)
    ctx.emit(node, "resize", [ctx.name(node.input[0])], out)


def _hard(swish: bool) -> Converter:
    """HardSigmoid(alpha, beta), HardSwish (`hard_activations`)."""

    def convert(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
        x = (ctx.name(node.input[0]), ctx.type_of(node.input[0]))
        alpha = SIXTH if swish else float(attrs.get("alpha", 0.2))
        beta = 0.5 if swish else float(attrs.get("beta", 0.5))
        hard_sigmoid(ctx.emitter(node), x, alpha, beta, swish=swish)

    return convert


IMAGE_CONVERTERS: dict[str, Converter] = {
    "AveragePool": _pool("avg_pool2d"),
    "BatchNormalization": _batch_norm,
    "Conv": _conv,
    "InstanceNormalization": _instance_norm,
    "GlobalAveragePool": _global_average_pool,
    "HardSigmoid": _hard(swish=False),
    "HardSwish": _hard(swish=True),
    "MaxPool": _pool("max_pool2d"),
    "Resize": _resize,
}
