"""Whole-graph checks: names, issue order, cycles, events, shapes and dtypes.

`verify(graph)` reports every problem it finds (not only the first) as one `VerifyError` holding a
located diagnostic per problem. It checks:

- each value defined once (inputs, weights, node results), each use defined, outputs defined;
- uses come after definitions (issue order is topological); a forward use that closes a loop is
  reported as a cycle, naming the values on it;
- every op is known and its declared result type equals the type the op table infers;
- events: each `wait ^e` follows a `record ^e`, each event is recorded once, events have no operands.

Complexity: O(V + E) plus the op table's per-node inference.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from optgraph.errors import Diagnostic, OptGraphError, Span, VerifyError
from optgraph.ir import ops
from optgraph.ir.graph import Graph, Node, TensorType

_MAX_SUGGESTIONS = 10


def _suggest(word: str, choices: list[str]) -> str:
    close = difflib.get_close_matches(word, choices, n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _operand_span(node: Node, index: int) -> Span | None:
    if index < len(node.operand_spans):
        return node.operand_spans[index]
    return node.span


def _find_cycle(graph: Graph, start: str, producers: dict[str, int]) -> list[str] | None:
    """A dependency loop through `start`, following operands of producing nodes (iterative DFS)."""
    nodes = graph.nodes
    stack: list[tuple[str, int]] = [(start, 0)]
    path: list[str] = [start]
    on_path = {start}
    seen: set[str] = set()
    while stack:
        name, i = stack[-1]
        operands = nodes[producers[name]].operands if name in producers else ()
        if i >= len(operands):
            stack.pop()
            path.pop()
            on_path.discard(name)
            seen.add(name)
            continue
        stack[-1] = (name, i + 1)
        nxt = operands[i]
        if nxt == start:
            return path + [start]
        if nxt in on_path or nxt in seen or nxt not in producers:
            continue
        stack.append((nxt, 0))
        path.append(nxt)
        on_path.add(nxt)
    return None


def verify(graph: Graph) -> None:
    """Raise `VerifyError` listing every problem in `graph`; return None when it is well-formed."""
    diags: list[Diagnostic] = []
    types: dict[str, TensorType] = {}
    defined_at: dict[str, Span | None] = {}

    def define(name: str, tensor_type: TensorType | None, span: Span | None) -> None:
        if name in defined_at:
            diags.append(Diagnostic(f"redefinition of '%{name}'", span))
            return
        defined_at[name] = span
        if tensor_type is not None:
            types[name] = tensor_type

    for i in graph.inputs:
        define(i.name, i.type, i.span)
    for w in graph.weights:
        define(w.name, w.type, w.span)

    # "Did you mean" costs O(V) per unknown name: give it to the first few only, so a file full
    # of typos stays linear.
    suggestions_left = [_MAX_SUGGESTIONS]

    def suggest(word: str, choices: Callable[[], list[str]]) -> str:
        if suggestions_left[0] <= 0:
            return ""
        suggestions_left[0] -= 1
        return _suggest(word, choices())

    producers = graph.producers()
    recorded: dict[str, int] = {}
    cycle_reported: set[str] = set()
    op_names = list(ops.op_names())

    for index, node in enumerate(graph.nodes):
        if node.is_event:
            if node.op == "record":
                if node.name in recorded:
                    diags.append(Diagnostic(f"event '^{node.name}' is recorded twice", node.span))
                recorded[node.name] = index
            elif node.name not in recorded:
                diags.append(
                    Diagnostic(f"wait on event '^{node.name}' before it is recorded", node.span)
                )
            continue

        operand_types: list[TensorType] = []
        missing = False
        for k, operand in enumerate(node.operands):
            if operand in types:
                operand_types.append(types[operand])
                continue
            missing = True
            if operand in defined_at:
                continue  # defined without a usable type: reported already
            span = _operand_span(node, k)
            if operand in producers and producers[operand] > index:
                cycle = _find_cycle(graph, node.name, producers)
                if cycle is not None and operand in cycle:
                    key = min(cycle)
                    if key not in cycle_reported:
                        cycle_reported.add(key)
                        loop = " -> ".join(f"%{n}" for n in cycle)
                        diags.append(Diagnostic(f"cycle: {loop}", span))
                else:
                    diags.append(
                        Diagnostic(
                            f"'%{operand}' is used before it is defined (nodes must be in issue order)",
                            span,
                        )
                    )
            else:
                hint = suggest(operand, lambda: list(defined_at) + list(producers))
                diags.append(Diagnostic(f"use of undefined value '%{operand}'{hint}", span))

        if ops.get_op(node.op) is None:
            diags.append(
                Diagnostic(f"unknown op '{node.op}'{_suggest(node.op, op_names)}", node.span)
            )
        elif not missing:
            try:
                inferred = ops.infer_type(node, operand_types)
            except OptGraphError as err:
                diags.extend(err.diagnostics)
            else:
                if node.type is not None and inferred != node.type:
                    diags.append(
                        Diagnostic(
                            f"{node.op}: declared type {node.type} but the operands give {inferred}",
                            node.span,
                        )
                    )
        define(node.name, node.type, node.span)

    if not graph.outputs:
        # The graph has no span of its own: point at its last declaration, where `output` belongs.
        declared = [*graph.inputs, *graph.weights, *graph.nodes]
        last = next((d.span for d in reversed(declared) if d.span is not None), None)
        message = f"graph '{graph.name}' has no output"
        if last is not None:
            message += " (add 'output %name' after this line)"
        diags.append(Diagnostic(message, last))
    seen_outputs: set[str] = set()
    for out in graph.outputs:
        if out.name not in defined_at:
            hint = suggest(out.name, lambda: list(defined_at))
            diags.append(Diagnostic(f"output '%{out.name}' is not defined{hint}", out.span))
        elif out.name in seen_outputs:
            diags.append(Diagnostic(f"output '%{out.name}' is listed twice", out.span))
        seen_outputs.add(out.name)

    if diags:
        raise VerifyError.from_diagnostics(diags)
