"""Indexing ops: expand, tile and pad (copies that move raw bits or fill), cumsum and argmax
(a block per line along the axis).

A thread per output element finds its source element from its coordinates:

    %y = tile(%x) {repeats = [2, 1]} : f32[4,3]   (%x : f32[2,3])
    ->  out[i] = in0[((i / 3u) % 4u % 2u) * 3u + (i % 3u)]

`cumsum` and `argmax` give each line (the elements sharing every coordinate but the axis) a
block of up to 256 threads. cumsum scans tiles of blockDim.x elements (warp shuffles, then the
warps' sums, then the carry of earlier tiles) in float32 (integers in their own type, exact);
argmax reduces (value, index) pairs over the block, keeping the first maximum with a NaN as the
largest (NumPy, torch, ONNX `select_last_index = 0`).
"""

from __future__ import annotations

import math

from optgraph.codegen.cuda_source import (
    BITS,
    COMPUTE,
    STORAGE,
    Launch,
    f32_literal,
    gather_offset,
    grid_1d,
    index_type,
    load,
    lowest,
    make_kernel,
    store,
    strides,
)
from optgraph.ir.attrs import float_attr, int_attr, ints_attr
from optgraph.ir.graph import DTYPE_BYTES, FLOAT_DTYPES, Node, TensorType
from optgraph.ir.ops import attrs_with_defaults

OPS = frozenset({"expand", "tile", "pad", "cumsum", "argmax"})


def _loop(n: int, idx: str) -> str:
    return (
        f"for ({idx} i = ({idx})blockIdx.x * blockDim.x + threadIdx.x; i < {n}u;"
        f" i += ({idx})gridDim.x * blockDim.x) {{"
    )


def _launch(name: str, decls: list[str], lines: list[str], count: int) -> Launch:
    kernel = make_kernel(name, decls, "\n".join("  " + s for s in lines))
    grid, block = grid_1d(count)
    return Launch(kernel, grid, block, ("out", "in0"))


def _coord(index: str, out_shape: tuple[int, ...], d: int) -> str:
    step = strides(out_shape)[d]
    coord = index if step == 1 else f"({index} / {step}u)"
    return coord if d == 0 else f"({coord} % {out_shape[d]}u)"


def _tile(node: Node, x: TensorType) -> Launch:
    assert node.type is not None
    out, xs = node.type, strides(x.shape)
    terms = []
    for d, size in enumerate(x.shape):
        if size > 1:
            terms.append(f"({_coord('i', out.shape, d)} % {size}u) * {xs[d]}u")
    t = BITS[DTYPE_BYTES[x.dtype]]
    src = " + ".join(terms) or "0"
    lines = [_loop(out.numel, index_type(out.numel)), f"  out[i] = in0[{src}];", "}"]
    return _launch("tile", [f"{t}* out", f"const {t}* in0"], lines, out.numel)


def _expand(node: Node, x: TensorType) -> Launch:
    assert node.type is not None
    out = node.type
    own = strides(x.shape)
    lead = out.rank - x.rank
    src = [0] * lead + [0 if x.shape[d] == 1 else own[d] for d in range(x.rank)]
    t = BITS[DTYPE_BYTES[x.dtype]]
    offset = gather_offset("i", out.shape, src)
    lines = [_loop(out.numel, index_type(out.numel)), f"  out[i] = in0[{offset}];", "}"]
    return _launch("expand", [f"{t}* out", f"const {t}* in0"], lines, out.numel)


def _pad(node: Node, x: TensorType) -> Launch:
    """Each output coordinate minus its `before` pad; outside x the element is `value`."""
    assert node.type is not None
    out, attrs = node.type, attrs_with_defaults(node)
    pads, r, xs = ints_attr(attrs, "pads"), x.rank, strides(x.shape)
    idx = "long long"
    inside, terms = [], []
    for d in range(r):
        name = f"c{d}"
        inside.append(f"const {idx} {name} = ({idx}){_coord('i', out.shape, d)} - {pads[d]}LL;")
        terms.append(f"{name} * {xs[d]}LL")
    bounds = " && ".join(f"c{d} >= 0 && c{d} < {x.shape[d]}LL" for d in range(r)) or "true"
    value = float_attr(attrs, "value")
    fill = f32_literal(value) if x.dtype in FLOAT_DTYPES else str(int(value))
    src = " + ".join(terms) or "0"
    lines = [_loop(out.numel, index_type(out.numel))]
    lines += ["  " + s for s in inside]
    lines.append(f"  out[i] = ({bounds}) ? in0[{src}] : {store(x.dtype, fill)};")
    lines.append("}")
    decls = [f"{STORAGE[x.dtype]}* out", f"const {STORAGE[x.dtype]}* in0"]
    return _launch("pad", decls, lines, out.numel)


def _line_geometry(node: Node, x: TensorType) -> tuple[int, int, int]:
    """(lines, length, inner): element k of line L is at (L / inner)·length·inner + L % inner
    + k·inner."""
    axis = int_attr(attrs_with_defaults(node), "axis") % x.rank
    length, inner = x.shape[axis], math.prod(x.shape[axis + 1 :])
    return (x.numel // length if length else 0), length, inner


def _scan_threads(length: int) -> int:
    """Threads a block: the line's length rounded up to whole warps, at most 256."""
    return min(256, max(32, -(-length // 32) * 32))


def _scan(node: Node, x: TensorType, out_dtype: str | None = None) -> Launch:
    """cumsum and argmax: a block per line (a block-stride loop past 65535 lines). `out_dtype`:
    an argmax storing its index as that integer dtype (a cast of its result done in its store)."""
    assert node.type is not None
    lines_count, length, inner = _line_geometry(node, x)
    idx = index_type(x.numel + 1)
    acc = "float" if x.dtype in FLOAT_DTYPES else COMPUTE[x.dtype]
    if node.op == "cumsum":
        shared = [f"__shared__ {acc} og_warp_sums[32];"]
    else:
        shared = [f"__shared__ {acc} og_best[32];", "__shared__ long long og_arg[32];"]
    head = [
        *shared,
        "const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;",
        f"for ({idx} line = blockIdx.x; line < {lines_count}u; line += gridDim.x) {{",
        f"  const {idx} base = (line / {inner}u) * {length * inner}u + line % {inner}u;",
    ]
    body = (
        _cumsum(x, acc, idx, length, inner)
        if node.op == "cumsum"
        else argmax_lines(x.dtype, idx, length, f"in0[base + k * {inner}u]", "out[line] = arg;")
    )
    out_t = STORAGE[out_dtype or node.type.dtype]
    decls = [f"{out_t}* out", f"const {STORAGE[x.dtype]}* in0"]
    kernel = make_kernel(node.op, decls, "\n".join("  " + s for s in head + body + ["}"]))
    grid = (max(1, min(lines_count, 65535)), 1, 1)
    return Launch(kernel, grid, (_scan_threads(length), 1, 1), ("out", "in0"))


def _cumsum(x: TensorType, acc: str, idx: str, length: int, inner: int) -> list[str]:
    """Tiles of blockDim.x elements: a warp scan (shuffles), a scan of the warps' sums, then the
    carry of the tiles before; float32 sums, so rounding may differ from the reference's serial
    order within float32's tolerance (integers are exact)."""
    shuffle = "for (int o = 1; o < 32; o <<= 1) {{ const {t} n = __shfl_up_sync(0xffffffffu, {v}, o); if (lane >= o) {v} += n; }}"
    return [
        f"  {acc} carry = ({acc})0;",
        f"  for ({idx} start = 0; start < {length}u; start += blockDim.x) {{",
        f"    const {idx} k = start + threadIdx.x;",
        f"    {acc} v = k < {length}u ? {load(x.dtype, f'in0[base + k * {inner}u]')} : ({acc})0;",
        "    " + shuffle.format(t=acc, v="v"),
        "    if (lane == 31) og_warp_sums[warp] = v;",
        "    __syncthreads();",
        "    if (warp == 0) {",
        f"      {acc} s = lane < warps ? og_warp_sums[lane] : ({acc})0;",
        "      " + shuffle.format(t=acc, v="s"),
        "      og_warp_sums[lane] = s;",
        "    }",
        "    __syncthreads();",
        "    if (warp > 0) v += og_warp_sums[warp - 1];",
        f"    if (k < {length}u) out[base + k * {inner}u] = {store(x.dtype, 'v + carry')};",
        "    carry += og_warp_sums[warps - 1];",
        "    __syncthreads();",
        "  }",
    ]


def argmax_lines(dtype: str, idx: str, length: int, element: str, store_arg: str) -> list[str]:
    """Statements finding the first maximum of a line of `length` elements, `element` its k-th
    (a storage expression of `dtype`), and running `store_arg` (in thread 0, `arg` its index).

    Each thread keeps the first maximum of its strided elements, then a warp and a block
    reduction of (value, index) pairs: a NaN beats any number, equal values the lower index.
    Needs `lane`, `warp`, `warps` (ints) and `__shared__` arrays `og_best[32]` (the compute
    type) and `og_arg[32]` (long long) in scope; ends with a `__syncthreads`."""
    acc = "float" if dtype in FLOAT_DTYPES else COMPUTE[dtype]
    better = (
        "({v} != {v} ? ({b} == {b} || {kv} < {kb}) :"
        " ({b} == {b} && ({v} > {b} || ({v} == {b} && {kv} < {kb}))))"
    )
    reduce = [
        "for (int o = 16; o > 0; o >>= 1) {",
        f"  const {acc} ob = __shfl_xor_sync(0xffffffffu, best, o);",
        "  const long long oa = __shfl_xor_sync(0xffffffffu, arg, o);",
        "  if " + better.format(v="ob", kv="oa", b="best", kb="arg") + " { best = ob; arg = oa; }",
        "}",
    ]
    return [
        f"  {acc} best = {lowest(dtype)};",
        f"  long long arg = {length}LL;",
        f"  for ({idx} k = threadIdx.x; k < {length}u; k += blockDim.x) {{",
        f"    const {acc} v = {load(dtype, element)};",
        "    if "
        + better.format(v="v", kv="(long long)k", b="best", kb="arg")
        + " { best = v; arg = (long long)k; }",
        "  }",
        *("  " + r for r in reduce),
        "  if (lane == 0) { og_best[warp] = best; og_arg[warp] = arg; }",
        "  __syncthreads();",
        "  if (warp == 0) {",
        f"    best = lane < warps ? og_best[lane] : {lowest(dtype)};",
        f"    arg = lane < warps ? og_arg[lane] : {length}LL;",
        *("    " + r for r in reduce),
        f"    if (lane == 0) {store_arg}",
        "  }",
        "  __syncthreads();",
    ]


def argmax_launch(node: Node, x: TensorType, out_dtype: str) -> Launch:
    """The launch of argmax `node` (operand type `x`) storing its indices as `out_dtype` (an
    integer dtype): the argmax and a cast of its result in one kernel."""
    return _scan(node, x, out_dtype)


def emit(node: Node, types: tuple[TensorType, ...], *, in_place: bool = False) -> list[Launch]:
    x = types[0]
    if node.op == "tile":
        return [_tile(node, x)]
    if node.op == "expand":
        return [_expand(node, x)]
    if node.op == "pad":
        return [_pad(node, x)]
    return [_scan(node, x)]
