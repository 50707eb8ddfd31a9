"""The source ops of a mixture-of-experts dispatch that the IR does not have, as their source
defines them: what `raising_moe` evaluates a dispatch's cone with (`raising_probe.probe`'s
`kernels`) to tell whether it computes the moe op.

    aten.sort(x, dim, descending)          -> values / indices (the node's `result`)
    aten.histc(x, bins, min, max)          -> counts in equal bins
    aten.index_put(self, [index], values)  -> self with the rows at index replaced (or added)
    grouped_mm_fallback(rows, stack, offs) -> rows offs[i-1]:offs[i] times stack[i]

The attributes are the source's arguments by name (`torch_export` records them on the nodes it
cannot map). Not evaluated (a `ValueError`, so nothing is raised): index_put with several or
boolean indices, aten._grouped_mm without offsets or with a bias.
"""

from __future__ import annotations

import numpy as np

from optgraph.frontends.raising_probe import NodeKernel
from optgraph.ir.graph import AttrValue, Node
from optgraph.reference.kernels import numpy_dtype

__all__ = ["DISPATCH_KERNELS"]


def _number(node: Node, key: str, default: float) -> float:
    value: AttrValue = node.attrs.get(key, default)
    if not isinstance(value, int | float):
        # a ValueError, as every argument the probe cannot evaluate: the cone is not matched
        raise ValueError(f"{node.op}: argument {key} is {value!r}, not a number")  # noqa: TRY004
    return float(value)


def _sort(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """aten.sort: (values, indices) along `dim`; `result` picks one. Ties keep their order (any
    order gives the same dispatch: the permutation is undone with itself)."""
    x = args[0]
    dim = int(_number(node, "dim", -1))
    keys = -x if node.attrs.get("descending", False) else x
    order = np.argsort(keys, axis=dim, kind="stable")
    if node.attrs.get("result", 0) == 1:
        return order.astype(np.int64)
    return np.take_along_axis(x, order, axis=dim)


def _histc(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """aten.histc: counts in `bins` equal bins over [min, max] (the data's range when both are
    0), values outside left out, max in the last bin."""
    x = args[0].astype(np.float64).reshape(-1)
    bins = int(_number(node, "bins", 100))
    low, high = _number(node, "min", 0), _number(node, "max", 0)
    if low == high == 0 and x.size:
        low, high = float(x.min()), float(x.max())
    if low == high:
        low, high = low - 1, high + 1
    inside = x[(x >= low) & (x <= high)]
    bin_of = np.minimum(((inside - low) * bins / (high - low)).astype(np.int64), bins - 1)
    return np.bincount(bin_of, minlength=bins).astype(args[0].dtype)


def _index_put(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """aten.index_put with one integer index tensor: `self` with the rows at the index set to
    (or, with `accumulate`, increased by) `values`."""
    if node.attrs.get("indices") != 1 or len(args) != 3 or args[1].dtype == np.bool_:
        raise ValueError("index_put: only one integer index tensor is evaluated")
    out = np.array(args[0], copy=True)
    index = args[1].astype(np.int64)
    if node.attrs.get("accumulate", False):
        np.add.at(out, index, args[2])
    else:
        out[index] = args[2]
    return out


def _grouped_mm(node: Node, args: list[np.ndarray]) -> np.ndarray:
    """transformers' grouped_mm_fallback / aten._grouped_mm: rows offs[i-1]:offs[i] of the input
    times matrix i of the `[E, K, N]` stack; rows past the last offset are zeros."""
    if len(args) != 3 or args[1].ndim != 3 or node.type is None:
        raise ValueError("grouped products: only (input [S,K], weight [E,K,N], offsets)")
    rows, stack, offsets = args
    out = np.zeros((rows.shape[0], stack.shape[2]), np.float32)
    start = 0
    for i, end in enumerate(offsets.astype(np.int64).tolist()):
        out[start:end] = rows[start:end].astype(np.float32) @ stack[i].astype(np.float32)
        start = end
    return out.astype(numpy_dtype(node.type.dtype))


DISPATCH_KERNELS: dict[str, NodeKernel] = {
    "aten._grouped_mm.default": _grouped_mm,
    "aten.histc.default": _histc,
    "aten.index_put.default": _index_put,
    "aten.sort.default": _sort,
    "aten.sort.stable": _sort,
    "transformers.grouped_mm_fallback.default": _grouped_mm,
}
