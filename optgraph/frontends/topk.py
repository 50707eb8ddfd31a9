"""torch.topk and ONNX TopK -> k rounds of argmax over what is not yet taken, then the values
gathered (`top_k`, on either importer's `emitter.Emitter`).

    values, indices = torch.topk(x, k, dim)       (largest; sorted, ties to the lower position)

    round i:  key_i  = x                          (i = 0)
                     = where(taken, lowest, x)    (lowest: -inf, or the integer dtype's minimum)
              pick_i = argmax(key_i) {axis = dim, keepdims}
                       where max(key_i) is `lowest`, every position left ties with the taken
                       ones: the first position not taken instead (argmax of not(taken))
              taken  = or(taken, equal(positions, pick_i))
    indices = concat(pick_0, .., pick_k-1) {axis = dim}
    values  = x at indices along dim (`gathers.elements_along`)

`largest=False` (ONNX `largest = 0`) runs the rounds on neg(x), a NaN as the lowest key. A NaN
counts as the largest value (argmax takes the first NaN), as torch orders it. Equal values come
lowest position first (torch leaves their order unspecified); with `largest=False`, a NaN and a
+inf tie as keys. The router of an MoE layer picks its experts so (transformers' Mixtral and
Qwen2-MoE with the `batched_mm` experts). O(k) nodes of O(numel) work each; meant for small k.
"""

from __future__ import annotations

import numpy as np

from optgraph.frontends.emitter import Emitter
from optgraph.frontends.gathers import elements_along
from optgraph.ir.graph import FLOAT_DTYPES, AttrValue, TensorType
from optgraph.reference.kernels import numpy_dtype

# Rounds (k) at most: each adds about eight nodes over the whole input.
MAX_K = 16


def refusal(x: TensorType, dim: int, k: int) -> str | None:
    """Why topk(x, k) along `dim` does not map, None where it does."""
    if x.dtype == "bool":
        return "topk of booleans"
    if not 1 <= k <= min(MAX_K, x.shape[dim]):
        return f"topk with k = {k} (1 to {MAX_K}, at most the axis's length)"
    return None


def top_k(
    em: Emitter, x: tuple[str, TensorType], dim: int, k: int, largest: bool
) -> tuple[str, str]:
    """(values, indices) of the k largest (or smallest) along `dim` (`refusal` is None); the
    values are `em.last`'s node, the indices (i64) an intermediate."""
    name, xt = x
    lowest = em.constant(np.array(_lowest(xt.dtype), numpy_dtype(xt.dtype)), "lowest")
    keys = name if largest else _smallest_first(em, name, xt, lowest)
    kept = xt.with_shape(1 if a == dim else d for a, d in enumerate(xt.shape))
    picks = _rounds(em, (keys, xt), (dim, k), kept, lowest)
    index = TensorType("i64", kept.shape[:dim] + (k,) + kept.shape[dim + 1 :])
    indices = picks[0] if k == 1 else em.step("concat", picks, index, {"axis": dim})
    return elements_along(em, x, dim, (indices, index)), indices


def _lowest(dtype: str) -> float | int:
    if dtype in FLOAT_DTYPES:  # bf16's NumPy dtype (ml_dtypes) is of kind "V", not "f"
        return -np.inf
    return int(np.iinfo(np.dtype(numpy_dtype(dtype))).min)


def _smallest_first(em: Emitter, name: str, x: TensorType, lowest: str) -> str:
    """Keys whose largest are x's smallest: neg(x), a NaN (largest in torch's order, so last
    here) as the lowest key."""
    negated = em.step("neg", [name], x)
    if not x.dtype.startswith(("f", "bf")):
        return negated
    number = em.step("equal", [name, name], x.with_dtype("bool"))  # false for NaN
    return em.step("where", [number, negated, lowest], x)


def _rounds(
    em: Emitter,
    keys: tuple[str, TensorType],
    along_k: tuple[int, int],
    kept: TensorType,
    lowest: str,
) -> list[str]:
    """The k picks along dim (`along_k` = (dim, k)), each an i64 index of shape `kept` (x with
    `dim` of length 1); `lowest`: the key taken positions get."""
    name, x = keys
    dim, k = along_k
    positions_shape = tuple(x.shape[dim] if a == dim else 1 for a in range(x.rank))
    positions = em.constant(
        np.arange(x.shape[dim], dtype=np.int64).reshape(positions_shape), "positions"
    )
    flags, index = x.with_dtype("bool"), kept.with_dtype("i64")
    along: dict[str, AttrValue] = {"axis": dim, "keepdims": True}
    picks: list[str] = []
    taken = ""
    for i in range(k):
        key = name if i == 0 else em.step("where", [taken, lowest, name], x)
        pick = em.step("argmax", [key], index, along)
        if i:
            top = em.step("max", [key], kept, {"axes": (dim,), "keepdims": True})
            none_left = em.step("equal", [top, lowest], kept.with_dtype("bool"))
            free = em.step("not", [taken], flags)
            free = em.step("cast", [free], x.with_dtype("i32"), {"dtype": "i32"})
            first_free = em.step("argmax", [free], index, along)
            pick = em.step("where", [none_left, first_free, pick], index)
        picks.append(pick)
        if i + 1 < k:
            hit = em.step("equal", [positions, pick], flags)
            taken = hit if i == 0 else em.step("or", [taken, hit], flags)
    return picks
