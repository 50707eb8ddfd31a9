"""conv2d (direct, any stride, padding and groups) and max/avg pooling, NCHW.

A thread per output element `(n, o, y, x)` loops over its group's input channels and the kernel
window with float32 accumulation, then adds the bias, like the reference (window sums first, bias
last). Pools follow the reference conventions: max ignores padding (padded cells are -inf), avg
divides by the number of in-bounds cells of the window.

    %c = conv2d(%x, %w, %b) {padding = [1, 1]} : f32[1,24,16,16]   (w : f32[24,16,3,3])
    ->  one thread per output: acc = sum_{c<16, ky<3, kx<3} x[...] * w[...];  out = acc + b[o]

Direct convolution is right for the small feature maps of the examples. A large one
(`gemm_form`: one group, a float dtype throughout, at least `GEMM_MIN_MACS` multiply-adds: a
diffusion UNet's) is a matrix product on the tensor cores instead, per image `n`:

    out[n] [O, OH*OW] = w [O, C*KH*KW] · col[n] [C*KH*KW, OH*OW]    (cuBLAS, f32 accumulation)

where `col` (the node's scratch, in x's dtype) holds each output position's input window
(`im2col`: zeros where the window leaves the image), `GEMM_BATCH_BYTES` of it at a time; a 1x1
convolution of stride 1 without padding reads x itself as `col`. The bias is added by a kernel
after the product (for f16/bf16 the product is rounded once before it, the reference rounds
acc + bias once: within the f16 bounds).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

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
from optgraph.codegen.kernels.matmul import OP_N, Gemm
from optgraph.ir.attrs import int_attr
from optgraph.ir.graph import DTYPE_BYTES, Node, TensorType
from optgraph.ir.ops import attrs_with_defaults

OPS = frozenset({"conv2d", "max_pool2d", "avg_pool2d"})
SCRATCH = "scratch"
GEMM_DTYPES = frozenset({"f32", "f16", "bf16"})
# The product form from this many multiply-adds (a 64x64 map of 320 channels by a 3x3 window is
# 3.8e9); below it the direct kernel. Not yet measured on a GPU: chosen so that the examples' and
# the tests' small maps keep the direct kernel.
GEMM_MIN_MACS = 1 << 24
GEMM_BATCH_BYTES = 64 << 20  # im2col scratch: as many images a product as fit in this


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


def emit(
    node: Node, types: tuple[TensorType, ...], *, in_place: bool = False
) -> list[Launch | Gemm]:
    if node.op == "conv2d":
        return emit_roles(node, types, tuple(f"in{k}" for k in range(len(types))))
    return [_pool(node, types[0])]


@dataclass(frozen=True)
class ConvShape:
    """Sizes of one conv2d: batch, channels, image, filters, window, output, stride, padding."""

    n: int
    c: int
    h: int
    w: int
    o: int
    kh: int
    kw: int
    oh: int
    ow: int
    stride: tuple[int, int]
    padding: tuple[int, int]
    groups: int

    @property
    def k(self) -> int:
        """The product's inner size: one window of every input channel."""
        return self.c * self.kh * self.kw

    @property
    def p(self) -> int:
        """Output positions an image."""
        return self.oh * self.ow

    @property
    def pointwise(self) -> bool:
        """1x1, stride 1, no padding: x itself is the product's right operand."""
        return (self.kh, self.kw, self.stride, self.padding) == (1, 1, (1, 1), (0, 0))


def conv_shape(node: Node, types: Sequence[TensorType]) -> ConvShape:
    assert node.type is not None
    attrs = attrs_with_defaults(node)
    n, c, h, w = types[0].shape
    o, _, kh, kw = types[1].shape
    _, _, oh, ow = node.type.shape
    stride, padding = _pair(attrs["stride"]), _pair(attrs["padding"])
    return ConvShape(n, c, h, w, o, kh, kw, oh, ow, stride, padding, int_attr(attrs, "groups"))


def gemm_form(node: Node, types: Sequence[TensorType]) -> bool:
    """Whether conv2d `node` runs as im2col + a cuBLAS product (see the module docstring)."""
    if node.op != "conv2d" or node.type is None or not node.type.numel:
        return False
    dtypes = {types[0].dtype, types[1].dtype, node.type.dtype}
    if len(dtypes) != 1 or not dtypes <= GEMM_DTYPES:
        return False
    s = conv_shape(node, types)
    return s.groups == 1 and s.n * s.o * s.k * s.p >= GEMM_MIN_MACS


def _images_a_product(s: ConvShape, dtype: str) -> int:
    return max(1, min(s.n, GEMM_BATCH_BYTES // max(1, s.k * s.p * DTYPE_BYTES[dtype])))


def scratch_bytes(node: Node, types: Sequence[TensorType]) -> int:
    """The im2col columns of the product form (0: none needed)."""
    if not gemm_form(node, types):
        return 0
    s = conv_shape(node, types)
    if s.pointwise:
        return 0
    dtype = types[0].dtype
    return _images_a_product(s, dtype) * s.k * s.p * DTYPE_BYTES[dtype]


def _grid_stride(idx: str, count: int) -> str:
    """The head of a grid-stride loop of index `i` over `count` elements."""
    return (
        f"for ({idx} i = ({idx})blockIdx.x * blockDim.x + threadIdx.x; i < {count}u;"
        f" i += ({idx})gridDim.x * blockDim.x) {{"
    )


def _im2col(s: ConvShape, dtype: str, first: int, images: int) -> Launch:
    """`images` images from `first` written as columns: col[b][k][p], k = (c, ky, kx)."""
    count = images * s.k * s.p
    idx = index_type(max(count, s.n * s.c * s.h * s.w))
    (sh, sw), (ph, pw) = s.stride, s.padding
    pixel = f"({idx})(iy * {s.w} + ix)"
    lines = [
        _grid_stride(idx, count),
        f"  const {idx} p = i % {s.p}u, k = (i / {s.p}u) % {s.k}u, b = i / {s.k * s.p}u;",
        f"  const int ox = (int)(p % {s.ow}u), oy = (int)(p / {s.ow}u);",
        f"  const int kx = (int)(k % {s.kw}u), ky = (int)((k / {s.kw}u) % {s.kh}u);",
        f"  const {idx} c = k / {s.kh * s.kw}u;",
        f"  const int iy = oy * {sh} - {ph} + ky, ix = ox * {sw} - {pw} + kx;",
        "  float v = 0.0f;",
        f"  if (iy >= 0 && iy < {s.h} && ix >= 0 && ix < {s.w})",
        f"    v = {load(dtype, f'in0[(({first}u + b) * {s.c}u + c) * {s.h * s.w}u + {pixel}]')};",
        f"  out[i] = {store(dtype, 'v')};",
        "}",
    ]
    kernel = make_kernel("im2col", [out_param(dtype), in_param(dtype, 0)], "\n".join(lines))
    grid, block = grid_1d(count)
    return Launch(kernel, grid, block, (SCRATCH, "in0"))


def _bias(out: TensorType, bias: TensorType, s: ConvShape) -> Launch:
    """out[n, o, p] += bias[o], in place."""
    idx = index_type(out.numel)
    lines = [
        _grid_stride(idx, out.numel),
        f"  const float b = {load(bias.dtype, f'in0[(i / {s.p}u) % {s.o}u]')};",
        f"  const float v = {load(out.dtype, 'out[i]')} + b;",
        f"  out[i] = {store(out.dtype, 'v')};",
        "}",
    ]
    kernel = make_kernel(
        "conv_bias", [out_param(out.dtype), in_param(bias.dtype, 0)], "\n".join(lines)
    )
    grid, block = grid_1d(out.numel)
    return Launch(kernel, grid, block, ("out", "in0"))


def _gemm_work(
    node: Node, types: Sequence[TensorType], roles: Sequence[str]
) -> list[Launch | Gemm]:
    """im2col into the scratch and a strided-batched product per run of images, then the bias.

    Row-major out[n] [O, P] = w [O, K] · col[n] [K, P], column-major: out[n]ᵀ = col[n]ᵀ·wᵀ;
    cuBLAS's first matrix is col[n] (m = P, lda = P), its second w (n = O, ldb = K), batch
    strides K·P, 0 and O·P."""
    assert node.type is not None
    s = conv_shape(node, types)
    dtype = types[0].dtype
    size = DTYPE_BYTES[dtype]
    work: list[Launch | Gemm] = []
    images = s.n if s.pointwise else _images_a_product(s, dtype)
    for first in range(0, s.n, images):
        count = min(images, s.n - first)
        if s.pointwise:
            source, offset = roles[0], first * s.c * s.p * size
        else:
            launch = _im2col(s, dtype, first, count)
            work.append(Launch(launch.kernel, launch.grid, launch.block, (SCRATCH, roles[0])))
            source, offset = SCRATCH, 0
        work.append(
            Gemm(
                dtype=dtype,
                transa=OP_N,
                transb=OP_N,
                m=s.p,
                n=s.o,
                k=s.k,
                a=source,
                lda=s.p,
                stride_a=s.k * s.p,
                b=roles[1],
                ldb=s.k,
                stride_b=0,
                c="out",
                ldc=s.p,
                stride_c=s.o * s.p,
                batch=count,
                a_offset=offset,
                c_offset=first * s.o * s.p * size,
            )
        )
    if len(types) == 3:
        launch = _bias(node.type, types[2], s)
        work.append(Launch(launch.kernel, launch.grid, launch.block, ("out", roles[2])))
    return work


def emit_roles(
    node: Node, types: Sequence[TensorType], roles: Sequence[str]
) -> list[Launch | Gemm]:
    """The conv2d reading its operands from `roles` (a fused product passes its own): the
    product form where `gemm_form`, else the direct kernel."""
    assert node.type is not None
    if gemm_form(node, types):
        return _gemm_work(node, types, roles)
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
