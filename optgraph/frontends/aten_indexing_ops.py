"""ATen indexing ops (the indexing family) -> IR `expand`, `tile`, `pad`, `cumsum`, `argmax`,
and gathers as `get_rows`.

    x.expand(2, -1, 4)              aten.expand           -> expand {shape}  (the export's shape)
    x.repeat(1, 2)                  aten.repeat           -> tile {repeats} (after a reshape when
                                                             repeats has more axes than x)
    F.pad(x, (1, 2))                aten.constant_pad_nd  -> pad {pads} (ATen's last-axis-first
                                                             pairs turned into ONNX order)
    torch.topk(x, k, dim)           -> k rounds of argmax (`topk.py`)
    x.cumsum(1), x.argmax(-1)       -> cumsum {axis}, argmax {axis, keepdims} (a cumsum whose
                                                             result is wider, e.g. torch's int32
                                                             -> int64: cast first, as torch does)
    x.max(dim, keepdim)             aten.max.dim          -> max {axes, keepdims} (values) and
                                                             argmax {axis, keepdims} (indices)
    mask[b_idx, kv_idx]             aten.index.Tensor     -> get_rows of the indexed leading
                                                             axes (flattened) at the constant
                                                             flat positions, then a reshape
    torch.gather(x, 1, idx)         aten.gather           -> get_rows of x's elements
                                                             (`gathers.elements_along`)
    x[..., ::2]                     aten.slice (step > 1) -> `stepped_slices.stepped_slice_nodes`
    qkv[..., [-2], :]               aten.index.Tensor     -> slices of that axis (one a run of
    (slices, then one index)                                 consecutive indices), concatenated;
                                                             a 0-d index drops the axis (reshape)
    experts[ids] (ids at run time)  aten.index.Tensor     -> get_rows of the leading axis
                                                             (`gathers.rows_along`)

Refused with their reason: negative pads (cropping), argmax without a dim (of the flattened
tensor), indexing with several run-time indices, boolean or out-of-range constant indices,
several index tensors after a slice, an index tensor of more than one axis after a slice, more
than MAX_RUNS runs, a gather whose index has another rank than its input. Run-time indices out
of range: see `gathers.py`.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from optgraph.frontends import topk
from optgraph.frontends.gathers import elements_along, rows_along
from optgraph.frontends.stepped_slices import stepped_slice_nodes
from optgraph.frontends.torch_values import (
    Converter,
    TorchContext,
    arg,
    unsupported,
    value_type,
)
from optgraph.ir.graph import AttrValue, TensorType


def _expand(ctx: TorchContext, node: Any) -> None:
    out = ctx.result_type(node)
    if ctx.type_of(node.args[0]).shape == out.shape:
        ctx.alias(node, node.args[0])
        return
    ctx.emit(node, "expand", [ctx.name_of(node.args[0])], {"shape": out.shape})


def _repeat(ctx: TorchContext, node: Any) -> None:
    x = ctx.type_of(node.args[0])
    repeats = tuple(int(r) for r in node.args[1])
    name = ctx.name_of(node.args[0])
    if len(repeats) > x.rank:
        padded = x.with_shape((1,) * (len(repeats) - x.rank) + x.shape)
        name = ctx.step(node, "reshape", [name], padded, {"shape": padded.shape})
    ctx.emit(node, "tile", [name], {"repeats": repeats})


def _constant_pad(ctx: TorchContext, node: Any) -> None:
    x = ctx.type_of(node.args[0])
    pairs = [int(p) for p in node.args[1]]
    if min(pairs, default=0) < 0:
        raise unsupported(node, "negative pads (cropping) are not supported")
    before, after = [0] * x.rank, [0] * x.rank
    for k in range(len(pairs) // 2):  # ATen: (last axis before, after, next-to-last ...)
        axis = x.rank - 1 - k
        before[axis], after[axis] = pairs[2 * k], pairs[2 * k + 1]
    attrs: dict[str, AttrValue] = {
        "pads": tuple(before + after),
        "value": float(arg(node, 2, "value", 0.0)),
    }
    ctx.emit(node, "pad", [ctx.name_of(node.args[0])], attrs)


def _cumsum(ctx: TorchContext, node: Any) -> None:
    x, out = ctx.type_of(node.args[0]), ctx.result_type(node)
    axis = int(node.args[1]) % max(x.rank, 1)
    name = ctx.name_of(node.args[0])
    if out.dtype != x.dtype:  # torch sums in the result's dtype: the input is cast to it first
        name = ctx.step(node, "cast", [name], x.with_dtype(out.dtype), {"dtype": out.dtype})
    ctx.emit(node, "cumsum", [name], {"axis": axis})


def _gather(ctx: TorchContext, node: Any) -> None:
    """torch.gather(x, dim, index) (`gathers.elements_along`). RoBERTa's token types are read so."""
    x, index = ctx.type_of(node.args[0]), ctx.type_of(node.args[2])
    dim = int(node.args[1]) % max(x.rank, 1)
    if index.rank != x.rank:
        raise unsupported(node, f"a gather whose index ({index}) has another rank than {x}")
    ids = (ctx.name_of(node.args[2]), index)
    elements_along(ctx.emitter(node), (ctx.name_of(node.args[0]), x), dim, ids)


def _topk(ctx: TorchContext, node: Any) -> None:
    """torch.topk (`topk.top_k`): its values and indices are the fx node's results 0 and 1."""
    x = ctx.type_of(node.args[0])
    k, dim = int(node.args[1]), int(arg(node, 2, "dim", -1)) % max(x.rank, 1)
    why = topk.refusal(x, dim, k)
    if why is not None:
        raise unsupported(node, why)
    emitter = ctx.emitter(node, last=value_type(node, node.meta["val"][0]))
    name = (ctx.name_of(node.args[0]), x)
    values, indices = topk.top_k(emitter, name, dim, k, bool(arg(node, 3, "largest", True)))
    ctx.values[node.name] = ctx.values[f"{node.name}#0"] = values
    ctx.values[f"{node.name}#1"] = indices


def stepped_slice(ctx: TorchContext, node: Any, axis: int, picked: range) -> None:
    """x[.., start:end:step, ..] on `axis` (`picked`: the positions kept, step > 1) as the nodes
    of `stepped_slices.stepped_slice_nodes`."""
    if not picked:
        raise unsupported(node, "an empty slice with a step")
    x = ctx.type_of(node.args[0])
    name = ctx.name_of(node.args[0])
    *steps, (op, attrs, _) = stepped_slice_nodes(x.shape, axis, picked)
    for step_op, step_attrs, shape in steps:
        name = ctx.step(node, step_op, [name], x.with_shape(shape), step_attrs)
    ctx.emit(node, op, [name], attrs)


def _argmax(ctx: TorchContext, node: Any) -> None:
    dim = arg(node, 1, "dim")
    if dim is None:
        raise unsupported(node, "argmax without a dim (of the flattened tensor)")
    attrs: dict[str, AttrValue] = {
        "axis": int(dim),
        "keepdims": bool(arg(node, 2, "keepdim", False)),
    }
    ctx.emit(node, "argmax", [ctx.name_of(node.args[0])], attrs)


def _max_dim(ctx: TorchContext, node: Any) -> None:
    """torch.max(x, dim, keepdim): its values (`max {axes}`) and indices (`argmax`, the first
    maximum) are the fx node's results 0 and 1; a result nobody reads dies at the draft's end.
    gpt-oss's attention with sinks takes the row maximum so."""
    x = ctx.type_of(node.args[0])
    if x.rank == 0:
        raise unsupported(node, "max along a dim of a 0-d tensor")
    dim = int(node.args[1]) % x.rank
    keep = bool(arg(node, 2, "keepdim", False))
    values_type = value_type(node, node.meta["val"][0])
    name = ctx.name_of(node.args[0])
    reduce: dict[str, AttrValue] = {"axes": (dim,), "keepdims": keep}
    values = ctx.step(node, "max", [name], values_type, reduce)
    along: dict[str, AttrValue] = {"axis": dim, "keepdims": keep}
    indices = ctx.step(node, "argmax", [name], values_type.with_dtype("i64"), along)
    ctx.values[node.name] = ctx.values[f"{node.name}#0"] = values
    ctx.values[f"{node.name}#1"] = indices


def _constant_indices(ctx: TorchContext, node: Any, lead: tuple[int, ...]) -> np.ndarray:
    """The flat positions (row-major over `lead`) the constant index tensors select."""
    arrays = []
    for index in node.args[1]:
        value = None if index is None else ctx.draft.constants.get(ctx.name_of(index))
        if index is None:
            raise unsupported(node, "a slice among several index tensors is not supported")
        if value is None:
            raise unsupported(node, "an index computed at run time (only constant indices map)")
        if value.dtype == np.bool_:
            raise unsupported(node, "boolean mask indexing is not supported")
        arrays.append(value.astype(np.int64))
    try:
        arrays = list(np.broadcast_arrays(*arrays))
    except ValueError:
        raise unsupported(node, "index tensors that do not broadcast") from None
    for a, (axis, size) in zip(arrays, enumerate(lead)):
        if a.size and (a.min() < -size or a.max() >= size):
            raise unsupported(node, f"an index out of range for axis {axis} of size {size}")
    normalized = tuple(np.where(a < 0, a + size, a) for a, size in zip(arrays, lead))
    return np.ravel_multi_index(normalized, lead) if lead else np.zeros((), np.int64)


# Most runs of consecutive indices (one slice each) an index after slices maps to.
MAX_RUNS = 64


def _runs(positions: np.ndarray) -> list[tuple[int, int]]:
    """[start, end) of each run of consecutive increasing positions, in order."""
    runs: list[tuple[int, int]] = []
    for p in positions.tolist():
        if runs and runs[-1][1] == p:
            runs[-1] = (runs[-1][0], p + 1)
        else:
            runs.append((p, p + 1))
    return runs


def _index_after_slices(ctx: TorchContext, node: Any, axis: int) -> None:
    """x[:, .., :, i] (`axis` slices, then one index tensor): a constant index of at most one
    axis as slices of `axis`, one a run of consecutive indices, concatenated along it (Falcon's
    fused q/k/v split, `qkv[..., [-2], :]`; a 0-d index drops the axis); an index computed at
    run time as a gather along `axis` (transformers' `hidden_states[:, logits_to_keep, :]` with
    a tensor `logits_to_keep`)."""
    x, out = ctx.type_of(node.args[0]), ctx.result_type(node)
    index = node.args[1][axis]
    value = ctx.draft.constants.get(ctx.name_of(index))
    if value is None:  # computed at run time: a gather along `axis` (`gathers.rows_along`)
        ids = ctx.type_of(index)
        if ids.dtype not in ("i32", "i64"):
            raise unsupported(node, f"an index of dtype {ids.dtype} computed at run time")
        name = ctx.name_of(node.args[0])
        rows_along(ctx.emitter(node), (name, x), axis, (ctx.name_of(index), ids))
        return
    if value.dtype == np.bool_:
        raise unsupported(node, "boolean mask indexing is not supported")
    if value.ndim > 1:
        raise unsupported(node, "an index tensor of more than one axis after a slice")
    size = x.shape[axis]
    flat = value.astype(np.int64).reshape(-1)
    if flat.size == 0:
        raise unsupported(node, "an empty index tensor")
    if flat.min() < -size or flat.max() >= size:
        raise unsupported(node, f"an index out of range for axis {axis} of size {size}")
    runs = _runs(np.where(flat < 0, flat + size, flat))
    if len(runs) > MAX_RUNS:
        raise unsupported(node, f"an index of more than {MAX_RUNS} runs of consecutive positions")
    name = ctx.name_of(node.args[0])
    pieces = []
    for start, end in runs:
        shape = x.shape[:axis] + (end - start,) + x.shape[axis + 1 :]
        attrs: dict[str, AttrValue] = {"axis": axis, "start": start, "end": end}
        if value.ndim == 1 and len(runs) == 1:
            ctx.emit(node, "slice", [name], attrs)
            return
        pieces.append(ctx.step(node, "slice", [name], x.with_shape(shape), attrs))
    if value.ndim == 0:
        ctx.emit(node, "reshape", pieces, {"shape": out.shape})
    else:
        ctx.emit(node, "concat", pieces, {"axis": axis})


def _rows_at_run_time(ctx: TorchContext, node: Any) -> None:
    """x[i] with an integer index computed at run time (`gathers.rows_along` on axis 0): MoE
    experts' weights picked by the router (transformers' `batched_mm`, `gate_up_proj[ids]`)."""
    x = ctx.type_of(node.args[0])
    index = ctx.type_of(node.args[1][0])
    if index.dtype not in ("i32", "i64"):
        raise unsupported(node, f"an index of dtype {index.dtype} computed at run time")
    if x.rank < 1 or x.shape[0] == 0:
        raise unsupported(node, f"indexing the leading axis of {x}")
    ids = (ctx.name_of(node.args[1][0]), index)
    rows_along(ctx.emitter(node), (ctx.name_of(node.args[0]), x), 0, ids)


def _index(ctx: TorchContext, node: Any) -> None:
    """x[i0, .., ik-1] with constant indices (HF attention masks index the padding mask so), or
    x[:, .., :, i] (`_index_after_slices`)."""
    indices = list(node.args[1])
    slices = next((k for k, i in enumerate(indices) if i is not None), len(indices))
    if slices and len(indices) == slices + 1:
        _index_after_slices(ctx, node, slices)
        return
    if len(indices) == 1 and ctx.draft.constants.get(ctx.name_of(indices[0])) is None:
        _rows_at_run_time(ctx, node)
        return
    x, out = ctx.type_of(node.args[0]), ctx.result_type(node)
    lead = x.shape[: len(node.args[1])]
    flat = _constant_indices(ctx, node, lead)
    width = math.prod(x.shape[len(lead) :])
    table = x.with_shape((math.prod(lead), width))
    rows = ctx.step(node, "reshape", [ctx.name_of(node.args[0])], table, {"shape": table.shape})
    ids = ctx.draft.constant(flat.astype(np.int64), "index")
    picked = TensorType(x.dtype, (*ctx.draft.type_of(ids).shape, width))
    gathered = ctx.step(node, "get_rows", [rows, ids], picked)
    ctx.emit(node, "reshape", [gathered], {"shape": out.shape})


INDEXING_CONVERTERS: dict[str, Converter] = {
    "aten.argmax.default": _argmax,
    "aten.constant_pad_nd.default": _constant_pad,
    "aten.cumsum.default": _cumsum,
    "aten.expand.default": _expand,
    "aten.gather.default": _gather,
    "aten.index.Tensor": _index,
    "aten.max.dim": _max_dim,
    "aten.repeat.default": _repeat,
    "aten.topk.default": _topk,
}
