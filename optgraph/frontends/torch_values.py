"""What the torch importer knows about torch.fx nodes: types, source lines, tensors as arrays, and
the `TorchContext` through which ATen converters append IR nodes to a draft.

PyTorch is imported only inside functions (`torch_module()`), so optgraph imports without it.
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from optgraph.errors import OptGraphError, Span
from optgraph.frontends.draft import Draft, tensor_type
from optgraph.ir.graph import AttrValue, TensorType
from optgraph.reference.kernels import numpy_dtype

_FRAME = re.compile(r'File "([^"]+)", line (\d+)')


def torch_module() -> Any:
    try:
        import torch
    except ImportError:
        raise OptGraphError(
            "import: PyTorch is not installed (pip install 'optgraph[torch]' torch)"
        ) from None
    return torch


def node_span(node: Any) -> Span | None:
    """The model's source line a torch.fx node came from (its stack trace's last frame)."""
    frames = _FRAME.findall(node.meta.get("stack_trace") or "")
    if not frames:
        return None
    path, line = frames[-1][0], int(frames[-1][1])
    text = linecache.getline(path, line)
    col = len(text) - len(text.lstrip()) + 1 if text else 1
    return Span(path, line, col, len(text.rstrip()) + 1 if text else None, text or None)


def value_type(node: Any, value: Any = None) -> TensorType:
    """The static IR type of an fx node's result; an error naming a dynamic dimension."""
    val = node.meta.get("val") if value is None else value
    if val is None or not hasattr(val, "shape"):
        raise OptGraphError(f"import: node '{node.name}' has no tensor result", node_span(node))
    shape = []
    for axis, dim in enumerate(val.shape):
        if not isinstance(dim, int):
            raise OptGraphError(
                f"import: '{node.name}' has a dynamic dimension {axis} ({dim}); optgraph needs "
                "static shapes: export without dynamic_shapes",
                node_span(node),
            )
        shape.append(dim)
    dtype = _numpy_dtype(val.dtype)
    if dtype == np.float64:
        raise OptGraphError(
            f"import: '{node.name}' computes in float64 on run-time values; optgraph has no f64 "
            "(float64 arithmetic on constants folds at import): cast to float32 in the model",
            node_span(node),
        )
    return tensor_type(dtype, shape, f"'{node.name}'")


def _numpy_dtype(dtype: Any) -> np.dtype:
    torch = torch_module()
    if dtype == torch.bfloat16:
        import ml_dtypes

        bf16: np.dtype = np.dtype(ml_dtypes.bfloat16)
        return bf16
    found: np.dtype = np.dtype(torch.empty((), dtype=dtype).numpy().dtype)
    return found


def to_numpy(tensor: Any) -> np.ndarray:
    torch = torch_module()
    tensor = tensor.detach().cpu().contiguous()
    if tensor.dtype == torch.bfloat16:
        import ml_dtypes

        bits: np.ndarray = tensor.view(torch.int16).numpy()
        widened: np.ndarray = bits.view(ml_dtypes.bfloat16).copy()
        return widened
    array: np.ndarray = np.array(tensor.numpy(), copy=True)
    return array


@dataclass
class TorchContext:
    """The draft being built and the IR value name of every torch.fx node converted so far."""

    draft: Draft
    values: dict[str, str] = field(default_factory=dict)

    def name_of(self, arg: Any) -> str:
        return self.values[arg.name]

    def output_name(self, arg: Any) -> str:
        if arg is None or not hasattr(arg, "name"):
            raise OptGraphError(f"import: the model returns a non-tensor output ({arg!r})")
        return self.name_of(arg)

    def type_of(self, arg: Any) -> TensorType:
        return self.draft.type_of(self.name_of(arg))

    def operand(self, arg: Any, like: TensorType) -> str:
        """A tensor operand in `like`'s dtype (cast when it differs); a scalar as a constant."""
        if not hasattr(arg, "name"):
            return self.draft.constant(np.array(arg, dtype=numpy_dtype(like.dtype)))
        name = self.name_of(arg)
        have = self.draft.type_of(name)
        if have.dtype == like.dtype:
            return name
        cast = have.with_dtype(like.dtype)
        return self.draft.node("cast", [name], cast, {"dtype": like.dtype})

    def emit(
        self,
        node: Any,
        op: str,
        operands: Sequence[str],
        attrs: Mapping[str, AttrValue] | None = None,
        result: TensorType | None = None,
    ) -> str:
        """The node's own result: `op(operands)` typed as the export says."""
        out = result if result is not None else value_type(node)
        name = self.draft.node(op, operands, out, attrs, name=node.name, span=node_span(node))
        self.values[node.name] = name
        return name

    def step(self, node: Any, op: str, operands: Sequence[str], result: TensorType,
             attrs: Mapping[str, AttrValue] | None = None) -> str:  # fmt: skip
        """An intermediate node on the way to `node`'s result."""
        return self.draft.node(
            op, operands, result, attrs, name=self.draft.fresh(node.name), span=node_span(node)
        )

    def alias(self, node: Any, arg: Any) -> None:
        self.values[node.name] = self.name_of(arg)

    def result_type(self, node: Any) -> TensorType:
        return value_type(node)

    def emitter(self, node: Any, last: TensorType | None = None) -> NodeEmitter:
        """`emitter.Emitter` of `node`'s nodes; `last`: the type of the last one, which is then
        an intermediate too (for ops with several results)."""
        return NodeEmitter(self, node, last)


@dataclass
class NodeEmitter:
    """The nodes of one torch.fx node (`emitter.Emitter`)."""

    ctx: TorchContext
    node: Any
    last_type: TensorType | None = None

    def step(self, op: str, operands: list[str], result: TensorType,
             attrs: dict[str, AttrValue] | None = None) -> str:  # fmt: skip
        return self.ctx.step(self.node, op, operands, result, attrs)

    def last(self, op: str, operands: list[str], attrs: dict[str, AttrValue] | None = None) -> str:
        if self.last_type is not None:
            return self.step(op, operands, self.last_type, attrs)
        return self.ctx.emit(self.node, op, operands, attrs)

    def constant(self, array: np.ndarray, hint: str) -> str:
        return self.ctx.draft.constant(array, hint)


Converter = Callable[[TorchContext, Any], None]


def arg(node: Any, index: int, key: str, default: Any = None) -> Any:
    """Argument `index` (or keyword `key`) of an fx node, `default` when absent."""
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(key, default)


def unsupported(node: Any, why: str) -> OptGraphError:
    return OptGraphError(f"import: {node.target} ('{node.name}'): {why}", node_span(node))
