"""The state of one ONNX import: the draft, the IR name of every ONNX value, and `emit`, which
types each new node with optgraph's op table."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from optgraph.errors import OptGraphError, Span
from optgraph.frontends.draft import Draft, ir_name
from optgraph.ir.graph import AttrValue, Node, TensorType
from optgraph.ir.ops import get_op, infer_type
from optgraph.reference.kernels import numpy_dtype

ONNX_DTYPES = {1: "f32", 10: "f16", 16: "bf16", 6: "i32", 7: "i64", 9: "bool"}


def node_label(node: Any, kind: str = "") -> str:
    """`node` as messages name it: `MatMul '/proj/MatMul'`, or, when the model leaves it unnamed
    (ONNX allows that), by what it makes: `MatMul making 'y'`; `kind` follows the op type."""
    op = f"{node.op_type}{kind}"
    if node.name:
        return f"{op} '{node.name}'"
    outputs = [o for o in node.output if o]
    return f"{op} making '{outputs[0]}'" if outputs else f"unnamed {op}"


@dataclass
class OnnxContext:
    draft: Draft
    path: str
    opset: int
    values: dict[str, str] = field(default_factory=dict)
    inferred: dict[str, TensorType] = field(default_factory=dict)  # onnx shape inference
    # ONNX names of the constants that are 0-d in the model (the draft stores them as [1])
    scalars: set[str] = field(default_factory=set)
    # ONNX names whose type is a guess: an unmapped node's outputs that shape inference left
    # without a static shape (a Range of run-time bounds), and what is computed from them
    guessed: set[str] = field(default_factory=set)

    def span(self, node: Any) -> Span:
        return Span(self.path, 1, 1, None, node_label(node, " node"))

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
        return OptGraphError(f"import: {node_label(node)}: {why}", self.span(node))

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

    def emitter(self, node: Any) -> OnnxEmitter:
        """`emitter.Emitter` of `node`'s nodes (types inferred by the op table)."""
        return OnnxEmitter(self, node)

    def step(self, node: Any, op: str, operands: Sequence[str],
             attrs: Mapping[str, AttrValue] | None = None) -> str:  # fmt: skip
        return self.emit(node, op, operands, attrs, output=f"{node.output[0]}.step")

    def fresh(self, onnx_name: str) -> str:
        name = ir_name(onnx_name)
        if name in self.draft.types or name in self.draft.weights or name in self.draft.constants:
            return self.draft.fresh(name)
        return name

    def unmapped(self, node: Any, name: str) -> None:
        """Each output as a node of the ONNX op type, typed by onnx's shape inference (else like
        the first operand), for `Draft.finish` to report."""
        operands = [self.values[i] for i in node.input if i]
        fallback = self.draft.type_of(operands[0]) if operands else TensorType("f32", ())
        for output in node.output:
            if not output:
                continue
            result = self.inferred.get(output, fallback)
            if output not in self.inferred:
                self.guessed.add(output)
            out = self.draft.node(node.op_type, operands, result, name=self.fresh(output),
                                  span=self.span(node))  # fmt: skip
            self.values[output] = out

    def scalar_like(self, value: float, like: str) -> str:
        dtype = numpy_dtype(self.draft.type_of(like).dtype)
        return self.draft.constant(np.array(value, dtype=dtype))


Converter = Callable[[OnnxContext, Any, Mapping[str, Any]], None]


@dataclass
class OnnxEmitter:
    """The nodes of one ONNX node (`emitter.Emitter`); `result` types are the op table's."""

    ctx: OnnxContext
    node: Any

    def step(self, op: str, operands: list[str], result: TensorType,
             attrs: dict[str, AttrValue] | None = None) -> str:  # fmt: skip
        return self.ctx.step(self.node, op, operands, attrs)

    def last(self, op: str, operands: list[str], attrs: dict[str, AttrValue] | None = None) -> str:
        return self.ctx.emit(self.node, op, operands, attrs)

    def constant(self, array: np.ndarray, hint: str) -> str:
        return self.ctx.draft.constant(array, hint)
