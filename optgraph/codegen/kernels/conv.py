"""conv2d (direct, any stride, padding and groups) and max/avg pooling, NCHW.

A thread per output element `(n, o, y, x)` loops over its group's input channels and the kernel
window with float32 accumulation, then adds the bias, like the reference (window sums first, bias
last). Pools follow the reference conventions: max ignores padding (padded cells are -inf), avg
divides by the number of in-bounds cells of the window.

    %c = conv2d(%x, %w, %b) {padding = [1, 1]} : f32[1,24,16,16]   (w : f32[24,16,3,3])
    ->  one thread per output: acc = sum_{c<16, ky<3, kx<3} x[...] * w[...];  out = acc + b[o]

Direct convolution is right for the small feature maps of the examples; large convolutions would
want implicit GEMM (not done).
"""

from __future__ import annotations

from collections.abc import Sequence

from optgraph.codegen.cuda_source import (
    Launch,
    grid_1d,
    in_param,
    index_type,
    load,
    lowest,
    make_kernel,
    out_param,
    store,
)
from optgraph.ir.attrs import int_attr
from optgraph.ir.graph import Node, TensorType
from optgraph.ir.ops import attrs_with_defaults

OPS = frozenset({"conv2d", "max_pool2d", "avg_pool2d"})


def _pair(value: object) -> tuple[int, int]:
    assert isinstance(value, tuple) and len(value) == 2
    return int(value[0]), int(value[1])


def _output_coords(out: TensorType, idx: str) -> list[str]:
    _, c, oh, ow = out.shape
    n = out.numel
    return [
        (
            f"for ({idx} i = ({idx})blockIdx.x * blockDim.x + threadIdx.x; i < {n}u;"
            f" i += ({idx})gridDim.x * blockDim.x) {{"
        ),
        f"  const int ox = (int)(i % {ow}u), oy = (int)((i / {ow}u) % {oh}u);",
        f"  const {idx} ch = (i / {oh * ow}u) % {c}u, nb = i / {c * oh * ow}u;",
    ]


def emit(node: Node, types: tuple[TensorType, ...], *, in_place: bool = False) -> list[Launch]:
    if node.op == "conv2d":
        return emit_roles(node, types, tuple(f"in{k}" for k in range(len(types))))
    return [_pool(node, types[0])]


def emit_roles(node: Node, types: Sequence[TensorType], roles: Sequence[str]) -> list[Launch]:
    """The conv2d kernel reading its operands from `roles` (a fused product passes its own)."""
    assert node.type is not None
    out = node.type
    x, w = types[0], types[1]
    attrs = attrs_with_defaults(node)
    (sh, sw), (ph, pw) = _pair(attrs["stride"]), _pair(attrs["padding"])
    groups = int_attr(attrs, "groups")
    _, c_in, h, wd = x.shape
    o, cg, kh, kw = w.shape
    og = o // groups
    idx = index_type(max(out.numel, x.numel, w.numel))
    lines = _output_coords(out, idx)
    lines += [
        f"  const {idx} g = ch / {og}u;",
        "  float acc = 0.0f;",
        f"  for ({idx} c = 0; c < {cg}u; ++c) {{",
        f"    const {idx} xc = (nb * {c_in}u + g * {cg}u + c) * {h * wd}u;",
        f"    const {idx} wc = (ch * {cg}u + c) * {kh * kw}u;",
        f"    for (int ky = 0; ky < {kh}; ++ky) {{",
        f"      const int iy = oy * {sh} - {ph} + ky;",
        f"      if (iy < 0 || iy >= {h}) continue;",
        f"      for (int kx = 0; kx < {kw}; ++kx) {{",
        f"        const int ix = ox * {sw} - {pw} + kx;",
        f"        if (ix < 0 || ix >= {wd}) continue;",
        (
            f"        acc += {load(x.dtype, f'x[xc + ({idx})(iy * {wd} + ix)]')}"
            f" * {load(w.dtype, f'wt[wc + ({idx})(ky * {kw} + kx)]')};"
        ),
        "      }",
        "    }",
        "  }",
    ]
    if len(types) == 3:
        lines.append(f"  acc += {load(types[2].dtype, 'bias[ch]')};")
    lines += [f"  out[i] = {store(out.dtype, 'acc')};", "}"]
    decls = [out_param(out.dtype), in_param(x.dtype, 0).replace("in0", "x")]
    decls.append(in_param(w.dtype, 1).replace("in1", "wt"))
    if len(types) == 3:
        decls.append(in_param(types[2].dtype, 2).replace("in2", "bias"))
    kernel = make_kernel("conv2d", decls, "\n".join("  " + s for s in lines))
    grid, block = grid_1d(out.numel)
    return [Launch(kernel, grid, block, ("out",) + tuple(roles[: len(types)]))]


def _pool(node: Node, x: TensorType) -> Launch:
    assert node.type is not None
    out = node.type
    attrs = attrs_with_defaults(node)
    (kh, kw), (sh, sw) = _pair(attrs["kernel"]), _pair(attrs["stride"])
    ph, pw = _pair(attrs["padding"])
    _, c, h, wd = x.shape
    is_max = node.op == "max_pool2d"
    idx = index_type(max(out.numel, x.numel))
    init = lowest(x.dtype) if is_max else "0.0f"
    step = "acc = og_max(acc, v);" if is_max else "acc += v; ++count;"
    lines = _output_coords(out, idx)
    lines += [
        f"  const {idx} base = (nb * {c}u + ch) * {h * wd}u;",
        f"  float acc = {init};",
        *([] if is_max else ["  int count = 0;"]),
        f"  for (int ky = 0; ky < {kh}; ++ky) {{",
        f"    const int iy = oy * {sh} - {ph} + ky;",
        f"    if (iy < 0 || iy >= {h}) continue;",
        f"    for (int kx = 0; kx < {kw}; ++kx) {{",
        f"      const int ix = ox * {sw} - {pw} + kx;",
        f"      if (ix < 0 || ix >= {wd}) continue;",
        f"      const float v = {load(x.dtype, f'in0[base + ({idx})(iy * {wd} + ix)]')};",
        f"      {step}",
        "    }",
        "  }",
    ]
    result = "acc" if is_max else "acc / (float)count"
    lines += [f"  out[i] = {store(out.dtype, result)};", "}"]
    decls = [out_param(out.dtype), in_param(x.dtype, 0)]
    kernel = make_kernel(node.op, decls, "\n".join("  " + s for s in lines))
    grid, block = grid_1d(out.numel)
    return Launch(kernel, grid, block, ("out", "in0"))
