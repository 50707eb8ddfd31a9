"""ATen convolutions, pools, inference batch norm, group norm, the 2-norm, upsampling and the hard
activations -> IR nodes (NCHW, 2-D; a conv1d as a conv2d of height 1).

    F.interpolate(x, scale_factor=2, mode="nearest")   -> resize {size}             (floor(y·r))
    F.interpolate(x, size, mode="nearest-exact")       -> resize {coordinates = "half_pixel",
                                                          nearest = "round_prefer_ceil"}
    F.interpolate(x, size, mode="bilinear")            -> resize {mode = "linear",
                                                          coordinates = "half_pixel"} (or
                                                          "align_corners")
    F.hardsigmoid(x), F.hardswish(x)                   -> `hard_activations`

Not mapped: 1-D and 3-D upsampling, bicubic, antialiased resampling."""

from __future__ import annotations

from typing import Any

import numpy as np

from optgraph.frontends.conv1d_group_norm import conv1d, group_norm
from optgraph.frontends.hard_activations import hard_sigmoid
from optgraph.frontends.torch_values import Converter, TorchContext, arg, unsupported, value_type
from optgraph.ir.graph import AttrValue, TensorType
from optgraph.reference.kernels import numpy_dtype


def _pair(value: Any) -> tuple[int, int]:
    items = [int(v) for v in (value if isinstance(value, (list, tuple)) else [value])]
    return (items[0], items[-1])


def _conv2d(ctx: TorchContext, node: Any) -> None:
    if _pair(arg(node, 5, "dilation", 1)) != (1, 1):
        raise unsupported(node, "dilated convolutions are not supported")
    padding = arg(node, 4, "padding", 0)
    if isinstance(padding, str):
        raise unsupported(node, f"padding '{padding}' is not supported (give it as numbers)")
    operands = [ctx.name_of(node.args[0]), ctx.name_of(node.args[1])]
    bias = arg(node, 2, "bias")
    if bias is not None:
        operands.append(ctx.name_of(bias))
    attrs: dict[str, AttrValue] = {
        "stride": _pair(arg(node, 3, "stride", 1)),
        "padding": _pair(padding),
        "groups": int(arg(node, 6, "groups", 1)),
    }
    ctx.emit(node, "conv2d", operands, attrs)


def _conv1d(ctx: TorchContext, node: Any) -> None:
    """F.conv1d (`conv1d_group_norm.conv1d`: a conv2d of height 1)."""
    if int(_pair(arg(node, 5, "dilation", 1))[0]) != 1:
        raise unsupported(node, "dilated convolutions are not supported")
    padding = arg(node, 4, "padding", 0)
    if isinstance(padding, str):
        raise unsupported(node, f"padding '{padding}' is not supported (give it as numbers)")
    x, w = ctx.type_of(node.args[0]), ctx.type_of(node.args[1])
    if x.rank != 3 or w.rank != 3:
        raise unsupported(node, f"conv1d of {x} by {w} (expected [N, C, L] and [O, C/g, K])")
    bias = arg(node, 2, "bias")
    stride, groups = _pair(arg(node, 3, "stride", 1))[0], int(arg(node, 6, "groups", 1))
    conv1d(
        ctx.emitter(node),
        (ctx.name_of(node.args[0]), x),
        (ctx.name_of(node.args[1]), w),
        None if bias is None else ctx.name_of(bias),
        (stride, _pair(padding)[0], groups),
    )


def _group_norm(ctx: TorchContext, node: Any) -> None:
    """F.group_norm(x, G, w, b, eps) (`conv1d_group_norm.group_norm`)."""
    x = ctx.type_of(node.args[0])
    groups = int(node.args[1])
    if x.rank < 2 or x.shape[1] % groups:
        raise unsupported(node, f"a group norm of {x} in {groups} groups")
    scale, shift = arg(node, 2, "weight"), arg(node, 3, "bias")
    affine = (
        None if scale is None else ctx.name_of(scale),
        None if shift is None else ctx.name_of(shift),
    )
    eps = float(arg(node, 4, "eps", 1e-5))
    group_norm(ctx.emitter(node), (ctx.name_of(node.args[0]), x), groups, eps, affine)


def _vector_norm(ctx: TorchContext, node: Any) -> None:
    """torch.linalg.vector_norm(x, 2, dims, keepdim) = sqrt(sum(x · x)) (wav2vec2's weight norm)."""
    if float(arg(node, 1, "ord", 2)) != 2.0:
        raise unsupported(node, "a vector norm other than the 2-norm")
    x = ctx.type_of(node.args[0])
    dims = arg(node, 2, "dim")
    axes = tuple(range(x.rank)) if dims is None else tuple(int(d) % x.rank for d in dims)
    keep = bool(arg(node, 3, "keepdim", False))
    name = ctx.name_of(node.args[0])
    squares = ctx.step(node, "mul", [name, name], x)
    total = ctx.result_type(node)
    summed = ctx.step(node, "sum", [squares], total, {"axes": axes, "keepdims": keep})
    ctx.emit(node, "sqrt", [summed])


def _max_pool2d(ctx: TorchContext, node: Any) -> None:
    kernel = _pair(node.args[1])
    stride = arg(node, 2, "stride") or kernel
    if _pair(arg(node, 4, "dilation", 1)) != (1, 1) or arg(node, 5, "ceil_mode", False):
        raise unsupported(node, "max pooling with dilation or ceil_mode is not supported")
    attrs = {
        "kernel": kernel,
        "stride": _pair(stride),
        "padding": _pair(arg(node, 3, "padding", 0)),
    }
    out = ctx.result_type(node) if "with_indices" not in str(node.target) else None
    if out is None:
        out = value_type(node, node.meta["val"][0])
    name = ctx.draft.node("max_pool2d", [ctx.name_of(node.args[0])], out, attrs,
                          name=node.name)  # fmt: skip
    ctx.values[node.name] = name
    ctx.values[f"{node.name}#0"] = name


def _avg_pool2d(ctx: TorchContext, node: Any) -> None:
    kernel = _pair(node.args[1])
    padding = _pair(arg(node, 3, "padding", 0))
    if arg(node, 4, "ceil_mode", False) or arg(node, 6, "divisor_override") is not None:
        raise unsupported(node, "average pooling with ceil_mode or divisor_override")
    if padding != (0, 0) and arg(node, 5, "count_include_pad", True):
        raise unsupported(node, "padded average pooling must set count_include_pad=False")
    stride = arg(node, 2, "stride") or kernel
    attrs = {"kernel": kernel, "stride": _pair(stride), "padding": padding}
    ctx.emit(node, "avg_pool2d", [ctx.name_of(node.args[0])], attrs)


def _adaptive_avg_pool2d(ctx: TorchContext, node: Any) -> None:
    if _pair(node.args[1]) != (1, 1):
        raise unsupported(node, "adaptive average pooling to a size other than 1x1")
    ctx.emit(node, "mean", [ctx.name_of(node.args[0])], {"axes": (2, 3), "keepdims": True})


def _batch_norm(ctx: TorchContext, node: Any) -> None:
    """Inference batch norm as elementwise ops on the real weights: (x - mean)·w/√(var+eps) + b."""
    x = ctx.type_of(node.args[0])
    w, b, mean, var = (arg(node, i, k) for i, k in ((1, "weight"), (2, "bias"), (3, "running_mean"),
                                                    (4, "running_var")))  # fmt: skip
    eps = float(node.args[-1] if "legit" in str(node.target) else arg(node, 7, "eps", 1e-5))
    channel = TensorType(x.dtype, (x.shape[1],))
    shaped = TensorType(x.dtype, (x.shape[1],) + (1,) * (x.rank - 2))
    eps_name = ctx.draft.constant(np.array(eps, dtype=numpy_dtype(x.dtype)))
    shifted = ctx.step(node, "add", [ctx.name_of(var), eps_name], channel)
    factor = ctx.step(node, "rsqrt", [shifted], channel)
    if w is not None:
        factor = ctx.step(node, "mul", [factor, ctx.name_of(w)], channel)
    factor = ctx.step(node, "reshape", [factor], shaped, {"shape": shaped.shape})
    center = ctx.step(node, "reshape", [ctx.name_of(mean)], shaped, {"shape": shaped.shape})
    centered = ctx.step(node, "sub", [ctx.name_of(node.args[0]), center], x)
    if b is None:
        name = ctx.emit(node, "mul", [centered, factor], result=x)
    else:
        scaled = ctx.step(node, "mul", [centered, factor], x)
        bias = ctx.step(node, "reshape", [ctx.name_of(b)], shaped, {"shape": shaped.shape})
        name = ctx.emit(node, "add", [scaled, bias], result=x)
    ctx.values[f"{node.name}#0"] = name


def _hard(swish: bool) -> Converter:
    """F.hardsigmoid / F.hardswish (`hard_activations`), kept whole at export."""

    def convert(ctx: TorchContext, node: Any) -> None:
        x = (ctx.name_of(node.args[0]), ctx.type_of(node.args[0]))
        hard_sigmoid(ctx.emitter(node), x, swish=swish)

    return convert


def _scale_factors(node: Any, value: Any, keys: tuple[str, str]) -> tuple[Any, Any]:
    """The (h, w) scale factors an upsample was given: a `.vec` list or `.default` scalars."""
    if value is not None:
        return tuple(value) if len(value) == 2 else (value[0], value[0])
    return arg(node, 2, keys[0]), arg(node, 3, keys[1])


def _resize_attrs(
    node: Any, x: TensorType, out: TensorType, scales: tuple[Any, Any], **attrs: AttrValue
) -> dict[str, AttrValue]:
    """resize's attributes: the output size, and a given scale factor where its coordinate map
    differs from the sizes' ratio (torch maps with the factor it was given)."""
    if x.rank != 4:
        raise unsupported(node, f"upsampling of {x} (only [N, C, H, W] is supported)")
    defaults = {"coordinates": "asymmetric", "mode": "nearest", "nearest": "floor"}
    out_attrs: dict[str, AttrValue] = {"size": out.shape[2:]}
    out_attrs.update((k, v) for k, v in attrs.items() if defaults.get(k) != v)
    for key, scale, before, after in zip(
        ("scale_h", "scale_w"), scales, x.shape[2:], out.shape[2:]
    ):
        if scale is not None and float(scale) > 0 and float(scale) * before != after:
            out_attrs[key] = float(scale)
    return out_attrs


def _upsample(coordinates: str, nearest: str) -> Converter:
    """F.interpolate(mode = "nearest" | "nearest-exact"): aten.upsample_nearest2d (`floor(y·r)`),
    aten._upsample_nearest_exact2d (`floor((y + 0.5)·r)`) -> resize."""

    def convert(ctx: TorchContext, node: Any) -> None:
        x, out = ctx.type_of(node.args[0]), ctx.result_type(node)
        vec = str(node.target).endswith(".vec")
        scales = _scale_factors(node, arg(node, 2, "scale_factors") if vec else None,
                                ("scales_h", "scales_w"))  # fmt: skip
        attrs = _resize_attrs(node, x, out, scales, coordinates=coordinates, nearest=nearest)
        ctx.emit(node, "resize", [ctx.name_of(node.args[0])], attrs)

    return convert


def _upsample_bilinear(ctx: TorchContext, node: Any) -> None:
    """F.interpolate(mode = "bilinear", align_corners) -> resize {mode = "linear"}; antialias
    (a separate ATen op) is not mapped."""
    x, out = ctx.type_of(node.args[0]), ctx.result_type(node)
    corners = bool(arg(node, 2, "align_corners", False))
    if str(node.target).endswith(".vec"):
        scales = _scale_factors(node, arg(node, 3, "scale_factors"), ("", ""))
    else:
        scales = (arg(node, 3, "scales_h"), arg(node, 4, "scales_w"))
    coordinates = "align_corners" if corners else "half_pixel"
    attrs = _resize_attrs(node, x, out, (None, None) if corners else scales,
                          mode="linear", coordinates=coordinates)  # fmt: skip
    ctx.emit(node, "resize", [ctx.name_of(node.args[0])], attrs)


IMAGE_CONVERTERS: dict[str, Converter] = {
    "aten._native_batch_norm_legit_no_training.default": _batch_norm,
    "aten.adaptive_avg_pool2d.default": _adaptive_avg_pool2d,
    "aten.avg_pool2d.default": _avg_pool2d,
    "aten.batch_norm.default": _batch_norm,
    "aten.conv1d.default": _conv1d,
    "aten.conv2d.default": _conv2d,
    "aten._upsample_nearest_exact2d.default": _upsample("half_pixel", "round_prefer_ceil"),
    "aten._upsample_nearest_exact2d.vec": _upsample("half_pixel", "round_prefer_ceil"),
    "aten.group_norm.default": _group_norm,
    "aten.hardsigmoid.default": _hard(swish=False),
    "aten.hardswish.default": _hard(swish=True),
    "aten.linalg_vector_norm.default": _vector_norm,
    "aten.max_pool2d.default": _max_pool2d,
    "aten.max_pool2d_with_indices.default": _max_pool2d,
    "aten.upsample_bilinear2d.default": _upsample_bilinear,
    "aten.upsample_bilinear2d.vec": _upsample_bilinear,
    "aten.upsample_nearest2d.default": _upsample("asymmetric", "floor"),
    "aten.upsample_nearest2d.vec": _upsample("asymmetric", "floor"),
}
