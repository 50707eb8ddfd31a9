"""Shape and dtype rules of the ops, one function per family (used by the table in `ops.py`).

Every rule has the signature `rule(node, operand_types, attrs) -> TensorType`, where `attrs` is the
node's attributes already checked against the op's specs, with defaults filled in and float
attributes given as floats. A rule raises `VerifyError` at the node's span with a message that names
the op and both conflicting facts as they are spelled in the IR, e.g.
`matmul: inner dimensions differ (8 vs 4)`.

Arity and attribute names, kinds and allowed values are checked by `ops.infer_type` before a rule
runs, so a rule may index `operand_types` and `attrs` freely.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NoReturn

from optgraph.errors import VerifyError
from optgraph.ir.graph import (
    FLOAT_DTYPES,
    INT_DTYPES,
    QUANT_BLOCKS,
    AttrValue,
    Node,
    TensorType,
)

Attrs = Mapping[str, AttrValue]
Types = Sequence[TensorType]


def fail(node: Node, message: str) -> NoReturn:
    raise VerifyError(f"{node.op}: {message}", node.span)


def shape_text(shape: Sequence[int]) -> str:
    return "[" + ",".join(str(d) for d in shape) + "]"


def broadcast_shapes(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...] | None:
    """NumPy broadcasting of two shapes; None when they do not broadcast."""
    out: list[int] = []
    for i in range(1, max(len(a), len(b)) + 1):
        da = a[-i] if i <= len(a) else 1
        db = b[-i] if i <= len(b) else 1
        if da != db and da != 1 and db != 1:
            return None
        out.append(db if da == 1 else da)
    return tuple(reversed(out))


def normalize_axis(node: Node, axis: int, x: TensorType, what: str = "axis") -> int:
    if not -x.rank <= axis < x.rank:
        fail(node, f"{what} {axis} out of range for {x}")
    return axis % x.rank if x.rank else 0


def _require_float(node: Node, t: TensorType, role: str = "operand") -> None:
    if t.dtype not in FLOAT_DTYPES:
        fail(node, f"expected a float {role}, got {t}")


def _require_numeric(node: Node, t: TensorType, role: str = "operand") -> None:
    if t.dtype == "bool":
        fail(node, f"expected a numeric {role}, got {t}")


def _require_int(node: Node, t: TensorType, role: str) -> None:
    if t.dtype not in INT_DTYPES:
        fail(node, f"{role} must have an integer dtype (i32 or i64), got {t}")


def _same_dtype(node: Node, types: Types) -> None:
    for t in types[1:]:
        if t.dtype != types[0].dtype:
            fail(node, f"operand dtypes differ ({types[0].dtype} vs {t.dtype})")


def _require_rank(node: Node, t: TensorType, rank: int, role: str, layout: str) -> None:
    if t.rank != rank:
        fail(node, f"{role} must be {layout}, got {t}")


def _pair(node: Node, attrs: Attrs, key: str, minimum: int) -> tuple[int, int]:
    value = attrs[key]
    assert isinstance(value, tuple)
    if len(value) != 2:
        fail(node, f"attribute '{key}' must have 2 values, got {shape_text(value)}")
    if min(value) < minimum:
        fail(node, f"attribute '{key}' values must be >= {minimum}, got {shape_text(value)}")
    return value[0], value[1]


# -- elementwise -------------------------------------------------------------------------------


def unary_float(node: Node, types: Types, attrs: Attrs) -> TensorType:
    _require_float(node, types[0])
    return types[0]


def unary_numeric(node: Node, types: Types, attrs: Attrs) -> TensorType:
    _require_numeric(node, types[0])
    return types[0]


def cast(node: Node, types: Types, attrs: Attrs) -> TensorType:
    return types[0].with_dtype(str(attrs["dtype"]))


def _binary(node: Node, types: Types) -> TensorType:
    a, b = types
    _same_dtype(node, types)
    shape = broadcast_shapes(a.shape, b.shape)
    if shape is None:
        fail(node, f"cannot broadcast {a} with {b}")
    return TensorType(a.dtype, shape)


def binary_numeric(node: Node, types: Types, attrs: Attrs) -> TensorType:
    _require_numeric(node, types[0])
    return _binary(node, types)


def binary_float(node: Node, types: Types, attrs: Attrs) -> TensorType:
    result = _binary(node, types)
    _require_float(node, types[0])
    return result


def prelu(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """prelu(x, slope): x where x >= 0, else slope·x; slope broadcasts to x (float, same dtype)."""
    x, slope = types
    _require_float(node, x)
    if slope.dtype != x.dtype:
        fail(node, f"operand dtypes differ ({x.dtype} vs {slope.dtype})")
    if broadcast_shapes(slope.shape, x.shape) != x.shape:
        fail(node, f"slope {slope} does not broadcast to {x}")
    return x


# -- reductions and norms ----------------------------------------------------------------------


def reduced_axes(node: Node, x: TensorType, attrs: Attrs) -> tuple[int, ...]:
    """The sorted, non-negative axes a sum/mean/max node reduces (all axes when `axes` is absent)."""
    axes = attrs.get("axes")
    if axes is None:
        return tuple(range(x.rank))
    assert isinstance(axes, tuple)
    normalized = [normalize_axis(node, a, x) for a in axes]
    if len(set(normalized)) != len(normalized):
        fail(node, f"attribute 'axes' repeats an axis: {shape_text(axes)} for {x}")
    return tuple(sorted(normalized))


def _reduce(node: Node, x: TensorType, attrs: Attrs) -> TensorType:
    axes = reduced_axes(node, x, attrs)
    if attrs["keepdims"]:
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return x.with_shape(shape)


def reduce_numeric(node: Node, types: Types, attrs: Attrs) -> TensorType:
    _require_numeric(node, types[0])
    return _reduce(node, types[0], attrs)


def _require_nonempty_axes(node: Node, x: TensorType, attrs: Attrs, why: str) -> None:
    """max and mean of no elements have no value (no identity, 0/0): an error, not NaN or a crash."""
    empty = [a for a in reduced_axes(node, x, attrs) if x.shape[a] == 0]
    if empty:
        fail(node, f"reduces over the empty axis {empty[0]} of {x} ({why})")


def reduce_max(node: Node, types: Types, attrs: Attrs) -> TensorType:
    _require_numeric(node, types[0])
    _require_nonempty_axes(node, types[0], attrs, "a maximum of no elements")
    return _reduce(node, types[0], attrs)


def reduce_mean(node: Node, types: Types, attrs: Attrs) -> TensorType:
    _require_float(node, types[0])
    _require_nonempty_axes(node, types[0], attrs, "a mean of no elements")
    return _reduce(node, types[0], attrs)


def reduce_float(node: Node, types: Types, attrs: Attrs) -> TensorType:
    _require_float(node, types[0])
    return _reduce(node, types[0], attrs)


def softmax(node: Node, types: Types, attrs: Attrs) -> TensorType:
    x = types[0]
    _require_float(node, x)
    axis = attrs["axis"]
    assert isinstance(axis, int)
    if x.rank == 0:
        fail(node, f"expected an operand of rank >= 1, got {x}")
    normalize_axis(node, axis, x)
    return x


def norm(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """rms_norm(x, w) and layer_norm(x, w, b): w (and b) are `[x.shape[-1]]`."""
    x = types[0]
    _require_float(node, x)
    _same_dtype(node, types)
    if x.rank == 0:
        fail(node, f"expected an operand of rank >= 1, got {x}")
    for role, t in zip(("w", "b"), types[1:]):
        if t.shape != (x.shape[-1],):
            fail(node, f"{role} must be {x.dtype}[{x.shape[-1]}] to match {x}, got {t}")
    return x


# -- matmul ------------------------------------------------------------------------------------


def matmul_dims(a: TensorType, b: TensorType, attrs: Attrs) -> tuple[int, int, int, int]:
    """(M, K of a, K of b, N) after the transpose flags."""
    m, ka = (a.shape[-1], a.shape[-2]) if attrs["transpose_a"] else (a.shape[-2], a.shape[-1])
    kb, n = (b.shape[-1], b.shape[-2]) if attrs["transpose_b"] else (b.shape[-2], b.shape[-1])
    return m, ka, kb, n


def matmul(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """Both operands float or both the same integer dtype (i32/i64: an exact product that wraps
    in the dtype); mixed int/float is refused, like every other dtype mismatch. A quantized b is
    `[N,K]` with its blocks along K, read with transpose_b = true (`quantized_matmul`)."""
    a, b = types
    if b.is_quantized:
        return _quantized_matmul(node, a, b, attrs)
    for role, t in (("a", a), ("b", b)):
        if t.rank < 2:
            fail(node, f"operand {role} must have rank >= 2, got {t}")
    _same_dtype(node, types)
    if a.dtype not in FLOAT_DTYPES and a.dtype not in INT_DTYPES:
        fail(node, f"expected a float or integer (i32, i64) operand, got {a}")
    m, ka, kb, n = matmul_dims(a, b, attrs)
    if ka != kb:
        fail(node, f"inner dimensions differ ({ka} vs {kb})")
    batch = broadcast_shapes(a.shape[:-2], b.shape[:-2])
    if batch is None:
        fail(
            node,
            f"cannot broadcast batch dimensions {shape_text(a.shape[:-2])} "
            f"with {shape_text(b.shape[:-2])}",
        )
    return TensorType(a.dtype, (*batch, m, n))


def _quantized_matmul(node: Node, a: TensorType, b: TensorType, attrs: Attrs) -> TensorType:
    """x [..., M, K] (f32, f16 or bf16) times the quantized weight w [N, K] transposed: x's dtype."""
    if b.rank != 2:
        fail(node, f"a quantized operand b must be [N,K], got {b}")
    if not attrs["transpose_b"]:
        fail(
            node,
            f"a quantized operand b ({b}) is [N,K] with blocks along K: set transpose_b = true",
        )
    if a.rank < 2:
        fail(node, f"operand a must have rank >= 2, got {a}")
    if a.dtype not in FLOAT_DTYPES:
        fail(node, f"operand a must be f32, f16 or bf16 to multiply a quantized b, got {a}")
    m, ka, kb, n = matmul_dims(a, b, attrs)
    if ka != kb:
        fail(node, f"inner dimensions differ ({ka} vs {kb})")
    return TensorType(a.dtype, (*a.shape[:-2], m, n))


def dequantize(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """A quantized weight's values, in the float dtype of attribute `dtype`: the same shape."""
    w = types[0]
    if not w.is_quantized:
        fail(node, f"expected a quantized operand ({', '.join(QUANT_BLOCKS)}), got {w}")
    dtype = attrs["dtype"]
    assert isinstance(dtype, str)
    return w.with_dtype(dtype)


# -- data movement -----------------------------------------------------------------------------


def same_type(node: Node, types: Types, attrs: Attrs) -> TensorType:
    return types[0]


def reshape(node: Node, types: Types, attrs: Attrs) -> TensorType:
    x = types[0]
    shape = attrs["shape"]
    assert isinstance(shape, tuple)
    if any(d < 0 for d in shape):
        fail(node, f"attribute 'shape' must list explicit sizes >= 0, got {shape_text(shape)}")
    result = x.with_shape(shape)
    if result.numel != x.numel:
        fail(
            node,
            f"cannot reshape {x} to {shape_text(shape)} ({x.numel} vs {result.numel} elements)",
        )
    return result


def transpose(node: Node, types: Types, attrs: Attrs) -> TensorType:
    x = types[0]
    perm = attrs["perm"]
    assert isinstance(perm, tuple)
    if sorted(perm) != list(range(x.rank)):
        fail(node, f"perm {shape_text(perm)} is not a permutation of the {x.rank} axes of {x}")
    return x.with_shape(x.shape[p] for p in perm)


def slice_(node: Node, types: Types, attrs: Attrs) -> TensorType:
    x = types[0]
    axis, start, end = attrs["axis"], attrs["start"], attrs["end"]
    assert isinstance(axis, int) and isinstance(start, int) and isinstance(end, int)
    if x.rank == 0:
        fail(node, f"cannot slice a scalar {x}")
    axis = normalize_axis(node, axis, x)
    dim = x.shape[axis]
    if not 0 <= start <= end <= dim:
        fail(node, f"range {start}:{end} out of bounds for axis {axis} of size {dim} in {x}")
    return x.with_shape(end - start if i == axis else d for i, d in enumerate(x.shape))


def concat(node: Node, types: Types, attrs: Attrs) -> TensorType:
    first = types[0]
    axis = attrs["axis"]
    assert isinstance(axis, int)
    if first.rank == 0:
        fail(node, f"cannot concatenate scalars {first}")
    axis = normalize_axis(node, axis, first)
    _same_dtype(node, types)
    total = 0
    for t in types:
        if t.rank != first.rank or any(
            d != e for i, (d, e) in enumerate(zip(t.shape, first.shape)) if i != axis
        ):
            fail(node, f"operand shapes differ outside axis {axis} ({first} vs {t})")
        total += t.shape[axis]
    return first.with_shape(total if i == axis else d for i, d in enumerate(first.shape))


def get_rows(node: Node, types: Types, attrs: Attrs) -> TensorType:
    """table [..., D] (leading dims flattened into rows), ids int -> ids.shape + [D]."""
    table, ids = types
    if table.rank < 2:
        fail(node, f"table must have rank >= 2, got {table}")
    _require_int(node, ids, "ids")
    if math.prod(table.shape[:-1]) == 0 and ids.numel > 0:
        fail(node, f"gathers {ids.numel} rows from a table with no rows ({table})")
    # A quantized table's rows come dequantized, in f32.
    dtype = "f32" if table.is_quantized else table.dtype
    return TensorType(dtype, (*ids.shape, table.shape[-1]))


def kv_cache_write(node: Node, types: Types, attrs: Attrs) -> TensorType:
    cache, new, pos = types
    _require_rank(node, cache, 4, "cache", "[B,H,Smax,D]")
    _require_rank(node, new, 4, "new", "[B,H,S,D]")
    _same_dtype(node, (cache, new))
    for i, what in ((0, "batch sizes"), (1, "head counts"), (3, "head dimensions")):
        if cache.shape[i] != new.shape[i]:
            fail(node, f"{what} differ ({cache} vs {new})")
    if new.shape[2] > cache.shape[2]:
        fail(node, f"new has more rows than the cache ({new} vs {cache})")
    _position_scalar(node, pos, "pos")
    return cache


def _position_scalar(node: Node, t: TensorType, role: str) -> None:
    if t.dtype not in INT_DTYPES or t.shape != (1,):
        fail(node, f"{role} must be i32[1] or i64[1], got {t}")


# -- opaque ------------------------------------------------------------------------------------


def conv_output(node: Node, size: int, kernel: int, stride: int, pad: int) -> int:
    if size + 2 * pad < kernel:
        fail(node, f"kernel size {kernel} exceeds padded input size {size + 2 * pad}")
    return (size + 2 * pad - kernel) // stride + 1


def conv2d(node: Node, types: Types, attrs: Attrs) -> TensorType:
    x, w = types[:2]
    _require_rank(node, x, 4, "x", "[N,C,H,W]")
    _require_rank(node, w, 4, "w", "[O,C/groups,KH,KW]")
    _same_dtype(node, types)
    _require_float(node, x, "x")
    stride = _pair(node, attrs, "stride", 1)
    padding = _pair(node, attrs, "padding", 0)
    groups = attrs["groups"]
    assert isinstance(groups, int)
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    if groups < 1:
        fail(node, f"attribute 'groups' must be >= 1, got {groups}")
    if c % groups or o % groups:
        fail(node, f"groups = {groups} must divide input channels {c} and output channels {o}")
    if cg != c // groups:
        fail(node, f"w expects {cg} input channels per group, x has {c // groups} ({x} vs {w})")
    if len(types) == 3 and types[2].shape != (o,):
        fail(node, f"b must be {x.dtype}[{o}] to match w {w}, got {types[2]}")
    oh = conv_output(node, h, kh, stride[0], padding[0])
    ow = conv_output(node, wd, kw, stride[1], padding[1])
    return TensorType(x.dtype, (n, o, oh, ow))


def pool_geometry(
    node: Node, attrs: Attrs
) -> tuple[tuple[int, int], tuple[int, int], tuple[int, int]]:
    """(kernel, stride, padding) of a pool node, checked; stride defaults to the kernel."""
    kernel = _pair(node, attrs, "kernel", 1)
    stride = _pair(node, attrs, "stride", 1)
    padding = _pair(node, attrs, "padding", 0)
    if padding[0] > kernel[0] // 2 or padding[1] > kernel[1] // 2:
        fail(
            node,
            f"padding {shape_text(padding)} exceeds half the kernel {shape_text(kernel)}",
        )
    return kernel, stride, padding


def pool2d(node: Node, types: Types, attrs: Attrs) -> TensorType:
    x = types[0]
    _require_rank(node, x, 4, "x", "[N,C,H,W]")
    _require_float(node, x, "x")
    kernel, stride, padding = pool_geometry(node, attrs)
    oh = conv_output(node, x.shape[2], kernel[0], stride[0], padding[0])
    ow = conv_output(node, x.shape[3], kernel[1], stride[1], padding[1])
    return x.with_shape((x.shape[0], x.shape[1], oh, ow))
