"""resize (`ir/op_rules_image.py`): nearest and bilinear resampling of `[N,C,H,W]`, a thread
per output element, with the reference's float32 arithmetic (`reference/image.py`) spelled in
round-to-nearest intrinsics so nvcc contracts nothing into an fma: the same source rows and
columns, the same blend, so the emulator's results equal the reference's bits.

    %y = resize(%x) {size = [8, 8]} : f32[1,2,8,8]               (x : f32[1,2,4,4])
    ->  sy = __fmul_rn((float)oy, 5.0e-01f); row = clamp((int)floorf(sy), 0, 3); ...
        out[i] = in0[plane * 16u + row * 4u + col]

The ratios (input rows per output row, or 1 / the given scale) are computed on the host in
float32 and written as exact literals. Not done: reading each input row once for several outputs
(the upsamplers of diffusion models read every input pixel 4 times; a tile would read it once).
"""

from __future__ import annotations

import numpy as np

from optgraph.codegen.cuda_source import (
    Launch,
    f32_literal,
    grid_1d,
    in_param,
    index_type,
    load,
    make_kernel,
    out_param,
    store,
)
from optgraph.ir.graph import AttrValue, Node, TensorType
from optgraph.ir.ops import attrs_with_defaults
from optgraph.reference.image import ratio

OPS = frozenset({"resize"})


def _source(axis: str, in_len: int, out_len: int, scale: AttrValue | None, coords: str) -> str:
    """C expression: the float32 source coordinate of output index `axis`."""
    position = f"(float){axis}"
    if coords == "align_corners" or (coords == "pytorch_half_pixel" and out_len == 1):
        if out_len == 1:
            return "0.0f"
        step = np.float32(in_len - 1) / np.float32(out_len - 1)
        return f"__fmul_rn({position}, {f32_literal(float(step))})"
    r = f32_literal(float(ratio(in_len, out_len, scale)))
    if coords == "asymmetric":
        return f"__fmul_rn({position}, {r})"
    return f"__fsub_rn(__fmul_rn(__fadd_rn({position}, 0.5f), {r}), 0.5f)"


_ROUNDING = {
    "floor": "floorf({0})",
    "ceil": "ceilf({0})",
    "round_prefer_floor": "ceilf(__fsub_rn({0}, 0.5f))",
    "round_prefer_ceil": "floorf(__fadd_rn({0}, 0.5f))",
}


def _nearest(name: str, src: str, in_len: int, mode: str) -> list[str]:
    rounded = _ROUNDING[mode].format(src)
    return [f"const int {name} = og_min(og_max((int){rounded}, 0), {in_len - 1});"]


def _taps(name: str, src: str, in_len: int) -> list[str]:
    """`{name}0`, `{name}1` (the rows around the coordinate) and `{name}w` (the second's weight)."""
    return [
        f"const float {name}s = fminf(fmaxf({src}, 0.0f), {float(in_len - 1)!r}f);",
        f"const int {name}0 = (int)floorf({name}s);",
        f"const int {name}1 = og_min({name}0 + 1, {in_len - 1});",
        f"const float {name}w = __fsub_rn({name}s, (float){name}0);",
    ]


def _blend(name: str, w0: str, a: str, w1: str, b: str) -> str:
    return f"const float {name} = __fadd_rn(__fmul_rn({w0}, {a}), __fmul_rn({w1}, {b}));"


def emit(node: Node, types: tuple[TensorType, ...], *, in_place: bool = False) -> list[Launch]:
    assert node.type is not None
    x, out = types[0], node.type
    attrs = attrs_with_defaults(node)
    _, _, h, w = x.shape
    oh, ow = out.shape[2:]
    coords, mode = str(attrs["coordinates"]), str(attrs["mode"])
    idx = index_type(max(out.numel, x.numel))
    sy = _source("oy", h, oh, attrs.get("scale_h"), coords)
    sx = _source("ox", w, ow, attrs.get("scale_w"), coords)
    lines = [
        (
            f"for ({idx} i = ({idx})blockIdx.x * blockDim.x + threadIdx.x; i < {out.numel}u;"
            f" i += ({idx})gridDim.x * blockDim.x) {{"
        ),
        f"  const int ox = (int)(i % {ow}u), oy = (int)((i / {ow}u) % {oh}u);",
        f"  const {idx} base = (i / {oh * ow}u) * {h * w}u;",
    ]

    def at(row: str, col: str) -> str:
        return load(x.dtype, f"in0[base + ({idx})({row} * {w} + {col})]")

    if mode == "nearest":
        body = _nearest("row", sy, h, str(attrs["nearest"]))
        body += _nearest("col", sx, w, str(attrs["nearest"]))
        body.append(f"out[i] = {store(out.dtype, at('row', 'col'))};")
    else:
        body = _taps("r", sy, h) + _taps("c", sx, w)
        body += [
            "const float c0w = __fsub_rn(1.0f, cw), r0w = __fsub_rn(1.0f, rw);",
            _blend("upper", "c0w", at("r0", "c0"), "cw", at("r0", "c1")),
            _blend("lower", "c0w", at("r1", "c0"), "cw", at("r1", "c1")),
            f"out[i] = {store(out.dtype, '__fadd_rn(__fmul_rn(r0w, upper), __fmul_rn(rw, lower))')};",
        ]
    lines += ["  " + line for line in body] + ["}"]
    kernel = make_kernel("resize", [out_param(out.dtype), in_param(x.dtype, 0)],
                         "\n".join("  " + s for s in lines))  # fmt: skip
    grid, block = grid_1d(out.numel)
    return [Launch(kernel, grid, block, ("out", "in0"))]
