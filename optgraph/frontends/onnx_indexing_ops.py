"""ONNX indexing ops (the indexing family) -> IR `expand`, `tile`, `pad`, `cumsum`, `argmax`,
`get_rows`.

    Expand(x, shape)        -> expand {shape = broadcast(x.shape, shape)}   (shape: a constant)
    Tile(x, repeats)        -> tile {repeats}                                 (a constant)
    Pad(x, pads, value)     -> pad {pads, value}          (mode "constant", no `axes` input)
    CumSum(x, axis)         -> cumsum {axis}              (exclusive = reverse = 0)
    ArgMax(x)               -> argmax {axis, keepdims}    (select_last_index = 0)
    Gather(x, ids) {axis}   -> get_rows (`gathers.rows_along`; a constant 0-d index: a slice)
    GatherElements(x, ids)  -> get_rows of x's elements (`gathers.elements_along`)
    TopK(x, k) {axis, largest} -> k rounds of argmax (`topk.py`; k a constant)
    GatherND(x, ids)        -> get_rows at coordinates (`gathers.rows_at_coordinates`;
                               batch_dims = 0)

What is not listed is refused with its reason.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optgraph.frontends import topk
from optgraph.frontends.gathers import elements_along, rows_along, rows_at_coordinates
from optgraph.frontends.onnx_context import Converter, OnnxContext
from optgraph.ir.graph import AttrValue
from optgraph.ir.op_rules import broadcast_shapes


def _expand(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    x = ctx.type_of(node.input[0])
    wanted = ctx.ints(node, 1, attrs, "shape")
    shape = broadcast_shapes(x.shape, wanted or [])
    if shape is None:
        raise ctx.error(node, f"cannot broadcast {x} to {wanted}")
    if shape == x.shape:
        ctx.values[node.output[0]] = ctx.name(node.input[0])
        return
    ctx.emit(node, "expand", [ctx.name(node.input[0])], {"shape": shape})


def _tile(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    repeats = ctx.ints(node, 1, attrs, "repeats")
    ctx.emit(node, "tile", [ctx.name(node.input[0])], {"repeats": tuple(repeats or [])})


def _pad(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    mode = attrs.get("mode", b"constant")
    if (mode.decode() if isinstance(mode, bytes) else mode) != "constant":
        raise ctx.error(node, f"only mode 'constant' is supported, got {mode!r}")
    if len(node.input) > 3 and node.input[3]:
        raise ctx.error(node, "the axes input is not supported")
    pads = ctx.ints(node, 1, attrs, "pads") or []
    if min(pads, default=0) < 0:
        raise ctx.error(node, "negative pads (cropping) are not supported")
    value = float(attrs.get("value", 0.0))
    if len(node.input) > 2 and node.input[2]:
        if not ctx.is_constant(node.input[2]):
            raise ctx.error(node, "input 2 (constant_value) must be a constant")
        value = float(ctx.constant(node.input[2]).reshape(-1)[0])
    out: dict[str, AttrValue] = {"pads": tuple(pads), "value": value}
    ctx.emit(node, "pad", [ctx.name(node.input[0])], out)


def _cumsum(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    if attrs.get("exclusive", 0) or attrs.get("reverse", 0):
        raise ctx.error(node, "exclusive and reverse cumulative sums are not supported")
    if not ctx.is_constant(node.input[1]):
        raise ctx.error(node, "input 1 (axis) must be a constant")
    axis = int(ctx.constant(node.input[1]).reshape(-1)[0])
    ctx.emit(node, "cumsum", [ctx.name(node.input[0])], {"axis": axis})


def _argmax(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    if attrs.get("select_last_index", 0):
        raise ctx.error(node, "select_last_index = 1 is not supported (the first maximum is)")
    out: dict[str, AttrValue] = {
        "axis": int(attrs.get("axis", 0)),
        "keepdims": bool(attrs.get("keepdims", 1)),
    }
    ctx.emit(node, "argmax", [ctx.name(node.input[0])], out)


def _gather(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    x = ctx.type_of(node.input[0])
    axis = int(attrs.get("axis", 0)) % max(x.rank, 1)
    if node.input[1] in ctx.scalars:  # a 0-d constant index: the axis goes
        index = int(ctx.constant(node.input[1]).reshape(-1)[0]) % x.shape[axis]
        kept: dict[str, AttrValue] = {"axis": axis, "start": index, "end": index + 1}
        part = ctx.step(node, "slice", [ctx.name(node.input[0])], kept)
        shape = tuple(d for i, d in enumerate(x.shape) if i != axis)
        ctx.emit(node, "reshape", [part], {"shape": shape})
        return
    ids = (ctx.name(node.input[1]), ctx.type_of(node.input[1]))
    rows_along(ctx.emitter(node), (ctx.name(node.input[0]), x), axis, ids)


def _gather_elements(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    x, index = ctx.type_of(node.input[0]), ctx.type_of(node.input[1])
    axis = int(attrs.get("axis", 0)) % max(x.rank, 1)
    if index.rank != x.rank:
        raise ctx.error(node, f"indices {index} must have the rank of {x}")
    ids = (ctx.name(node.input[1]), index)
    elements_along(ctx.emitter(node), (ctx.name(node.input[0]), x), axis, ids)


def _gather_nd(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    if int(attrs.get("batch_dims", 0)):
        raise ctx.error(node, "batch_dims other than 0 is not supported")
    x, index = ctx.type_of(node.input[0]), ctx.type_of(node.input[1])
    if index.rank < 1 or not 1 <= index.shape[-1] <= x.rank:
        raise ctx.error(node, f"indices {index} do not index {x}")
    ids = (ctx.name(node.input[1]), index)
    rows_at_coordinates(ctx.emitter(node), (ctx.name(node.input[0]), x), ids)


def _topk(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    x = ctx.type_of(node.input[0])
    axis = int(attrs.get("axis", -1)) % max(x.rank, 1)
    k = ctx.ints(node, 1, attrs, "k") or [0]
    why = topk.refusal(x, axis, k[0])
    if why is not None:
        raise ctx.error(node, why)
    largest = bool(attrs.get("largest", 1))
    name = (ctx.name(node.input[0]), x)
    _, indices = topk.top_k(ctx.emitter(node), name, axis, k[0], largest)
    ctx.values[node.output[1]] = indices


INDEXING_CONVERTERS: dict[str, Converter] = {
    "ArgMax": _argmax,
    "CumSum": _cumsum,
    "Expand": _expand,
    "Gather": _gather,
    "GatherElements": _gather_elements,
    "GatherND": _gather_nd,
    "Pad": _pad,
    "Tile": _tile,
    "TopK": _topk,
}
