"""ONNX comparisons, masks and bounds -> IR `equal`/`less`/`greater`, `not`, `where`, `clip`.

    Less(pos, kv_len)               -> less
    Where(mask, scores, -inf)       -> where
    Clip(x, min, max)               -> clip {min, max}   (min, max: constant inputs or attributes)

`LessOrEqual`/`GreaterOrEqual` become `less_equal`/`greater_equal` (on bools, which those
refuse, `not(greater)`/`not(less)`). ONNX comparisons take one dtype already.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

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


def _clip(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    bounds: dict[str, AttrValue] = {}
    for index, key in ((1, "min"), (2, "max")):
        if key in attrs:
            bounds[key] = float(attrs[key])
        elif len(node.input) > index and node.input[index]:
            if not ctx.is_constant(node.input[index]):
                raise ctx.error(node, f"input {index} ({key}) must be a constant")
            bounds[key] = float(ctx.constant(node.input[index]).reshape(-1)[0])
    if not bounds:
        ctx.values[node.output[0]] = ctx.name(node.input[0])
        return
    ctx.emit(node, "clip", [ctx.name(node.input[0])], bounds)


MASK_CONVERTERS: dict[str, Converter] = {
    "And": _logical("and"),
    "Or": _logical("or"),
    "Clip": _clip,
    "Equal": _compare("equal"),
    "Greater": _compare("greater"),
    "GreaterOrEqual": _compare("less", negate=True),
    "Less": _compare("less"),
    "LessOrEqual": _compare("greater", negate=True),
    "Not": _not,
    "Where": _where,
}
