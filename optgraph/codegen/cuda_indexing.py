"""Indexing ops: expand, tile and pad (copies that move raw bits or fill), cumsum and argmax
(one thread per line along the axis).

A thread per output element finds its source element from its coordinates:

    %y = tile(%x) {repeats = [2, 1]} : f32[4,3]   (%x : f32[2,3])
    ->  out[i] = in0[((i / 3u) % 4u % 2u) * 3u + (i % 3u)]

`cumsum` and `argmax` walk each line (the elements sharing every coordinate but the axis) in
order in one thread: cumsum adds in float32 (integers in their own type) exactly in the
reference's order; argmax keeps the first maximum, a NaN counting as the largest (NumPy). A
line is walked serially, so a long axis (a vocabulary's argmax) is latency-bound, not wrong.
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


def _scan(node: Node, x: TensorType) -> Launch:
    """cumsum and argmax: a thread walks one line in order."""
    assert node.type is not None
    lines_count, length, inner = _line_geometry(node, x)
    idx = index_type(x.numel + 1)
    acc = "float" if x.dtype in FLOAT_DTYPES else COMPUTE[x.dtype]
    at = load(x.dtype, "in0[base + k * INNER]")
    head = [
        _loop(lines_count, idx),
        f"  const {idx} INNER = {inner}u;",
        f"  const {idx} base = (i / INNER) * {length}u * INNER + i % INNER;",
    ]
    if node.op == "cumsum":
        body = [
            f"  {acc} acc = ({acc})0;",
            f"  for ({idx} k = 0; k < {length}u; ++k) {{",
            f"    acc += {at};",
            f"    out[base + k * INNER] = {store(x.dtype, 'acc')};",
            "  }",
        ]
    else:
        body = [
            f"  {acc} best = {load(x.dtype, 'in0[base]')};",
            "  long long arg = 0;",
            f"  for ({idx} k = 1; k < {length}u; ++k) {{",
            f"    const {acc} v = {at};",
            "    if (best == best && (v > best || v != v)) { best = v; arg = (long long)k; }",
            "  }",
            "  out[i] = arg;",
        ]
    out_t = STORAGE[node.type.dtype]
    decls = [f"{out_t}* out", f"const {STORAGE[x.dtype]}* in0"]
    return _launch(node.op, decls, head + body + ["}"], lines_count)


def emit(node: Node, types: tuple[TensorType, ...], *, in_place: bool = False) -> list[Launch]:
    x = types[0]
    if node.op == "tile":
        return [_tile(node, x)]
    if node.op == "expand":
        return [_expand(node, x)]
    if node.op == "pad":
        return [_pad(node, x)]
    return [_scan(node, x)]
