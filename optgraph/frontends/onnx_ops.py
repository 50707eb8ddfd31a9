"""ONNX op -> IR nodes: one converter per ONNX op type that optgraph maps.

Each converter reads the NodeProto's inputs (by name), its attributes (already decoded) and appends
IR nodes through an `OnnxContext`, whose `emit` infers every result type with optgraph's op table.
The elementwise ops' one-to-one op types (`Exp` -> `exp`) come from their declarations
(`ir/op_elementwise.py`, `onnx`); the rest are listed here and in the family modules
(`onnx_<family>_ops.py`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from optgraph.frontends.onnx_arithmetic_ops import ARITHMETIC_CONVERTERS
from optgraph.frontends.onnx_attention_ops import ATTENTION_CONVERTERS
from optgraph.frontends.onnx_context import ONNX_DTYPES, Converter, OnnxContext
from optgraph.frontends.onnx_einsum import EINSUM_CONVERTERS
from optgraph.frontends.onnx_image_ops import IMAGE_CONVERTERS
from optgraph.frontends.onnx_indexing_ops import INDEXING_CONVERTERS
from optgraph.frontends.onnx_logic_ops import LOGIC_CONVERTERS
from optgraph.frontends.stepped_slices import stepped_slice_nodes
from optgraph.ir.graph import AttrValue, TensorType
from optgraph.ir.op_elementwise import ELEMENTWISE
from optgraph.reference.kernels import numpy_dtype


def _unary(op: str) -> Converter:
    def convert(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
        ctx.emit(node, op, [ctx.name(node.input[0])])

    return convert


def _binary(op: str) -> Converter:
    def convert(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
        a, b = node.input[0], node.input[1]
        is_scalar = ctx.is_constant(b) and ctx.constant(b).size == 1
        if op == "mul" and is_scalar and ctx.type_of(a).dtype in ("f32", "f16", "bf16"):
            factor = float(ctx.constant(b).reshape(-1)[0])
            ctx.emit(node, "scale", [ctx.name(a)], {"factor": factor})
            return
        if op == "pow" and ctx.is_constant(b) and ctx.constant(b).size == 1:
            exponent = float(ctx.constant(b).reshape(-1)[0])
            if exponent == 2.0:
                ctx.emit(node, "mul", [ctx.name(a), ctx.name(a)])
                return
            if exponent == 0.5:
                ctx.emit(node, "sqrt", [ctx.name(a)])
                return
        ctx.emit(node, op, [ctx.name(a), _same_dtype(ctx, b, ctx.type_of(a))])

    return convert


def _same_dtype(ctx: OnnxContext, onnx_name: str, like: TensorType) -> str:
    if ctx.is_constant(onnx_name) and ctx.type_of(onnx_name).dtype != like.dtype:
        value = ctx.constant(onnx_name).astype(numpy_dtype(like.dtype))
        return ctx.draft.constant(value)
    return ctx.name(onnx_name)


def _gelu(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    approximate = attrs.get("approximate", b"none")
    approximate = approximate.decode() if isinstance(approximate, bytes) else approximate
    ctx.emit(node, "gelu", [ctx.name(node.input[0])], {"approximate": approximate})


def _cast(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    dtype = ONNX_DTYPES.get(int(attrs["to"]))
    if dtype is None:
        why = " (DOUBLE: optgraph has no f64; float64 arithmetic on constants folds at import)"
        double = int(attrs["to"]) == 11
        raise ctx.error(node, f"cast to ONNX type {attrs['to']} is not supported{why * double}")
    if ctx.type_of(node.input[0]).dtype == dtype:
        ctx.values[node.output[0]] = ctx.name(node.input[0])
    else:
        ctx.emit(node, "cast", [ctx.name(node.input[0])], {"dtype": dtype})


def _identity(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    ctx.values[node.output[0]] = ctx.name(node.input[0])


def _dropout(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    """Inference: the identity. Training mode with a nonzero ratio drops at random: refused."""
    training = node.input[2] if len(node.input) > 2 else ""
    if training and not ctx.is_constant(training):
        raise ctx.error(node, "a training_mode input that is not a constant is not supported")
    ratio = node.input[1] if len(node.input) > 1 else ""  # absent: 0.5
    is_training = bool(training) and bool(ctx.constant(training).reshape(-1)[0])
    drops = not ratio or not ctx.is_constant(ratio) or float(ctx.constant(ratio).reshape(-1)[0])
    if is_training and drops:
        raise ctx.error(node, "training_mode = true drops at random: not supported")
    _identity(ctx, node, attrs)


def _variadic(op: str) -> Converter:
    """Max/Min of one or more operands: a chain of binary ops."""

    def convert(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
        operands = [i for i in node.input if i]
        if len(operands) == 1:
            _identity(ctx, node, attrs)
            return
        like = ctx.type_of(operands[0])
        result = ctx.name(operands[0])
        for other in operands[1:-1]:
            result = ctx.step(node, op, [result, _same_dtype(ctx, other, like)])
        ctx.emit(node, op, [result, _same_dtype(ctx, operands[-1], like)])

    return convert


def _matmul(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    ctx.emit(node, "matmul", [ctx.name(node.input[0]), ctx.name(node.input[1])])


def _gemm(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    flags = {
        "transpose_a": bool(attrs.get("transA", 0)),
        "transpose_b": bool(attrs.get("transB", 0)),
    }
    has_bias = len(node.input) > 2 and node.input[2]
    alpha, beta = float(attrs.get("alpha", 1.0)), float(attrs.get("beta", 1.0))
    if not has_bias and alpha == 1.0:
        ctx.emit(node, "matmul", [ctx.name(node.input[0]), ctx.name(node.input[1])], flags)
        return
    product = ctx.step(node, "matmul", [ctx.name(node.input[0]), ctx.name(node.input[1])], flags)
    if alpha != 1.0:
        product = ctx.step(node, "scale", [product], {"factor": alpha})
    if not has_bias:
        ctx.values[node.output[0]] = product
        return
    bias = ctx.name(node.input[2])
    if beta != 1.0:
        bias = ctx.step(node, "scale", [bias], {"factor": beta})
    ctx.emit(node, "add", [product, bias])


def _softmax(op: str) -> Converter:
    def convert(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
        if ctx.opset < 13 and ctx.type_of(node.input[0]).rank > 2:
            raise ctx.error(
                node, f"{node.op_type} before opset 13 (flattening semantics) is not supported"
            )
        ctx.emit(node, op, [ctx.name(node.input[0])], {"axis": int(attrs.get("axis", -1))})

    return convert


def _reduce(op: str) -> Converter:
    def convert(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
        axes = ctx.ints(node, 1, attrs, "axes")
        out: dict[str, AttrValue] = {"keepdims": bool(attrs.get("keepdims", 1))}
        if axes:
            out["axes"] = tuple(axes)
        elif attrs.get("noop_with_empty_axes", 0):
            ctx.values[node.output[0]] = ctx.name(node.input[0])
            return
        ctx.emit(node, op, [ctx.name(node.input[0])], out)

    return convert


def _layer_norm(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    x = ctx.type_of(node.input[0])
    if int(attrs.get("axis", -1)) % x.rank != x.rank - 1 or len(node.output) > 1 and node.output[1]:
        raise ctx.error(node, "only normalization over the last axis, one output, is supported")
    if len(node.input) > 2 and node.input[2]:
        bias = ctx.name(node.input[2])
    else:
        bias = ctx.draft.constant(np.zeros(x.shape[-1], dtype=numpy_dtype(x.dtype)))
    eps = float(attrs.get("epsilon", 1e-5))
    ctx.emit(node, "layer_norm", [ctx.name(node.input[0]), ctx.name(node.input[1]), bias],
             {"eps": eps})  # fmt: skip


def _rms_norm(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    x = ctx.type_of(node.input[0])
    if int(attrs.get("axis", -1)) % x.rank != x.rank - 1:
        raise ctx.error(node, "only normalization over the last axis is supported")
    eps = float(attrs.get("epsilon", 1e-5))
    ctx.emit(node, "rms_norm", [ctx.name(node.input[0]), ctx.name(node.input[1])], {"eps": eps})


def _reshape_to(ctx: OnnxContext, node: Any, shape: Sequence[int]) -> None:
    if tuple(shape) == ctx.type_of(node.input[0]).shape:
        ctx.values[node.output[0]] = ctx.name(node.input[0])
    else:
        ctx.emit(node, "reshape", [ctx.name(node.input[0])], {"shape": tuple(shape)})


def _reshape(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    x = ctx.type_of(node.input[0])
    wanted = ctx.ints(node, 1, attrs, "shape") or []
    if not attrs.get("allowzero", 0):
        wanted = [x.shape[i] if d == 0 else d for i, d in enumerate(wanted)]
    try:
        shape = np.empty(x.shape, dtype=np.bool_).reshape(wanted).shape
    except ValueError:
        raise ctx.error(node, f"cannot reshape {x} to {wanted}") from None
    _reshape_to(ctx, node, shape)


def _split(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    x = ctx.type_of(node.input[0])
    axis = int(attrs.get("axis", 0)) % x.rank
    sizes = ctx.ints(node, 1, attrs, "split")
    if sizes is None:
        count = len(node.output)
        step = -(-x.shape[axis] // count)
        sizes = [min(step, x.shape[axis] - i * step) for i in range(count)]
    start = 0
    for output, size in zip(node.output, sizes):
        attrs_out = {"axis": axis, "start": start, "end": start + size}
        ctx.emit(node, "slice", [ctx.name(node.input[0])], attrs_out, output=output)
        start += size


def _flatten(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    x = ctx.type_of(node.input[0])
    axis = int(attrs.get("axis", 1))
    axis = axis + x.rank if axis < 0 else axis  # [-rank, rank]: -1 keeps the last axis apart
    _reshape_to(ctx, node, (int(np.prod(x.shape[:axis])), int(np.prod(x.shape[axis:]))))


def _squeeze(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    x = ctx.type_of(node.input[0])
    axes = ctx.ints(node, 1, attrs, "axes")
    drop = {a % x.rank for a in axes} if axes else {i for i, d in enumerate(x.shape) if d == 1}
    _reshape_to(ctx, node, [d for i, d in enumerate(x.shape) if i not in drop])


def _unsqueeze(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    x = ctx.type_of(node.input[0])
    axes = ctx.ints(node, 1, attrs, "axes") or []
    rank = x.rank + len(axes)
    shape, rest = [], iter(x.shape)
    for i in range(rank):
        shape.append(1 if i in {a % rank for a in axes} else next(rest))
    _reshape_to(ctx, node, shape)


def _transpose(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    rank = ctx.type_of(node.input[0]).rank
    perm = tuple(int(p) for p in attrs.get("perm", range(rank - 1, -1, -1)))
    ctx.emit(node, "transpose", [ctx.name(node.input[0])], {"perm": perm})


def _concat(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    parts = [ctx.name(i) for i in node.input if i and ctx.type_of(i).numel > 0]
    ctx.emit(node, "concat", parts, {"axis": int(attrs["axis"])})


def _slice(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    x = ctx.type_of(node.input[0])
    starts, ends = ctx.ints(node, 1, attrs, "starts") or [], ctx.ints(node, 2, attrs, "ends") or []
    axes = ctx.ints(node, 3, attrs, "axes") or list(range(len(starts)))
    steps = ctx.ints(node, 4, attrs, "steps") or [1] * len(starts)
    if any(s < 1 for s in steps):
        raise ctx.error(node, "slices with a step below 1 are not supported")
    name = ctx.name(node.input[0])
    shape = x.shape
    nodes: list[tuple[str, dict[str, AttrValue], tuple[int, ...]]] = []
    for axis, start, end, step in zip(axes, starts, ends, steps):
        axis %= x.rank
        picked = range(*slice(start, end, step).indices(shape[axis]))
        if step == 1 or not picked:
            begin, stop = picked.start, max(picked.start, picked.stop)
            kept = shape[:axis] + (stop - begin,) + shape[axis + 1 :]
            nodes.append(("slice", {"axis": axis, "start": begin, "end": stop}, kept))
        else:  # `stepped_slices.py`
            nodes += stepped_slice_nodes(shape, axis, picked)
        shape = nodes[-1][2]
    for count, (op, attrs_out, _) in enumerate(nodes):
        last = count == len(nodes) - 1
        output = node.output[0] if last else f"{node.output[0]}.{count}"
        name = ctx.emit(node, op, [name], attrs_out, output=output)
    if not nodes:
        ctx.values[node.output[0]] = name


def _declared() -> dict[str, Converter]:
    """The one-to-one mappings the elementwise table declares (`ir/op_elementwise.py`, `onnx`)."""
    return {
        op_type: (_unary if op.arity == 1 else _binary)(name)
        for name, op in ELEMENTWISE.items()
        for op_type in op.onnx
    }


CONVERTERS: dict[str, Converter] = {
    **_declared(),
    **ATTENTION_CONVERTERS,
    **ARITHMETIC_CONVERTERS,
    **EINSUM_CONVERTERS,
    **IMAGE_CONVERTERS,
    **INDEXING_CONVERTERS,
    **LOGIC_CONVERTERS,
    "Cast": _cast,
    "Concat": _concat,
    "Dropout": _dropout,
    "Flatten": _flatten,
    "Gelu": _gelu,
    "Gemm": _gemm,
    "Identity": _identity,
    "LayerNormalization": _layer_norm,
    "LogSoftmax": _softmax("log_softmax"),
    "MatMul": _matmul,
    "Max": _variadic("maximum"),
    "Min": _variadic("minimum"),
    "RMSNormalization": _rms_norm,
    "ReduceMax": _reduce("max"),
    "ReduceMean": _reduce("mean"),
    "ReduceSum": _reduce("sum"),
    "Reshape": _reshape,
    "Slice": _slice,
    "Softmax": _softmax("softmax"),
    "Split": _split,
    "Squeeze": _squeeze,
    "Transpose": _transpose,
    "Unsqueeze": _unsqueeze,
}
