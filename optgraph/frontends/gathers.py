"""Gathers with run-time indices as IR `get_rows`, for both importers (torch and ONNX).

`get_rows(table [R, D], ids)` picks whole rows; every gather below becomes one, on the input
reshaped so that what it picks is a row, with the indices turned into row numbers:

    x[ids], ONNX Gather {axis}       rows_along(x, axis, ids): axis moved first (a transpose when
                                     it is not), x as [x.shape[axis], rest], negative ids counted
                                     from the end: where(ids < 0, ids + n, ids)
    torch.gather, GatherElements     elements_along(x, dim, ids): x as [numel, 1], row numbers
                                     ids · stride(dim) + offset(p), offset(p) the other axes' part
                                     (a constant folded at import)
    ONNX GatherND (batch_dims 0)     rows_at_coordinates(x, ids [.., r]): x as [prod(x.shape[:r]),
                                     rest], row number Σ wrap(ids[.., i]) · stride_i

Each importer passes its `emitter.Emitter`. Indices out of range are `get_rows`' to refuse where
it can see them (past the table's rows); one out of range along an inner axis of a flattened
table reads another element (torch and onnx raise). O(1) nodes a gather (O(r) for r
coordinates), O(numel) constants for `elements_along`.
"""

from __future__ import annotations

import math

import numpy as np

from optgraph.frontends.emitter import Emitter
from optgraph.ir.graph import AttrValue, TensorType
from optgraph.reference.kernels import numpy_dtype


def _wrapped(em: Emitter, ids: str, index: TensorType, size: int) -> str:
    """`ids` with a negative position counted from the end of an axis of `size`."""
    dtype = numpy_dtype(index.dtype)
    zero, n = em.constant(np.array(0, dtype), "zero"), em.constant(np.array(size, dtype), "size")
    below = em.step("less", [ids, zero], index.with_dtype("bool"))
    return em.step("where", [below, em.step("add", [ids, n], index), ids], index)


def rows_along(em: Emitter, x: tuple[str, TensorType], axis: int,
               ids: tuple[str, TensorType]) -> str:  # fmt: skip
    """x taken at `ids` along `axis` (torch's x[ids] at axis 0, ONNX Gather): the result has
    x's shape with `axis` replaced by ids' shape."""
    (name, xt), (index_name, index) = x, ids
    moved = xt
    if axis:
        perm = (axis, *(a for a in range(xt.rank) if a != axis))
        moved = xt.with_shape(xt.shape[a] for a in perm)
        name = em.step("transpose", [name], moved, {"perm": perm})
    width = math.prod(moved.shape[1:])
    table = moved.with_shape((moved.shape[0], width))
    rows = em.step("reshape", [name], table, {"shape": table.shape})
    index_name = _wrapped(em, index_name, index, moved.shape[0])
    picked = em.step("get_rows", [rows, index_name], xt.with_shape((*index.shape, width)))
    front = (*index.shape, *moved.shape[1:])
    if not axis:
        return em.last("reshape", [picked], {"shape": front})
    shaped = em.step("reshape", [picked], xt.with_shape(front), {"shape": front})
    k = len(index.shape)  # ids' axes go back to where `axis` was
    rest = list(range(k, len(front)))
    perm = (*rest[:axis], *range(k), *rest[axis:])
    return em.last("transpose", [shaped], {"perm": perm})


def elements_along(em: Emitter, x: tuple[str, TensorType], dim: int,
                   ids: tuple[str, TensorType]) -> str:  # fmt: skip
    """torch.gather / ONNX GatherElements: out[p] = x[p with axis `dim` replaced by ids[p]]
    (ids of x's rank; negative ids counted from the end of `dim`)."""
    (x_name, xt), (name, index) = x, ids
    strides = [math.prod(xt.shape[k + 1 :]) for k in range(xt.rank)]
    grids = np.indices(index.shape, dtype=np.int64)
    rest = (grids[k] * strides[k] for k in range(xt.rank) if k != dim)
    offset = sum(rest, np.zeros((), np.int64))
    wide = index.with_dtype("i64")
    if index.dtype != "i64":
        name = em.step("cast", [name], wide, {"dtype": "i64"})
    name = _wrapped(em, name, wide, xt.shape[dim])
    if strides[dim] != 1:
        name = em.step("mul", [name, em.constant(np.array(strides[dim], np.int64), "stride")], wide)
    if np.any(offset):
        name = em.step("add", [name, em.constant(offset, "offset")], wide)
    table = xt.with_shape((xt.numel, 1))
    rows = em.step("reshape", [x_name], table, {"shape": table.shape})
    picked = em.step("get_rows", [rows, name], xt.with_shape((*index.shape, 1)))
    return em.last("reshape", [picked], {"shape": index.shape})


def rows_at_coordinates(em: Emitter, x: tuple[str, TensorType],
                        ids: tuple[str, TensorType]) -> str:  # fmt: skip
    """ONNX GatherND with batch_dims 0: ids [.., r] are coordinates into x's first r axes; the
    result is ids.shape[:-1] + x.shape[r:]."""
    (x_name, xt), (ids_name, index) = x, ids
    r = index.shape[-1]
    lead, width = xt.shape[:r], math.prod(xt.shape[r:])
    coordinate = index.with_shape((*index.shape[:-1], 1))
    total = ""
    for i in range(r):
        attrs: dict[str, AttrValue] = {"axis": index.rank - 1, "start": i, "end": i + 1}
        part = em.step("slice", [ids_name], coordinate, attrs)
        part = _wrapped(em, part, coordinate, lead[i])
        stride = math.prod(lead[i + 1 :])
        if stride != 1:
            scale = em.constant(np.array(stride, numpy_dtype(index.dtype)), "stride")
            part = em.step("mul", [part, scale], coordinate)
        total = part if not total else em.step("add", [total, part], coordinate)
    rows_ids = index.with_shape(index.shape[:-1])
    total = em.step("reshape", [total], rows_ids, {"shape": rows_ids.shape})
    table = xt.with_shape((math.prod(lead), width))
    rows = em.step("reshape", [x_name], table, {"shape": table.shape})
    picked = em.step("get_rows", [rows, total], xt.with_shape((*rows_ids.shape, width)))
    return em.last("reshape", [picked], {"shape": (*rows_ids.shape, *xt.shape[r:])})
