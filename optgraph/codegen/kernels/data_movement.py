"""Data movement: materialized views, concat, get_rows, kv_cache_write, copy and prefetch.

Views that alias their operand (`optgraph.ir.layout`) never reach this module: they cost no
kernel. A transpose or slice that is not contiguous in its operand is materialized by a strided
copy that moves raw bits (so f16, bf16 and i16-sized values share one kernel per geometry):

    %t = transpose(%x) {perm = [1, 0]} : f32[3,2]   (%x : f32[2,3])
    ->  out[i] = in0[(i / 2u) + (i % 2u) * 3u]

`copy` and `prefetch` are device-to-device memcpys (this runtime keeps every weight resident).
Out-of-range data never faults: a `get_rows` id outside the table gives a row of zeros, and a
`kv_cache_write` whose rows `pos:pos+S` do not fit in the cache writes no new row (the reference
interpreter raises an `InputError` for both).
"""

from __future__ import annotations

import math

from optgraph.codegen.cuda_source import (
    BITS,
    STORAGE,
    DeviceCopy,
    Launch,
    gather_offset,
    grid_1d,
    index_type,
    make_kernel,
    strides,
)
from optgraph.ir.attrs import int_attr, ints_attr
from optgraph.ir.graph import DTYPE_BYTES, Node, TensorType
from optgraph.ir.ops import attrs_with_defaults

OPS = frozenset(
    {"reshape", "transpose", "slice", "concat", "get_rows", "kv_cache_write", "copy", "prefetch"}
)


def _bits(dtype: str) -> str:
    return BITS[DTYPE_BYTES[dtype]]


def _grid_loop(n: int, idx: str) -> str:
    return (
        f"for ({idx} i = ({idx})blockIdx.x * blockDim.x + threadIdx.x; i < {n}u;"
        f" i += ({idx})gridDim.x * blockDim.x) {{"
    )


def strided_copy(out_type: TensorType, src_strides: list[int], base: int, src_numel: int) -> Launch:
    """out[i] = in0[base + offset(i)]: the copy kernel of materialized transposes and slices.

    Where the innermost output dim is contiguous in the source and every offset is a multiple
    of a wider unit (`copy_unit`: up to 16 bytes), a thread moves one unit, not one element
    (a run-time test of the pointers' alignment keeps the one-element loop for the rest)."""
    n = out_type.numel
    idx = index_type(max(n, src_numel))
    t = _bits(out_type.dtype)
    offset = gather_offset("i", out_type.shape, src_strides)
    start = f"{base}u + " if base else ""
    elements = [_grid_loop(n, idx), f"  out[i] = in0[{start}{offset}];", "}"]
    size = DTYPE_BYTES[out_type.dtype]
    unit = copy_unit(out_type.shape, src_strides, base, size)
    if unit == size:
        body, count = elements, n
    else:
        per = unit // size
        shape = [*out_type.shape[:-1], out_type.shape[-1] // per]
        wide = [s // per for s in src_strides[:-1]] + [1]
        count = n // per
        offset = gather_offset("i", shape, wide)
        start = f"{base // per}u + " if base else ""
        u = UNITS[unit]
        pointers = (
            "reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in0)"
        )
        move = (
            f"reinterpret_cast<{u}*>(out)[i] = reinterpret_cast<const {u}*>(in0)[{start}{offset}];"
        )
        body = [
            f"if ((({pointers}) & {unit - 1}ull) == 0ull) {{",
            f"  {_grid_loop(count, idx)}",
            f"    {move}",
            "  }",
            "} else {",
            *("  " + e for e in elements),
            "}",
        ]
    kernel = make_kernel(
        "copy", [f"{t}* out", f"const {t}* in0"], "\n".join("  " + b for b in body)
    )
    grid, block = grid_1d(count)
    return Launch(kernel, grid, block, ("out", "in0"))


# The raw-bit type a thread moves in a widened copy, by bytes.
UNITS = {4: "unsigned int", 8: "uint2", 16: "uint4"}
# Widened copies (`strided_copy`); False: one element a thread.
VECTOR_COPIES = True


def copy_unit(
    shape: list[int] | tuple[int, ...], src_strides: list[int], base: int, size: int
) -> int:
    """The widest unit in bytes (element size up to 16) a strided copy can move per thread:
    the innermost dim contiguous in the source, its length, every other source stride and the
    start all multiples of the unit."""
    if not VECTOR_COPIES or not shape or src_strides[-1] != 1 or len(shape) < 2:
        return size
    for unit in (16, 8, 4):
        per = unit // size
        if per <= 1:
            break
        if shape[-1] % per or base % per or any(s % per for s in src_strides[:-1]):
            continue
        return unit
    return size


def emit(
    node: Node, types: tuple[TensorType, ...], *, in_place: bool = False
) -> list[Launch | DeviceCopy]:
    assert node.type is not None
    attrs = attrs_with_defaults(node)
    x = types[0]
    if node.op in ("copy", "prefetch", "reshape"):
        return [DeviceCopy("out", "in0", node.type.nbytes)]
    if node.op == "transpose":
        perm = ints_attr(attrs, "perm")
        xs = strides(x.shape)
        return [strided_copy(node.type, [xs[p] for p in perm], 0, x.numel)]
    if node.op == "slice":
        axis = int_attr(attrs, "axis") % x.rank
        xs = strides(x.shape)
        base = int_attr(attrs, "start") * xs[axis]
        return [strided_copy(node.type, xs, base, x.numel)]
    if node.op == "concat":
        return [_concat(node, types)]
    if node.op == "get_rows":
        return [_get_rows(node, types)]
    assert node.op == "kv_cache_write"
    return [_kv_cache_write(node, types, in_place)]


def _concat(node: Node, types: tuple[TensorType, ...]) -> Launch:
    """A thread per output element picks its operand by the coordinate along the axis."""
    assert node.type is not None
    out = node.type
    axis = int_attr(attrs_with_defaults(node), "axis") % out.rank
    inner = math.prod(out.shape[axis + 1 :])
    total = out.shape[axis]
    n = out.numel
    idx = index_type(n)
    t = _bits(out.dtype)
    lines = [
        _grid_loop(n, idx),
        f"  const {idx} o = i / {total * inner}u, c = (i / {inner}u) % {total}u, r = i % {inner}u;",
    ]
    start = 0
    first = True
    for k, operand in enumerate(types):
        size = operand.shape[axis]
        if size == 0:
            continue
        cond = f"c < {start + size}u"
        src = f"in{k}[(o * {size}u + (c - {start}u)) * {inner}u + r]"
        keyword = "if" if first else "else if"
        lines.append(f"  {keyword} ({cond}) out[i] = {src};")
        start += size
        first = False
    lines.append("}")
    decls = [f"{t}* out"] + [f"const {t}* in{k}" for k in range(len(types))]
    kernel = make_kernel("concat", decls, "\n".join("  " + s for s in lines))
    grid, block = grid_1d(n)
    return Launch(kernel, grid, block, ("out",) + tuple(f"in{k}" for k in range(len(types))))


def _get_rows(node: Node, types: tuple[TensorType, ...]) -> Launch:
    """A thread per element, or per 16-byte unit of a row where rows are whole units
    (`VECTOR_COPIES`; the pointers' alignment tested at run time)."""
    assert node.type is not None
    table, ids = types
    width = table.shape[-1]
    rows = table.numel // width if width else 0
    n = node.type.numel
    idx = index_type(max(n, table.numel))
    t = _bits(table.dtype)

    def loop(count: int, cols: int, unit: str | None) -> list[str]:
        """The copy loop moving elements (`unit` None) or `unit`s."""
        dst, src, zero = "out", "in0", f"({t})0"
        if unit is not None:
            dst, src = f"reinterpret_cast<{unit}*>(out)", f"reinterpret_cast<const {unit}*>(in0)"
            zero = f"{unit}{{}}"
        return [
            _grid_loop(count, idx),
            f"  const long long row = (long long)in1[i / {cols}u];",
            f"  if (row >= 0 && row < {rows}LL) {dst}[i] = {src}[({idx})row * {cols}u + i % {cols}u];",
            f"  else {dst}[i] = {zero};",
            "}",
        ]

    size = DTYPE_BYTES[table.dtype]
    per = 16 // size
    if VECTOR_COPIES and width and size < 16 and width % per == 0:
        pointers = (
            "reinterpret_cast<unsigned long long>(out) | reinterpret_cast<unsigned long long>(in0)"
        )
        lines = [
            f"if ((({pointers}) & 15ull) == 0ull) {{",
            *("  " + x for x in loop(n // per, width // per, "uint4")),
            "} else {",
            *("  " + x for x in loop(n, width, None)),
            "}",
        ]
        count = n // per
    else:
        lines, count = loop(n, width, None), n
    decls = [f"{t}* out", f"const {t}* in0", f"const {STORAGE[ids.dtype]}* in1"]
    kernel = make_kernel("get_rows", decls, "\n".join("  " + s for s in lines))
    grid, block = grid_1d(count)
    return Launch(kernel, grid, block, ("out", "in0", "in1"))


def _kv_cache_write(node: Node, types: tuple[TensorType, ...], in_place: bool) -> Launch:
    """Copy variant: a thread per cache element takes the new row or the old one. In-place
    variant (the result has the cache's bytes): a thread per new element writes its row."""
    cache, new, pos = types
    b, h, smax, d = cache.shape
    s = new.shape[2]
    t = _bits(cache.dtype)
    head = [
        "const long long pos = (long long)in2[0];",
        f"const bool ok = pos >= 0 && pos <= {smax - s}LL;",
    ]
    lines: list[str] = []
    if in_place:
        n = new.numel
        idx = index_type(cache.numel)
        lines = head + [
            "if (!ok) return;",
            _grid_loop(n, idx),
            f"  const {idx} bh = i / {s * d}u, r = (i / {d}u) % {s}u, c = i % {d}u;",
            f"  out[(bh * {smax}u + ({idx})pos + r) * {d}u + c] = in1[i];",
            "}",
        ]
    else:
        n = cache.numel
        idx = index_type(n)
        row_bytes = d * DTYPE_BYTES[cache.dtype]
        if row_bytes % 16 == 0:  # whole 16-byte units when every pointer is aligned for them
            lines += _kv_copy_units(b * h, smax, s, row_bytes // 16, idx)
            n = n * DTYPE_BYTES[cache.dtype] // 16
        lines = (
            head
            + lines
            + [
                _grid_loop(cache.numel, idx),
                f"  const {idx} bh = i / {smax * d}u, r = (i / {d}u) % {smax}u, c = i % {d}u;",
                "  const long long k = (long long)r - pos;",
                (
                    f"  out[i] = (ok && k >= 0 && k < {s}LL) ? in1[(bh * {s}u + ({idx})k) * {d}u + c]"
                    " : in0[i];"
                ),
                "}",
            ]
        )
    decls = [f"{t}* out", f"const {t}* in0", f"const {t}* in1", f"const {STORAGE[pos.dtype]}* in2"]
    family = "kv_write_inplace" if in_place else "kv_write"
    kernel = make_kernel(family, decls, "\n".join("  " + s for s in lines))
    grid, block = grid_1d(n)
    return Launch(kernel, grid, block, ("out", "in0", "in1", "in2"))


def _kv_copy_units(bh: int, smax: int, s: int, units: int, idx: str) -> list[str]:
    """The copy variant in 16-byte units (`units` per cache row), returning when it ran."""
    return [
        (
            "if (((reinterpret_cast<unsigned long long>(out) | "
            "reinterpret_cast<unsigned long long>(in0) | "
            "reinterpret_cast<unsigned long long>(in1)) & 15ull) == 0ull) {"
        ),
        "  const uint4* src0 = reinterpret_cast<const uint4*>(in0);",
        "  const uint4* src1 = reinterpret_cast<const uint4*>(in1);",
        "  uint4* dst = reinterpret_cast<uint4*>(out);",
        "  " + _grid_loop(bh * smax * units, idx),
        f"    const {idx} row = i / {units}u, r = row % {smax}u, c = i % {units}u;",
        "    const long long k = (long long)r - pos;",
        "    const uint4 old = src0[i];",  # not waiting for pos
        (
            f"    dst[i] = (ok && k >= 0 && k < {s}LL) ? "
            f"src1[((row / {smax}u) * {s}u + ({idx})k) * {units}u + c] : old;"
        ),
        "  }",
        "  return;",
        "}",
    ]
