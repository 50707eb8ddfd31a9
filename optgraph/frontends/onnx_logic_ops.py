"""ONNX comparisons, masks and bounds (the logic family) -> IR `equal`/`less`/`greater`,
`not`, `where`, `clip`.

    Less(pos, kv_len)               -> less
    Where(mask, scores, -inf)       -> where
    Clip(x, min, max)               -> clip {min, max}   (min, max: constant inputs or attributes)
    Trilu(x, k) {upper}             -> where(keep, x, 0) (k: a constant; keep: a constant mask)
    IsNaN(x)                        -> not(equal(x, x))

`LessOrEqual`/`GreaterOrEqual` become `less_equal`/`greater_equal` (on bools, which those
refuse, `not(greater)`/`not(less)`). ONNX comparisons take one dtype already.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optgraph.frontends.aten_logic_ops import triangle_keep
from optgraph.frontends.integer_clamp import integer_clamp
from optgraph.frontends.onnx_context import Converter, OnnxContext
from optgraph.ir.graph import AttrValue


def _compare(op: str, negate: bool = False) -> Converter:
    def convert(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
        operands = [ctx.name(node.input[0]), ctx.name(node.input[1])]
        if not negate:
            ctx.emit(node, op, operands)
            return
        if ctx.type_of(node.input[0]).dtype != "bool":  # NaN compares false: their own ops
            ctx.emit(node, "greater_equal" if op == "less" else "less_equal", operands)
            return
        ctx.emit(node, "not", [ctx.step(node, op, operands)])

    return convert


def _not(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    ctx.emit(node, "not", [ctx.name(node.input[0])])


def _logical(op: str) -> Converter:
    def convert(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
        ctx.emit(node, op, [ctx.name(node.input[0]), ctx.name(node.input[1])])

    return convert


def _where(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    ctx.emit(node, "where", [ctx.name(i) for i in node.input[:3]])


def _is_nan(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    """IsNaN(x) = not(equal(x, x)): only a NaN differs from itself."""
    name = ctx.name(node.input[0])
    ctx.emit(node, "not", [ctx.step(node, "equal", [name, name])])


def _clip(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    bounds: dict[str, float] = {}
    for index, key in ((1, "min"), (2, "max")):
        if key in attrs:
            bounds[key] = float(attrs[key])
        elif len(node.input) > index and node.input[index]:
            if not ctx.is_constant(node.input[index]):
                raise ctx.error(node, f"input {index} ({key}) must be a constant")
            bounds[key] = ctx.constant(node.input[index]).reshape(-1)[0].item()
    if not bounds:
        ctx.values[node.output[0]] = ctx.name(node.input[0])
        return
    x = ctx.type_of(node.input[0])
    if x.dtype.startswith("i"):  # `integer_clamp.py`
        low, high = (None if k not in bounds else int(bounds[k]) for k in ("min", "max"))
        integer_clamp(ctx.emitter(node), (ctx.name(node.input[0]), x), low, high)
        return
    floats: dict[str, AttrValue] = {k: float(v) for k, v in bounds.items()}
    ctx.emit(node, "clip", [ctx.name(node.input[0])], floats)


def _trilu(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    x = ctx.type_of(node.input[0])
    if x.rank < 2:
        raise ctx.error(node, f"expected a tensor of rank >= 2, got {x}")
    diagonal = 0
    if len(node.input) > 1 and node.input[1]:
        if not ctx.is_constant(node.input[1]):
            raise ctx.error(node, "input 1 (k) must be a constant")
        diagonal = int(ctx.constant(node.input[1]).reshape(-1)[0])
    keep = triangle_keep(x.shape[-2], x.shape[-1], diagonal, bool(attrs.get("upper", 1)))
    name = ctx.name(node.input[0])
    ctx.emit(node, "where", [ctx.draft.constant(keep, "keep"), name, ctx.scalar_like(0.0, name)])


LOGIC_CONVERTERS: dict[str, Converter] = {
    "And": _logical("and"),
    "Or": _logical("or"),
    "Clip": _clip,
    "Equal": _compare("equal"),
    "Greater": _compare("greater"),
    "GreaterOrEqual": _compare("less", negate=True),
    "Less": _compare("less"),
    "LessOrEqual": _compare("greater", negate=True),
    "IsNaN": _is_nan,
    "Not": _not,
    "Trilu": _trilu,
    "Where": _where,
}
