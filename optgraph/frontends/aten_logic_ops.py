"""ATen comparisons, masks and bounds (the logic family) -> IR `equal`/`less`/`greater`,
`not`, `where`, `clip`.

What attention masks, per-row kv_len, sliding windows and softcaps export as:

    mask = pos[None, :] < kv_len[:, None]       aten.lt.Tensor       -> less
    scores.masked_fill(~mask, -inf)             aten.masked_fill     -> where(mask', fill, scores)
    logits.clamp(-30, 30)                       aten.clamp           -> clip
    F.relu6(x), F.hardtanh(x, lo, hi)           aten.hardtanh        -> clip
    ids.clamp(0, E - 1)  (integers)             aten.clamp           -> minimum(maximum(ids, 0),
                                                                        E - 1)
    scores.triu(1), x.tril()                    aten.triu, aten.tril -> where(keep, x, 0), the
                                                                        keep mask a constant

`le`/`ge` become `less_equal`/`greater_equal` (on bools, which those refuse,
`not(greater)`/`not(less)`); `ne` is `not(equal)`, exact for every dtype. Operands are
compared in one dtype, the promoted one as PyTorch does (an int tensor against a float scalar
or tensor compares as float).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from optgraph.frontends.integer_clamp import integer_clamp
from optgraph.frontends.torch_values import Converter, TorchContext, arg, unsupported
from optgraph.ir.graph import FLOAT_DTYPES, TensorType
from optgraph.reference.kernels import numpy_dtype


def _compare_dtype(ctx: TorchContext, a: Any, b: Any) -> str:
    """PyTorch's promotion for two comparison operands (tensors or Python scalars)."""
    dtypes = [ctx.type_of(v).dtype for v in (a, b) if hasattr(v, "name")]
    floats = [d for d in dtypes if d in FLOAT_DTYPES]
    if floats:
        return "f32" if len(set(floats)) > 1 else floats[0]
    if any(isinstance(v, float) for v in (a, b)):
        return "f32"
    return dtypes[0]


def _operands(ctx: TorchContext, node: Any) -> tuple[list[str], str]:
    a, b = node.args[0], node.args[1]
    dtype = _compare_dtype(ctx, a, b)
    like = TensorType(dtype, ())
    return [ctx.operand(a, like), ctx.operand(b, like)], dtype


def _compare(op: str, negate: bool = False) -> Converter:
    def convert(ctx: TorchContext, node: Any) -> None:
        operands, dtype = _operands(ctx, node)
        if not negate:
            ctx.emit(node, op, operands)
            return
        if op != "equal" and dtype != "bool":  # <= and >=: their own ops (NaN compares false)
            ctx.emit(node, "greater_equal" if op == "less" else "less_equal", operands)
            return
        partial = ctx.step(node, op, operands, ctx.result_type(node))
        ctx.emit(node, "not", [partial])

    return convert


def _logical_not(ctx: TorchContext, node: Any) -> None:
    if ctx.type_of(node.args[0]).dtype != "bool":
        raise unsupported(node, "only the not of a bool tensor maps")
    ctx.emit(node, "not", [ctx.name_of(node.args[0])])


def _logical(op: str) -> Converter:
    def convert(ctx: TorchContext, node: Any) -> None:
        a, b = node.args[0], node.args[1]
        if any(not hasattr(v, "name") or ctx.type_of(v).dtype != "bool" for v in (a, b)):
            raise unsupported(node, f"only the {op} of two bool tensors maps")
        ctx.emit(node, op, [ctx.name_of(a), ctx.name_of(b)])

    return convert


def _where(ctx: TorchContext, node: Any) -> None:
    out = ctx.result_type(node)
    cond = ctx.name_of(node.args[0])
    ctx.emit(node, "where", [cond, ctx.operand(node.args[1], out), ctx.operand(node.args[2], out)])


def _masked_fill(ctx: TorchContext, node: Any) -> None:
    """x.masked_fill(mask, value) = where(mask, value, x)."""
    out = ctx.result_type(node)
    value = node.args[2]
    if hasattr(value, "name"):
        fill = ctx.operand(value, out)
    else:
        fill = ctx.draft.constant(np.array(value, dtype=numpy_dtype(out.dtype)))
    ctx.emit(node, "where", [ctx.name_of(node.args[1]), fill, ctx.name_of(node.args[0])])


def _clamp(low_index: int | None, high_index: int | None) -> Converter:
    def convert(ctx: TorchContext, node: Any) -> None:
        out = ctx.result_type(node)
        if out.dtype == "bool":
            raise unsupported(node, "clamping a bool tensor")
        bounds: dict[str, float | int] = {}
        for key, index in (("min", low_index), ("max", high_index)):
            value = None if index is None else arg(node, index, key)
            if value is not None and hasattr(value, "name"):
                raise unsupported(node, "tensor bounds (clip takes constant bounds)")
            if value is not None:
                bounds[key] = value
        if not bounds:
            ctx.alias(node, node.args[0])
            return
        if out.dtype in FLOAT_DTYPES:
            floats = {key: float(value) for key, value in bounds.items()}
            ctx.emit(node, "clip", [ctx.name_of(node.args[0])], floats)
            return
        # integers (an MoE's expert ids): `integer_clamp.py`
        low, high = (None if k not in bounds else int(bounds[k]) for k in ("min", "max"))
        integer_clamp(ctx.emitter(node), (ctx.name_of(node.args[0]), out), low, high)

    return convert


def _hardtanh(ctx: TorchContext, node: Any) -> None:
    """`F.hardtanh` (and `F.relu6`, MobileNetV2's activation, exported as hardtanh(x, 0, 6)):
    `clip` between its bounds, -1 and 1 where not given."""
    if ctx.result_type(node).dtype not in FLOAT_DTYPES:
        raise unsupported(node, f"expected a float operand, got {ctx.result_type(node)}")
    low, high = arg(node, 1, "min_val", -1.0), arg(node, 2, "max_val", 1.0)
    bounds = {"min": float(low), "max": float(high)}
    ctx.emit(node, "clip", [ctx.name_of(node.args[0])], bounds)


def triangle_keep(rows: int, cols: int, diagonal: int, upper: bool) -> np.ndarray:
    """Which entries of an [rows, cols] matrix triu/tril (ONNX Trilu) keep."""
    offset = np.arange(cols)[None, :] - np.arange(rows)[:, None]
    return offset >= diagonal if upper else offset <= diagonal


def _triangle(upper: bool) -> Converter:
    def convert(ctx: TorchContext, node: Any) -> None:
        x = ctx.type_of(node.args[0])
        if x.rank < 2:
            raise unsupported(node, f"expected a tensor of rank >= 2, got {x}")
        keep = triangle_keep(x.shape[-2], x.shape[-1], int(arg(node, 1, "diagonal", 0)), upper)
        zero = ctx.draft.constant(np.zeros((), numpy_dtype(x.dtype)))
        ctx.emit(node, "where", [ctx.draft.constant(keep, "keep"), ctx.name_of(node.args[0]), zero])

    return convert


LOGIC_CONVERTERS: dict[str, Converter] = {
    "aten.bitwise_and.Tensor": _logical("and"),
    "aten.bitwise_or.Tensor": _logical("or"),
    "aten.logical_and.default": _logical("and"),
    "aten.logical_or.default": _logical("or"),
    "aten.bitwise_not.default": _logical_not,
    "aten.clamp.default": _clamp(1, 2),
    "aten.clamp_max.default": _clamp(None, 1),
    "aten.clamp_min.default": _clamp(1, None),
    "aten.eq.Scalar": _compare("equal"),
    "aten.eq.Tensor": _compare("equal"),
    "aten.ge.Scalar": _compare("less", negate=True),
    "aten.ge.Tensor": _compare("less", negate=True),
    "aten.gt.Scalar": _compare("greater"),
    "aten.gt.Tensor": _compare("greater"),
    "aten.hardtanh.default": _hardtanh,
    "aten.le.Scalar": _compare("greater", negate=True),
    "aten.le.Tensor": _compare("greater", negate=True),
    "aten.logical_not.default": _logical_not,
    "aten.lt.Scalar": _compare("less"),
    "aten.lt.Tensor": _compare("less"),
    "aten.masked_fill.Scalar": _masked_fill,
    "aten.masked_fill.Tensor": _masked_fill,
    "aten.ne.Scalar": _compare("equal", negate=True),
    "aten.ne.Tensor": _compare("equal", negate=True),
    "aten.tril.default": _triangle(upper=False),
    "aten.triu.default": _triangle(upper=True),
    "aten.where.self": _where,
    "aten.where.ScalarOther": _where,
    "aten.where.ScalarSelf": _where,
}
