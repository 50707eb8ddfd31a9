"""An ONNX model's opset and each node checked against onnx's operator schemas before it is
converted, so that a damaged or hand-edited model is refused by name instead of failing inside a
converter (`TopK` with one output, `Reshape` with no shape, `transA` given as a string):

    model.onnx:1:1: error: import: TopK 'k': has 1 output; TopK (opset 18) has 2 to 2

- every string field is text (protobuf leaves damaged UTF-8 as bytes);
- the default domain's opset is one onnx knows (1 up to the installed onnx's newest);
- a node of a known op has as many inputs and outputs as its schema allows, names every input
  that is not optional, has every required attribute, and each attribute the schema declares
  has the schema's type;
- a node folded at import (all its operands constant) may not make a result over `FOLD_LIMIT`
  bytes, by onnx's shape inference given the operands (`check_fold_size`);
- a node of an op or domain onnx has no schema for is left to the converters (unknown ops are
  reported together by `Draft.finish`).

Complexity: O(nodes + attributes).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from optgraph.errors import OptGraphError, Span
from optgraph.frontends.onnx_context import OnnxContext

DEFAULT_OPSET = 13  # a model that names no default-domain opset


def model_opset(onnx: Any, proto: Any, path: str) -> int:
    """The default domain's opset version of `proto`; an error naming `path` for one onnx does
    not know (0, negative, newer than the installed onnx)."""
    versions = [o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")]
    opset = max(versions, default=DEFAULT_OPSET)
    newest = int(onnx.defs.onnx_opset_version())
    if not 1 <= opset <= newest:
        raise OptGraphError(
            f"import: the model's opset {opset} is not one onnx {onnx.__version__} knows "
            f"(1 to {newest})",
            Span(path, 1, 1),
        )
    return opset


def check_text(message: Any, path: str, where: str = "model") -> None:
    """Refuse a string field of the protobuf `message` that is not UTF-8 text: protobuf's
    parser leaves such a field (a damaged name, op type or file location) as bytes, which no
    reader below expects. O(fields)."""
    for field, value in message.ListFields():
        inside = f"{where}.{field.name}"
        values = value if _is_repeated(field) else [value]
        if field.type == field.TYPE_STRING:
            if any(not isinstance(v, str) for v in values):
                raise OptGraphError(
                    f"import: {inside} is not UTF-8 text (the file is damaged)", Span(path, 1, 1)
                )
        elif field.type == field.TYPE_MESSAGE:
            for item in values:
                check_text(item, path, inside)


def _is_repeated(field: Any) -> bool:
    label = getattr(field, "is_repeated", None)  # protobuf 6 and later; `label` before
    return bool(label) if label is not None else field.label == field.LABEL_REPEATED


def _schema(onnx: Any, node: Any, opset: int) -> Any:
    if node.domain not in ("", "ai.onnx"):
        return None
    try:
        return onnx.defs.get_schema(node.op_type, opset, "")
    except onnx.defs.SchemaError:
        return None


def _count(n: int, what: str) -> str:
    return f"{n} {what}" + ("" if n == 1 else "s")


def check_node(onnx: Any, context: OnnxContext, node: Any) -> None:
    """Refuse `node` when its arity or an attribute's type disagrees with its op's schema."""
    schema = _schema(onnx, node, context.opset)
    if schema is None:
        return
    op = f"{node.op_type} (opset {context.opset})"
    for kind, have, low, high in (
        ("input", len(node.input), schema.min_input, schema.max_input),
        ("output", len(node.output), schema.min_output, schema.max_output),
    ):
        if not low <= have <= high:
            raise context.error(node, f"has {_count(have, kind)}; {op} has {low} to {high}")
    optional = onnx.defs.OpSchema.FormalParameterOption.Optional
    for index, name in enumerate(node.input):
        formal = schema.inputs[min(index, len(schema.inputs) - 1)]
        if not name and formal.option != optional:
            raise context.error(node, f"input {index} ('{formal.name}') is required but empty")
    declared = schema.attributes
    kind_name = onnx.AttributeProto.AttributeType.Name
    given = {attribute.name for attribute in node.attribute}
    for name, spec in declared.items():
        if spec.required and name not in given:
            raise context.error(node, f"attribute '{name}' is missing; {op} needs it")
    for attribute in node.attribute:
        spec = declared.get(attribute.name)
        if spec is not None and int(attribute.type) != int(spec.type):
            raise context.error(
                node,
                f"attribute '{attribute.name}' is {kind_name(attribute.type)}; "
                f"{op} needs {kind_name(int(spec.type))}",
            )


def node_attributes(onnx: Any, context: OnnxContext, node: Any) -> dict[str, Any]:
    """{name: value} of `node`'s attributes; an attribute of no value type is refused by name."""
    values = {}
    for attribute in node.attribute:
        try:
            values[attribute.name] = onnx.helper.get_attribute_value(attribute)
        except (ValueError, TypeError):  # onnx: "Unsupported ONNX attribute"
            raise context.error(
                node, f"attribute '{attribute.name}' has no value of a known type"
            ) from None
    return values


FOLD_LIMIT = 1 << 30  # bytes: the largest result a node folded at import may have


def check_fold_size(onnx: Any, context: OnnxContext, node: Any, single: Any,
                    feeds: dict[str, np.ndarray]) -> None:  # fmt: skip
    """Refuse folding `node` (evaluated as `single` on `feeds`) when onnx's shape inference,
    given the constant operands, says a result exceeds `FOLD_LIMIT`: a ConstantOfShape, Expand,
    Tile or Range of a few bytes in the file could ask for terabytes. A result whose shape
    inference cannot tell is evaluated."""
    feeds = dict(feeds)
    for index, name in enumerate(node.input):  # the draft keeps 0-d constants as [1]
        if name in context.scalars and f"in{index}" in feeds:
            feeds[f"in{index}"] = feeds[f"in{index}"].reshape(())
    try:
        schema = onnx.defs.get_schema(single.op_type, context.opset, single.domain)
        types = {
            name: onnx.helper.make_tensor_type_proto(
                onnx.helper.np_dtype_to_tensor_dtype(array.dtype), array.shape
            )
            for name, array in feeds.items()
        }
        data = {name: onnx.numpy_helper.from_array(a, name) for name, a in feeds.items()}
        results = onnx.shape_inference.infer_node_outputs(schema, single, types, data)
    except Exception:  # noqa: BLE001 - no schema, or inference refuses: the evaluator decides
        return
    for index, output in enumerate(single.output):
        found = results.get(output)
        if found is None or not found.HasField("tensor_type"):
            continue
        dims = [d.dim_value if d.HasField("dim_value") else 0 for d in found.tensor_type.shape.dim]
        try:
            itemsize = np.dtype(
                onnx.helper.tensor_dtype_to_np_dtype(found.tensor_type.elem_type)
            ).itemsize
        except (KeyError, TypeError, ValueError):
            itemsize = 8
        size = math.prod(dims) * itemsize
        if size > FOLD_LIMIT:
            raise context.error(
                node,
                f"output {index} would be {_shape(dims)} ({size} bytes) when folded at import, "
                f"more than the {FOLD_LIMIT} bytes a folded constant may have",
            )


def _shape(dims: list[int]) -> str:
    return "[" + ",".join(map(str, dims)) + "]"
