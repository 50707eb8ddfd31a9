"""ONNX in: `from_onnx(path_or_ModelProto) -> (graph, weights)`.

- Initializers are weights (float tensors) or constants (integer or one-element ones); external
  data (theirs, and a Constant node's) is read from beside the model file, checked first
  (`onnx_initializers.py`);
- the model is checked against onnx's own schemas before a node is converted
  (`onnx_schema.py`): text fields, the opset, each node's inputs, outputs and attribute types,
  and the size of what folding a node would make; every error names the model file;
- every tensor a node reads must be defined before it (an initializer, a graph input or an
  earlier node), once, and every graph output by something, listed once: else an error naming
  the node and tensor;
- Graph inputs keep the model's input names (initializers are weights, not inputs), outputs their
  order; names the IR cannot spell are escaped reversibly (`draft.ir_name`).
- Static shapes only: a symbolic dimension (`dim_param`) is an error naming the input and axis.
- `Shape` of a statically typed value, and every node whose operands are all constants
  (`Constant`, `ConstantOfShape`, `Range`, shape arithmetic), is evaluated at import with onnx's
  reference evaluator.
- Result types come from optgraph's own op table (`infer_type`), so onnx's shape inference is not
  needed; ops the IR lacks take the type of their first operand and are reported together unless
  raising (`raising.py`: norms, GELU, rope) consumes them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from optgraph.errors import OptGraphError, Span
from optgraph.frontends.draft import Draft, check_mapped, in_file, ir_name, tensor_type
from optgraph.frontends.onnx_context import ONNX_DTYPES, OnnxContext, node_label
from optgraph.frontends.onnx_initializers import initializer_arrays, tensor_array
from optgraph.frontends.onnx_ops import CONVERTERS
from optgraph.frontends.onnx_schema import (
    check_fold_size,
    check_node,
    check_text,
    model_opset,
    node_attributes,
)
from optgraph.frontends.raising import raise_patterns
from optgraph.ir.graph import Graph, TensorType

__all__ = ["from_onnx", "load_onnx"]


def _onnx() -> Any:
    try:
        import onnx
    except ImportError:
        raise OptGraphError(
            "import: onnx is not installed (pip install 'optgraph[onnx]')"
        ) from None
    return onnx


def load_onnx(path: str) -> Any:
    """The ModelProto in `path`; an `OptGraphError` when the file is not an ONNX model."""
    onnx = _onnx()
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError as err:
        raise OptGraphError(f"import: {path}: {err.strerror or err}") from None
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except Exception:  # noqa: BLE001 - protobuf raises its own DecodeError kinds
        raise OptGraphError(f"import: {path}: not an ONNX model", Span(path, 1, 1)) from None
    check_text(model, path)
    if not model.graph.node and not model.graph.output:
        raise OptGraphError(f"import: {path}: not an ONNX model (no graph)", Span(path, 1, 1))
    return model


def _input_type(onnx: Any, value: Any, path: str) -> tuple[np.dtype, list[int]]:
    if not value.type.HasField("tensor_type"):
        kind = value.type.WhichOneof("value") or "untyped"
        raise OptGraphError(
            f"import: input '{value.name}' is a {kind.removesuffix('_type')}, not a tensor",
            Span(path, 1, 1),
        )
    tensor = value.type.tensor_type
    try:
        dtype = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.elem_type))
    except (KeyError, TypeError, ValueError):  # onnx's table has no such element type
        raise OptGraphError(
            f"import: input '{value.name}' has an unknown element type {tensor.elem_type}",
            Span(path, 1, 1),
        ) from None
    shape = []
    for axis, dim in enumerate(tensor.shape.dim):
        if not dim.HasField("dim_value"):
            symbol = dim.dim_param or "?"
            raise OptGraphError(
                f"import: input '{value.name}' has a dynamic dimension {axis} ('{symbol}'); "
                "optgraph needs static shapes: fix it (e.g. onnx.tools.update_model_dims)",
                Span(path, 1, 1),
            )
        shape.append(int(dim.dim_value))
    return dtype, shape


def from_onnx(model: Any) -> tuple[Graph, dict[str, np.ndarray]]:
    """(graph, weights) of an ONNX model given as a path or a ModelProto."""
    onnx = _onnx()
    if not isinstance(model, str):
        return _import(onnx, model, "<onnx>")
    proto = load_onnx(model)
    try:
        return _import(onnx, proto, model)
    except OptGraphError as err:
        raise in_file(err, model) from None


def _import(onnx: Any, proto: Any, path: str) -> tuple[Graph, dict[str, np.ndarray]]:
    opset = model_opset(onnx, proto, path)
    draft = Draft(proto.graph.name or "model")
    context = OnnxContext(draft, path, opset, inferred=_inferred_types(onnx, proto))
    for name, array in initializer_arrays(onnx, proto.graph, path).items():
        context.values[name] = ir_name(name)
        # Integer and one-element initializers are shape arithmetic and literals (eps, 0.5):
        # constants that fold and raise; read at the end, they are weights under their name.
        is_literal = array.size == 1 or array.dtype.kind in "iub"
        # 0-d ones are stored as [1], like `Draft.constant` does (`OnnxContext.scalars`).
        if is_literal or array.dtype == np.float64:  # float64: a constant, folded exactly
            draft.add_constant(ir_name(name), array)
        else:
            draft.weights[ir_name(name)] = array.reshape(1) if array.ndim == 0 else array
        if array.ndim == 0:
            context.scalars.add(name)
    for value in proto.graph.input:
        if value.name in context.values:
            continue
        dtype, shape = _input_type(onnx, value, path)
        name = ir_name(value.name)
        draft.input(name, tensor_type(dtype, shape, f"input '{value.name}'"))
        context.values[value.name] = name
    read = {i for n in proto.graph.node for i in n.input} | {o.name for o in proto.graph.output}
    for index, node in enumerate(proto.graph.node):
        _check_inputs(context, node)
        _check_new_names(context, node)
        _convert_node(onnx, context, node, index)
        _check_outputs(context, node, read)
    listed: set[str] = set()
    for output in proto.graph.output:
        if output.name not in context.values:
            raise OptGraphError(
                f"import: graph output '{output.name}' is not defined by an initializer, a graph "
                "input or any node",
                Span(path, 1, 1),
            )
        if output.name in listed:
            raise OptGraphError(
                f"import: graph output '{output.name}' is listed twice", Span(path, 1, 1)
            )
        listed.add(output.name)
    draft.outputs = [context.values[o.name] for o in proto.graph.output]
    raise_patterns(draft)
    return draft.finish()


def _inferred_types(onnx: Any, proto: Any) -> dict[str, TensorType]:
    """Static types onnx's shape inference finds (used only for ops optgraph cannot map)."""
    try:
        graph = onnx.shape_inference.infer_shapes(proto).graph
    except Exception:  # noqa: BLE001 - inference is a hint; a model it rejects still imports
        return {}
    found: dict[str, TensorType] = {}
    for value in graph.value_info:
        tensor = value.type.tensor_type
        dims = [d.dim_value if d.HasField("dim_value") else None for d in tensor.shape.dim]
        dtype = ONNX_DTYPES.get(tensor.elem_type)
        if dtype is not None and None not in dims:
            found[value.name] = TensorType(dtype, tuple(int(d) for d in dims if d is not None))
    return found


def _convert_node(onnx: Any, context: OnnxContext, node: Any, index: int) -> None:
    if node.domain not in ("", "ai.onnx"):  # the converters know the default domain's ops
        raise context.error(node, f"ops of domain '{node.domain}' are not supported")
    check_node(onnx, context, node)
    attrs = node_attributes(onnx, context, node)
    if node.op_type == "Constant":
        value = _constant_attr(onnx, context, node, attrs)
        context.values[node.output[0]] = context.draft.constant(value, ir_name(node.output[0]))
        if np.asarray(value).ndim == 0:
            context.scalars.add(node.output[0])
        return
    if node.op_type == "Shape" and node.input[0] in context.values:
        shape = np.array(context.type_of(node.input[0]).shape, dtype=np.int64)
        start, end = attrs.get("start", 0), attrs.get("end", len(shape))
        context.values[node.output[0]] = context.draft.constant(shape[start:end], "shape")
        return
    foldable = node.input and all(not i or context.is_constant(i) for i in node.input)
    if foldable and _fold(onnx, context, node):
        return
    convert = CONVERTERS.get(node.op_type)
    name = node.name or f"{node.op_type}_{index}"
    if convert is None:
        context.unmapped(node, name)
        return
    if not any(i in context.guessed for i in node.input):
        convert(context, node, attrs)
        return
    # Typed from a guess: what fails here is the unmapped op before it, reported as such.
    context.guessed.update(node.output)
    try:
        convert(context, node, attrs)
    except OptGraphError:
        check_mapped(context.draft.nodes)
        raise


def _check_inputs(context: OnnxContext, node: Any) -> None:
    """Every tensor `node` reads is defined before it: by an initializer, a graph input or an
    earlier node (ONNX keeps nodes in topological order); else an error naming both."""
    for index, name in enumerate(node.input):
        if name and name not in context.values:
            raise context.error(
                node,
                f"input {index} '{name}' is not defined by an initializer, a graph input or an "
                "earlier node",
            )


def _check_new_names(context: OnnxContext, node: Any) -> None:
    """ONNX names each tensor once: a node output that an initializer, a graph input, an earlier
    node or the node itself already defines is refused by name."""
    made: set[str] = set()
    for index, name in enumerate(node.output):
        if name and (name in context.values or name in made):
            raise context.error(
                node, f"output {index} '{name}' is already defined (ONNX names each tensor once)"
            )
        made.add(name)


def _check_outputs(context: OnnxContext, node: Any, read: set[str]) -> None:
    """A node output that the model reads but the converter did not produce (a Dropout's mask,
    a training-mode BatchNormalization's statistics, MaxPool's indices) is refused by name."""
    for index, output in enumerate(node.output):
        if output and output in read and output not in context.values:
            raise context.error(node, f"output {index} ('{output}') is not supported")


def _constant_attr(
    onnx: Any, context: OnnxContext, node: Any, attrs: Mapping[str, Any]
) -> np.ndarray:
    if "value" in attrs:  # its data may be external too: read as an initializer's is
        what = f"{node_label(node)}: its value"
        return tensor_array(onnx, attrs["value"], context.path, what)
    for key in ("value_float", "value_int"):
        if key in attrs:
            return np.asarray(attrs[key])
    for key in ("value_floats", "value_ints"):
        if key in attrs:
            return np.asarray(list(attrs[key]))
    raise OptGraphError(f"import: Constant with attributes {sorted(attrs)} is not supported")


def _fold(onnx: Any, context: OnnxContext, node: Any) -> bool:
    """Evaluate a node whose operands are all constants with onnx's reference evaluator."""
    from onnx.reference import ReferenceEvaluator

    draft = context.draft
    feeds = {f"in{i}": draft.exact(context.values[n]) for i, n in enumerate(node.input) if n}
    inputs = [f"in{i}" if name else "" for i, name in enumerate(node.input)]
    outputs = [f"out{i}" for i in range(len(node.output))]
    single = onnx.helper.make_node(node.op_type, inputs, outputs, domain=node.domain)
    single.attribute.extend(node.attribute)
    check_fold_size(onnx, context, node, single, feeds)
    try:
        results = ReferenceEvaluator(single).run(None, feeds)
    except Exception:  # noqa: BLE001 - an op the evaluator cannot fold stays a node
        return False
    for name, value in zip(node.output, results):
        context.values[name] = context.draft.constant(np.asarray(value), ir_name(name))
        if np.asarray(value).ndim == 0:
            context.scalars.add(name)
    return True
