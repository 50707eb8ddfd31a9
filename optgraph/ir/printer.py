"""`Graph` to canonical text: the same graph always prints the same way, and parses back equal.

Canonical form: two-space indent; declarations in the order inputs, weights, nodes (issue order),
outputs; a constant's value after its weight's annotations (`= [0, 1, 2]`); attributes sorted
by key; annotations in `ANNOTATION_KEYS` order; floats by `repr`, so `parse(print_graph(g)) == g`.
"""

from __future__ import annotations

import json
import math

from optgraph.ir.constants import format_constant
from optgraph.ir.graph import (
    ANNOTATION_KEYS,
    EVENT_OPS,
    NO_ANNOTATIONS,
    Annotations,
    AttrValue,
    Graph,
    Node,
)


def format_literal(value: AttrValue) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        return json.dumps(value)
    return "[" + ", ".join(str(v) for v in value) + "]"


def _annotation_literal(key: str, value: AttrValue) -> str:
    """`device = 1` for one device (a list only for a replicated value); other keys as literals."""
    if key == "device" and isinstance(value, tuple) and len(value) == 1:
        return str(value[0])
    return format_literal(value)


def format_annotations(ann: Annotations) -> str:
    if ann is NO_ANNOTATIONS:
        return ""
    fields = ann.__dict__  # read directly, as `Annotations.items` does: every node has some
    parts = []
    for key in ANNOTATION_KEYS:
        value = fields[key]
        if value is None:
            continue
        # `_annotation_literal`, with the usual types first: ints, and tuples of them
        if type(value) is int:
            text = str(value)
        elif type(value) is tuple and not (key == "device" and len(value) == 1):
            text = "[" + ", ".join(map(str, value)) + "]"
        else:
            text = _annotation_literal(key, value)
        parts.append(f"{key} = {text}")
    if not parts:
        return ""
    return " !{" + ", ".join(parts) + "}"


def format_node(node: Node, indent: str = "  ") -> str:
    op = node.op
    if op in EVENT_OPS:
        return f"{indent}{op} ^{node.name}{format_annotations(node.ann)}"
    operands = "%" + ", %".join(node.operands) if node.operands else ""
    text = f"{indent}%{node.name} = {op}({operands})"
    if node.attrs:
        attrs = ", ".join(f"{k} = {format_literal(node.attrs[k])}" for k in sorted(node.attrs))
        text += f" {{{attrs}}}"
    text += f" : {node.type}{format_annotations(node.ann)}"
    if node.body is not None:
        params = ", ".join(f"%{p}" for p in node.body.params)
        inner = indent + "  "
        lines = [f"{text} body({params}) {{"]
        lines.extend(format_node(n, inner) for n in node.body.nodes)
        lines.append(f"{inner}yield %{node.body.result}")
        lines.append(f"{indent}}}")
        return "\n".join(lines)
    return text


def print_graph(graph: Graph) -> str:
    """The canonical text of `graph`, ending with a newline."""
    lines = [f"graph {graph.name} {{"]
    lines.extend(f"  input %{i.name} : {i.type}{format_annotations(i.ann)}" for i in graph.inputs)
    for w in graph.weights:
        placement = "" if w.placement == "device" else f" {w.placement}"
        value = "" if w.value is None else f" = {format_constant(w)}"
        lines.append(f"  weight %{w.name} : {w.type}{placement}{format_annotations(w.ann)}{value}")
    lines.extend(format_node(n) for n in graph.nodes)
    if graph.outputs:
        lines.append("  output " + ", ".join(f"%{o.name}" for o in graph.outputs))
    lines.append("}")
    return "\n".join(lines) + "\n"
