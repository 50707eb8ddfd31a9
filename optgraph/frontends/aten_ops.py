"""ATen op -> IR nodes: one converter per ATen overload that optgraph maps.

`CONVERTERS` maps the overload's name (`"aten.linear.default"`) to a function that reads the
torch.fx node and appends IR nodes to the draft through a `TorchContext`. The elementwise ops'
one-to-one overloads (`aten.exp.default` -> `exp`) come from their declarations
(`ir/op_elementwise.py`, `aten`); the rest are listed here and in the family modules
(`aten_<family>_ops.py`). Result types come from the export's own shape propagation
(`node.meta["val"]`), never guessed. Ops without a converter reach the draft under their ATen
name and are reported by `Draft.finish` unless raising consumed them; `cos`, `sin` and `erf` go
in as draft ops of those names for the raising rules to find.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from optgraph.frontends.aten_arithmetic_ops import ARITHMETIC_CONVERTERS
from optgraph.frontends.aten_attention_ops import ATTENTION_CONVERTERS
from optgraph.frontends.aten_image_ops import IMAGE_CONVERTERS
from optgraph.frontends.aten_indexing_ops import INDEXING_CONVERTERS, stepped_slice
from optgraph.frontends.aten_logic_ops import LOGIC_CONVERTERS
from optgraph.frontends.torch_values import Converter, TorchContext, arg, unsupported, value_type
from optgraph.ir.graph import AttrValue, TensorType
from optgraph.ir.op_elementwise import ELEMENTWISE
from optgraph.reference.kernels import numpy_dtype

# -- elementwise ---------------------------------------------------------------------------------


def _unary(op: str) -> Converter:
    def convert(ctx: TorchContext, node: Any) -> None:
        ctx.emit(node, op, [ctx.operand(node.args[0], ctx.result_type(node))])

    return convert


def _binary(op: str) -> Converter:
    def convert(ctx: TorchContext, node: Any) -> None:
        out = ctx.result_type(node)
        a, b = node.args[0], node.args[1]
        alpha = arg(node, 2, "alpha", 1)
        if op == "mul" and not hasattr(b, "name") and out.dtype.startswith(("f", "bf")):
            ctx.emit(node, "scale", [ctx.operand(a, out)], {"factor": float(b)})
            return
        if op == "mul" and not hasattr(a, "name") and out.dtype.startswith(("f", "bf")):
            ctx.emit(node, "scale", [ctx.operand(b, out)], {"factor": float(a)})
            return
        right = ctx.operand(b, out)
        if alpha != 1:
            right = ctx.step(node, "scale", [right], ctx.draft.type_of(right), {"factor": alpha})
        ctx.emit(node, op, [ctx.operand(a, out), right])

    return convert


def _div(ctx: TorchContext, node: Any) -> None:
    if arg(node, 2, "rounding_mode") is not None:
        raise unsupported(node, "rounding division is not supported")
    out = ctx.result_type(node)
    ctx.emit(node, "div", [ctx.operand(node.args[0], out), ctx.operand(node.args[1], out)])


def _pow(ctx: TorchContext, node: Any) -> None:
    out = ctx.result_type(node)
    x, exponent = ctx.operand(node.args[0], out), node.args[1]
    if exponent == 2:
        ctx.emit(node, "mul", [x, x])
    elif exponent == 0.5:
        ctx.emit(node, "sqrt", [x])
    else:
        ctx.emit(node, "pow", [x, ctx.operand(exponent, out)])


def _gelu(ctx: TorchContext, node: Any) -> None:
    approximate = arg(node, 1, "approximate", "none")
    ctx.emit(node, "gelu", [ctx.name_of(node.args[0])], {"approximate": approximate})


def _cast(ctx: TorchContext, node: Any) -> None:
    out = ctx.result_type(node)
    if ctx.type_of(node.args[0]).dtype == out.dtype:
        ctx.alias(node, node.args[0])
    else:
        ctx.emit(node, "cast", [ctx.name_of(node.args[0])], {"dtype": out.dtype})


def _identity(ctx: TorchContext, node: Any) -> None:
    ctx.alias(node, node.args[0])


# -- reductions, norms, products -----------------------------------------------------------------


def _reduce(op: str) -> Converter:
    def convert(ctx: TorchContext, node: Any) -> None:
        dims = arg(node, 1, "dim")
        attrs: dict[str, AttrValue] = {"keepdims": bool(arg(node, 2, "keepdim", False))}
        if dims:
            attrs["axes"] = tuple([dims] if isinstance(dims, int) else dims)
        ctx.emit(node, op, [ctx.name_of(node.args[0])], attrs)

    return convert


def _softmax(op: str) -> Converter:
    def convert(ctx: TorchContext, node: Any) -> None:
        # softmax(x, dim, dtype=torch.float32) (transformers' eager attention): computed in the
        # result's dtype, so a narrower x is cast first.
        x = ctx.operand(node.args[0], ctx.result_type(node))
        ctx.emit(node, op, [x], {"axis": int(node.args[1])})

    return convert


def _norm_operand(ctx: TorchContext, value: Any, x: TensorType, fill: float) -> str:
    if value is not None:
        return ctx.name_of(value)
    return ctx.draft.constant(np.full((x.shape[-1],), fill, dtype=numpy_dtype(x.dtype)))


def _check_last_axis(node: Any, shape: Sequence[int]) -> None:
    if len(shape) != 1:
        raise unsupported(node, f"normalizing over {len(shape)} axes (only the last one is)")


def _layer_norm(ctx: TorchContext, node: Any) -> None:
    x = ctx.type_of(node.args[0])
    _check_last_axis(node, node.args[1])
    w = _norm_operand(ctx, arg(node, 2, "weight"), x, 1.0)
    b = _norm_operand(ctx, arg(node, 3, "bias"), x, 0.0)
    eps = float(arg(node, 4, "eps", 1e-5))
    ctx.emit(node, "layer_norm", [ctx.name_of(node.args[0]), w, b], {"eps": eps})


def _rms_norm(ctx: TorchContext, node: Any) -> None:
    x = ctx.type_of(node.args[0])
    _check_last_axis(node, node.args[1])
    w = _norm_operand(ctx, arg(node, 2, "weight"), x, 1.0)
    eps = arg(node, 3, "eps")
    if eps is None:
        eps = float(np.finfo(np.float32 if x.dtype == "bf16" else numpy_dtype(x.dtype)).eps)
    ctx.emit(node, "rms_norm", [ctx.name_of(node.args[0]), w], {"eps": float(eps)})


def _matmul(ctx: TorchContext, node: Any) -> None:
    ctx.emit(node, "matmul", [ctx.name_of(node.args[0]), ctx.name_of(node.args[1])])


def _linear(ctx: TorchContext, node: Any) -> None:
    bias = arg(node, 2, "bias")
    product = [ctx.name_of(node.args[0]), ctx.name_of(node.args[1])]
    transposed = {"transpose_b": True}
    if bias is None:
        ctx.emit(node, "matmul", product, transposed)
        return
    partial = ctx.step(node, "matmul", product, ctx.result_type(node), transposed)
    ctx.emit(node, "add", [partial, ctx.name_of(bias)])


def _addmm(ctx: TorchContext, node: Any) -> None:
    partial = ctx.step(
        node, "matmul", [ctx.name_of(node.args[1]), ctx.name_of(node.args[2])],
        ctx.result_type(node),
    )  # fmt: skip
    ctx.emit(node, "add", [partial, ctx.name_of(node.args[0])])


# -- data movement ------------------------------------------------------------------------------


def _reshape(ctx: TorchContext, node: Any) -> None:
    out = ctx.result_type(node)
    if ctx.type_of(node.args[0]).shape == out.shape:
        ctx.alias(node, node.args[0])
    else:
        ctx.emit(node, "reshape", [ctx.name_of(node.args[0])], {"shape": out.shape})


def _permute(ctx: TorchContext, node: Any) -> None:
    rank = ctx.type_of(node.args[0]).rank
    perm = tuple(int(d) % rank for d in node.args[1])
    ctx.emit(node, "transpose", [ctx.name_of(node.args[0])], {"perm": perm})


def _transpose(ctx: TorchContext, node: Any) -> None:
    rank = ctx.type_of(node.args[0]).rank
    perm = list(range(rank))
    a, b = (int(arg(node, i, key, -1)) % max(rank, 1) for i, key in ((1, "dim0"), (2, "dim1")))
    if rank >= 2:
        perm[a], perm[b] = perm[b], perm[a]
    ctx.emit(node, "transpose", [ctx.name_of(node.args[0])], {"perm": tuple(perm)})


def _t(ctx: TorchContext, node: Any) -> None:
    perm = (1, 0) if ctx.type_of(node.args[0]).rank == 2 else (0,)
    ctx.emit(node, "transpose", [ctx.name_of(node.args[0])], {"perm": perm})


def _slice(ctx: TorchContext, node: Any) -> None:
    x = ctx.type_of(node.args[0])
    axis = int(arg(node, 1, "dim", 0)) % x.rank
    size = x.shape[axis]
    start, end = arg(node, 2, "start"), arg(node, 3, "end")
    step = int(arg(node, 4, "step", 1))
    if step < 1:
        raise unsupported(node, f"a slice with step {step}")
    start = 0 if start is None else int(start)
    end = size if end is None else int(end)
    start, end, _ = slice(start, end).indices(size)
    if step != 1:
        stepped_slice(ctx, node, axis, range(start, end, step))
        return
    if (start, end) == (0, size):
        ctx.alias(node, node.args[0])
        return
    attrs = {"axis": axis, "start": start, "end": max(start, end)}
    ctx.emit(node, "slice", [ctx.name_of(node.args[0])], attrs)


def _select(ctx: TorchContext, node: Any) -> None:
    x = ctx.type_of(node.args[0])
    axis = int(node.args[1]) % x.rank
    index = int(node.args[2]) % x.shape[axis]
    kept = x.with_shape(1 if i == axis else d for i, d in enumerate(x.shape))
    part = ctx.step(
        node, "slice", [ctx.name_of(node.args[0])], kept,
        {"axis": axis, "start": index, "end": index + 1},
    )  # fmt: skip
    ctx.emit(node, "reshape", [part], {"shape": ctx.result_type(node).shape})


def _split(ctx: TorchContext, node: Any) -> None:
    """split / split_with_sizes: one slice per part, read through getitem."""
    x = ctx.type_of(node.args[0])
    axis = int(arg(node, 2, "dim", 0)) % x.rank
    start = 0
    for index, part in enumerate(node.meta["val"]):
        out = value_type(node, part)
        end = start + out.shape[axis]
        attrs = {"axis": axis, "start": start, "end": end}
        name = ctx.step(node, "slice", [ctx.name_of(node.args[0])], out, attrs)
        ctx.values[f"{node.name}#{index}"] = name
        start = end


def _cat(ctx: TorchContext, node: Any) -> None:
    out = ctx.result_type(node)
    parts = [ctx.operand(t, out) for t in node.args[0] if ctx.type_of(t).numel > 0]
    axis = int(arg(node, 1, "dim", 0)) % out.rank
    ctx.emit(node, "concat", parts, {"axis": axis})


def _index_copy(ctx: TorchContext, node: Any) -> None:
    """A static KV cache's `cache.index_copy(2, pos, new)` with one position: kv_cache_write.

    One index writes the rows pos:pos+S only when S == 1 (a decode step); more indices may be
    anything, so they stay unmapped."""
    cache, index = ctx.type_of(node.args[0]), ctx.type_of(node.args[2])
    dim = int(node.args[1]) % max(cache.rank, 1)
    if cache.rank != 4 or dim != 2 or index.numel != 1 or ctx.type_of(node.args[3]).shape[2] != 1:
        raise unsupported(node, "only a one-row write along axis 2 of a [B,H,S,D] cache maps")
    pos = ctx.name_of(node.args[2])
    if index.shape != (1,):
        flat = index.with_shape((1,))
        pos = ctx.step(node, "reshape", [pos], flat, {"shape": (1,)})
    ctx.emit(node, "kv_cache_write", [ctx.name_of(node.args[0]), ctx.name_of(node.args[3]), pos])


def _embedding(ctx: TorchContext, node: Any) -> None:
    ctx.emit(node, "get_rows", [ctx.name_of(node.args[0]), ctx.name_of(node.args[1])])


# -- convolutions and pools ----------------------------------------------------------------------


def _declared() -> dict[str, Converter]:
    """The one-to-one mappings the elementwise table declares (`ir/op_elementwise.py`, `aten`)."""
    return {
        overload: (_unary if op.arity == 1 else _binary)(name)
        for name, op in ELEMENTWISE.items()
        for overload in op.aten
    }


CONVERTERS: dict[str, Converter] = {
    **_declared(),
    **ATTENTION_CONVERTERS,
    **ARITHMETIC_CONVERTERS,
    **IMAGE_CONVERTERS,
    **INDEXING_CONVERTERS,
    **LOGIC_CONVERTERS,
    "aten._log_softmax.default": _softmax("log_softmax"),
    "aten._softmax.default": _softmax("softmax"),
    "aten._to_copy.default": _cast,
    "aten._unsafe_view.default": _reshape,
    "aten.addmm.default": _addmm,
    "aten.alias.default": _identity,
    "aten.amax.default": _reduce("max"),
    "aten.bmm.default": _matmul,
    "aten.cat.default": _cat,
    "aten.clone.default": _identity,
    "aten.contiguous.default": _identity,
    "aten.detach.default": _identity,
    "aten.div.Tensor": _div,
    "aten.dropout.default": _identity,
    "aten.embedding.default": _embedding,
    "aten.flatten.using_ints": _reshape,
    "aten.gelu.default": _gelu,
    "aten.index_copy.default": _index_copy,
    "aten.layer_norm.default": _layer_norm,
    "aten.linear.default": _linear,
    "aten.log_softmax.int": _softmax("log_softmax"),
    "aten.matmul.default": _matmul,
    "aten.mean.dim": _reduce("mean"),
    "aten.mm.default": _matmul,
    "aten.permute.default": _permute,
    "aten.pow.Tensor_Scalar": _pow,
    "aten.reshape.default": _reshape,
    "aten.rms_norm.default": _rms_norm,
    "aten.select.int": _select,
    "aten.slice.Tensor": _slice,
    "aten.softmax.int": _softmax("softmax"),
    "aten.split.Tensor": _split,
    "aten.split_with_sizes.default": _split,
    "aten.squeeze.dim": _reshape,
    "aten.squeeze.dims": _reshape,
    "aten.sum.dim_IntList": _reduce("sum"),
    "aten.t.default": _t,
    "aten.to.dtype": _cast,
    "aten.transpose.int": _transpose,
    "aten.unsqueeze.default": _reshape,
    "aten.view.default": _reshape,
}
