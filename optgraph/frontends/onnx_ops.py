"""ONNX op -> IR nodes: one converter per ONNX op type that optgraph maps.

Each converter reads the NodeProto's inputs (by name), its attributes (already decoded) and appends
IR nodes through an `OnnxContext`, whose `emit` infers every result type with optgraph's op table.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from optgraph.errors import OptGraphError, Span
from optgraph.frontends.draft import Draft, ir_name
from optgraph.ir.graph import AttrValue, Node, TensorType
from optgraph.ir.ops import get_op, infer_type
from optgraph.runtime.reference_kernels import numpy_dtype

_ONNX_DTYPES = {1: "f32", 10: "f16", 16: "bf16", 6: "i32", 7: "i64", 9: "bool"}


@dataclass
class OnnxContext:
    draft: Draft
    path: str
    opset: int
    values: dict[str, str] = field(default_factory=dict)

    def span(self, node: Any) -> Span:
        return Span(self.path, 1, 1, None, f"{node.op_type} node '{node.name}'")

    def name(self, onnx_name: str) -> str:
        return self.values[onnx_name]

    def type_of(self, onnx_name: str) -> TensorType:
        return self.draft.type_of(self.values[onnx_name])

    def is_constant(self, onnx_name: str) -> bool:
        return self.values.get(onnx_name) in self.draft.constants

    def constant(self, onnx_name: str) -> np.ndarray:
        return self.draft.constants[self.values[onnx_name]]

    def ints(self, node: Any, index: int, attrs: Mapping[str, Any], key: str) -> list[int] | None:
        """An integer list given as attribute `key` (older opsets) or as constant input `index`."""
        if key in attrs:
            return [int(v) for v in attrs[key]]
        if len(node.input) > index and node.input[index]:
            if not self.is_constant(node.input[index]):
                raise self.error(node, f"input {index} ({key}) must be a constant")
            return [int(v) for v in self.constant(node.input[index]).reshape(-1)]
        return None

    def error(self, node: Any, why: str) -> OptGraphError:
        return OptGraphError(f"import: {node.op_type} '{node.name}': {why}", self.span(node))

    def emit(
        self,
        node: Any,
        op: str,
        operands: Sequence[str],
        attrs: Mapping[str, AttrValue] | None = None,
        output: str | None = None,
    ) -> str:
        """Append `op(operands)`, typed by the op table; bound to `output` (default: output 0)."""
        probe = Node("probe", op, tuple(operands), dict(attrs or {}), span=self.span(node))
        types = [self.draft.type_of(o) for o in operands]
        try:
            # A draft op the IR lacks (erf, cos, sin) is elementwise: its operand's type.
            result = infer_type(probe, types) if get_op(op) is not None else types[0]
        except OptGraphError as err:
            raise self.error(node, err.message) from None
        target = node.output[0] if output is None else output
        name = self.draft.node(op, operands, result, attrs, name=self.fresh(target))
        if output is not None or target == node.output[0]:
            self.values[target] = name
        return name

    def step(self, node: Any, op: str, operands: Sequence[str],
             attrs: Mapping[str, AttrValue] | None = None) -> str:  # fmt: skip
        return self.emit(node, op, operands, attrs, output=f"{node.output[0]}.step")

    def fresh(self, onnx_name: str) -> str:
        name = ir_name(onnx_name)
        if name in self.draft.types or name in self.draft.weights or name in self.draft.constants:
            return self.draft.fresh(name)
        return name

    def unmapped(self, node: Any, name: str) -> None:
        operands = [self.values[i] for i in node.input if i]
        result = self.draft.type_of(operands[0]) if operands else TensorType("f32", ())
        out = self.draft.node(node.op_type, operands, result, name=self.fresh(node.output[0]),
                              span=self.span(node))  # fmt: skip
        self.values[node.output[0]] = out

    def scalar_like(self, value: float, like: str) -> str:
        dtype = numpy_dtype(self.draft.type_of(like).dtype)
        return self.draft.constant(np.array(value, dtype=dtype))


Converter = Callable[[OnnxContext, Any, Mapping[str, Any]], None]


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
    dtype = _ONNX_DTYPES.get(int(attrs["to"]))
    if dtype is None:
        raise ctx.error(node, f"cast to ONNX type {attrs['to']} is not supported")
    if ctx.type_of(node.input[0]).dtype == dtype:
        ctx.values[node.output[0]] = ctx.name(node.input[0])
    else:
        ctx.emit(node, "cast", [ctx.name(node.input[0])], {"dtype": dtype})


def _identity(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    ctx.values[node.output[0]] = ctx.name(node.input[0])


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


def _softmax(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    if ctx.opset < 13 and ctx.type_of(node.input[0]).rank > 2:
        raise ctx.error(node, "Softmax before opset 13 (flattening semantics) is not supported")
    ctx.emit(node, "softmax", [ctx.name(node.input[0])], {"axis": int(attrs.get("axis", -1))})


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
    _reshape_to(ctx, node, np.empty(x.shape, dtype=np.bool_).reshape(wanted).shape)


def _flatten(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    x = ctx.type_of(node.input[0])
    axis = int(attrs.get("axis", 1)) % (x.rank + 1)
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
    if any(s != 1 for s in steps):
        raise ctx.error(node, "slices with a step other than 1 are not supported")
    name = ctx.name(node.input[0])
    pieces = list(zip(axes, starts, ends))
    for count, (axis, start, end) in enumerate(pieces):
        axis %= x.rank
        begin, stop, _ = slice(start, end).indices(x.shape[axis])
        attrs_out = {"axis": axis, "start": begin, "end": max(begin, stop)}
        last = count == len(pieces) - 1
        output = node.output[0] if last else f"{node.output[0]}.{axis}"
        name = ctx.emit(node, "slice", [name], attrs_out, output=output)
    if not pieces:
        ctx.values[node.output[0]] = name


def _gather(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    table = ctx.type_of(node.input[0])
    axis = int(attrs.get("axis", 0)) % table.rank
    if axis == 0 and table.rank == 2:
        ctx.emit(node, "get_rows", [ctx.name(node.input[0]), ctx.name(node.input[1])])
        return
    if ctx.is_constant(node.input[1]) and ctx.constant(node.input[1]).ndim == 0:
        index = int(ctx.constant(node.input[1])) % table.shape[axis]
        attrs_out = {"axis": axis, "start": index, "end": index + 1}
        part = ctx.step(node, "slice", [ctx.name(node.input[0])], attrs_out)
        shape = [d for i, d in enumerate(table.shape) if i != axis]
        ctx.emit(node, "reshape", [part], {"shape": tuple(shape)})
        return
    raise ctx.error(node, "only row gathers (axis 0 of a 2-D table) and constant indices map")


def _symmetric_pads(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> tuple[int, int]:
    if attrs.get("auto_pad", b"NOTSET") not in (b"NOTSET", "NOTSET", b"VALID", "VALID"):
        raise ctx.error(node, "auto_pad SAME_* is not supported (give explicit pads)")
    pads = [int(p) for p in attrs.get("pads", (0, 0, 0, 0))]
    if len(pads) != 4 or pads[:2] != pads[2:]:
        raise ctx.error(node, f"only 2-D symmetric pads are supported, got {pads}")
    return pads[0], pads[1]


def _conv(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    if any(int(d) != 1 for d in attrs.get("dilations", (1, 1))):
        raise ctx.error(node, "dilated convolutions are not supported")
    if ctx.type_of(node.input[0]).rank != 4:
        raise ctx.error(node, "only 2-D convolutions (NCHW) are supported")
    out: dict[str, AttrValue] = {
        "stride": tuple(int(s) for s in attrs.get("strides", (1, 1))),
        "padding": _symmetric_pads(ctx, node, attrs),
        "groups": int(attrs.get("group", 1)),
    }
    ctx.emit(node, "conv2d", [ctx.name(i) for i in node.input if i], out)


def _pool(op: str) -> Converter:
    def convert(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
        if attrs.get("ceil_mode", 0) or any(int(d) != 1 for d in attrs.get("dilations", (1, 1))):
            raise ctx.error(node, "pooling with ceil_mode or dilations is not supported")
        padding = _symmetric_pads(ctx, node, attrs)
        if op == "avg_pool2d" and padding != (0, 0) and attrs.get("count_include_pad", 0):
            raise ctx.error(node, "padded average pooling with count_include_pad is not supported")
        kernel = tuple(int(k) for k in attrs["kernel_shape"])
        stride = tuple(int(s) for s in attrs.get("strides", (1, 1)))
        ctx.emit(node, op, [ctx.name(node.input[0])],
                 {"kernel": kernel, "stride": stride, "padding": padding})  # fmt: skip

    return convert


def _global_average_pool(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    ctx.emit(node, "mean", [ctx.name(node.input[0])], {"axes": (2, 3), "keepdims": True})


def _batch_norm(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    """(x - mean) · scale / sqrt(var + eps) + b, on the real weights."""
    x, scale, bias, mean, var = (ctx.name(i) for i in node.input[:5])
    rank = ctx.type_of(node.input[0]).rank
    channels = ctx.type_of(node.input[0]).shape[1]
    shaped = {"shape": (channels,) + (1,) * (rank - 2)}
    eps = ctx.scalar_like(float(attrs.get("epsilon", 1e-5)), var)
    factor = ctx.step(node, "rsqrt", [ctx.step(node, "add", [var, eps])])
    factor = ctx.step(node, "reshape", [ctx.step(node, "mul", [factor, scale])], shaped)
    centered = ctx.step(node, "sub", [x, ctx.step(node, "reshape", [mean], shaped)])
    scaled = ctx.step(node, "mul", [centered, factor])
    ctx.emit(node, "add", [scaled, ctx.step(node, "reshape", [bias], shaped)])


CONVERTERS: dict[str, Converter] = {
    "Abs": _unary("abs"),
    "Add": _binary("add"),
    "AveragePool": _pool("avg_pool2d"),
    "BatchNormalization": _batch_norm,
    "Cast": _cast,
    "Concat": _concat,
    "Conv": _conv,
    "Cos": _unary("cos"),
    "Div": _binary("div"),
    "Dropout": _identity,
    "Erf": _unary("erf"),
    "Exp": _unary("exp"),
    "Flatten": _flatten,
    "Gather": _gather,
    "Gelu": _gelu,
    "Gemm": _gemm,
    "GlobalAveragePool": _global_average_pool,
    "Identity": _identity,
    "LayerNormalization": _layer_norm,
    "Log": _unary("log"),
    "MatMul": _matmul,
    "Max": _binary("maximum"),
    "MaxPool": _pool("max_pool2d"),
    "Min": _binary("minimum"),
    "Mul": _binary("mul"),
    "Neg": _unary("neg"),
    "Pow": _binary("pow"),
    "RMSNormalization": _rms_norm,
    "ReduceMax": _reduce("max"),
    "ReduceMean": _reduce("mean"),
    "ReduceSum": _reduce("sum"),
    "Relu": _unary("relu"),
    "Reshape": _reshape,
    "Sigmoid": _unary("sigmoid"),
    "Sin": _unary("sin"),
    "Slice": _slice,
    "Softmax": _softmax,
    "Sqrt": _unary("sqrt"),
    "Squeeze": _squeeze,
    "Sub": _binary("sub"),
    "Tanh": _unary("tanh"),
    "Transpose": _transpose,
    "Unsqueeze": _unsqueeze,
}
