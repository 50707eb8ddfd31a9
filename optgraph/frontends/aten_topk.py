"""torch.topk -> k rounds of argmax over what is not yet taken, then the values gathered.

    values, indices = torch.topk(x, k, dim)       (largest; sorted, ties to the lower position)

    round i:  key_i  = x                          (i = 0)
                     = where(taken, lowest, x)    (lowest: -inf, or the integer dtype's minimum)
              pick_i = argmax(key_i) {axis = dim, keepdims}
                       where max(key_i) is `lowest`, every position left ties with the taken
                       ones: the first position not taken instead (argmax of not(taken))
              taken  = or(taken, equal(positions, pick_i))
    indices = concat(pick_0, .., pick_k-1) {axis = dim}
    values  = x at indices along dim (`aten_indexing_ops.along_axis`)

`largest=False` runs the rounds on neg(x), a NaN as the lowest key. A NaN counts as the largest
value (argmax takes the first NaN), as torch orders it. Equal values come lowest position first
(torch leaves their order unspecified); with `largest=False`, a NaN and a +inf tie as keys. The router of an MoE layer picks its experts so (transformers'
Mixtral and Qwen2-MoE with the `batched_mm` experts). O(k) nodes of O(numel) work each; meant for
small k.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from optgraph.frontends.aten_indexing_ops import along_axis
from optgraph.frontends.torch_values import Converter, TorchContext, arg, unsupported, value_type
from optgraph.ir.graph import TensorType
from optgraph.runtime.reference_kernels import numpy_dtype

# Rounds (k) at most: each adds about eight nodes over the whole input.
MAX_K = 16


def _lowest(dtype: str) -> float | int:
    kind = np.dtype(numpy_dtype(dtype))
    return -np.inf if kind.kind == "f" else int(np.iinfo(kind).min)


def _topk(ctx: TorchContext, node: Any) -> None:
    x = ctx.type_of(node.args[0])
    k = int(node.args[1])
    dim = int(arg(node, 2, "dim", -1)) % max(x.rank, 1)
    if not 1 <= k <= min(MAX_K, x.shape[dim]):
        raise unsupported(node, f"topk with k = {k} (1 to {MAX_K}, at most the axis's length)")
    if x.dtype == "bool":
        raise unsupported(node, "topk of booleans")
    name = ctx.name_of(node.args[0])
    keys = name if arg(node, 3, "largest", True) else _smallest_first(ctx, node, name, x)
    kept = x.with_shape(1 if a == dim else d for a, d in enumerate(x.shape))
    picks = _rounds(ctx, node, (keys, x), dim, k, kept)
    index = TensorType("i64", kept.shape[:dim] + (k,) + kept.shape[dim + 1 :])
    indices = picks[0] if k == 1 else ctx.step(node, "concat", picks, index, {"axis": dim})
    values = along_axis(ctx, node, (name, x), dim, (indices, index))
    values_type = value_type(node, node.meta["val"][0])
    values = ctx.step(node, "reshape", [values], values_type, {"shape": values_type.shape})
    ctx.values[node.name] = values
    ctx.values[f"{node.name}#0"] = values
    ctx.values[f"{node.name}#1"] = indices


def _smallest_first(ctx: TorchContext, node: Any, name: str, x: TensorType) -> str:
    """Keys whose largest are x's smallest: neg(x), a NaN (largest in torch's order, so last
    here) as the lowest key."""
    negated = ctx.step(node, "neg", [name], x)
    if not x.dtype.startswith(("f", "bf")):
        return negated
    lowest = ctx.draft.constant(np.array(_lowest(x.dtype), numpy_dtype(x.dtype)), "lowest")
    number = ctx.step(node, "equal", [name, name], x.with_dtype("bool"))  # false for NaN
    return ctx.step(node, "where", [number, negated, lowest], x)


def _rounds(
    ctx: TorchContext, node: Any, keys: tuple[str, TensorType], dim: int, k: int, kept: TensorType
) -> list[str]:
    """The k picks, each an i64 index of shape `kept` (x with `dim` of length 1)."""
    name, x = keys
    positions_shape = tuple(x.shape[dim] if a == dim else 1 for a in range(x.rank))
    positions = ctx.draft.constant(
        np.arange(x.shape[dim], dtype=np.int64).reshape(positions_shape), "positions"
    )
    lowest = ctx.draft.constant(np.array(_lowest(x.dtype), numpy_dtype(x.dtype)), "lowest")
    flags, index = x.with_dtype("bool"), kept.with_dtype("i64")
    along = {"axis": dim, "keepdims": True}
    picks: list[str] = []
    taken = ""
    for i in range(k):
        key = name if i == 0 else ctx.step(node, "where", [taken, lowest, name], x)
        pick = ctx.step(node, "argmax", [key], index, along)
        if i:
            top = ctx.step(node, "max", [key], kept, {"axes": (dim,), "keepdims": True})
            none_left = ctx.step(node, "equal", [top, lowest], kept.with_dtype("bool"))
            free = ctx.step(node, "not", [taken], flags)
            free = ctx.step(node, "cast", [free], x.with_dtype("i32"), {"dtype": "i32"})
            first_free = ctx.step(node, "argmax", [free], index, along)
            pick = ctx.step(node, "where", [none_left, first_free, pick], index)
        picks.append(pick)
        if i + 1 < k:
            hit = ctx.step(node, "equal", [positions, pick], flags)
            taken = hit if i == 0 else ctx.step(node, "or", [taken, hit], flags)
    return picks


TOPK_CONVERTERS: dict[str, Converter] = {"aten.topk.default": _topk}
