"""Whole-graph checks: names, issue order, cycles, events, shapes and dtypes.

`verify(graph)` reports every problem it finds (not only the first) as one `VerifyError` holding a
located diagnostic per problem. It checks:

- each value defined once (inputs, weights, node results), each use defined, outputs defined;
- uses come after definitions (issue order is topological); a forward use that closes a loop is
  reported as a cycle, naming the values on it;
- every op is known and its declared result type equals the type the op table infers;
- quantized types (`QUANT_BLOCKS`) only on weights (and the copies passes make of them), whose
  last dimension holds whole blocks; the op table refuses every reader the op does not allow;
- events: each `wait ^e` follows a `record ^e`, each event is recorded once, events have no operands;
- devices (`verify_devices`): operands exist where their node runs, collectives and send/recv
  placed on their group and peers;
- sizes and ids within `optgraph.ir.limits` (checked first: the other checks compute with them).

Complexity: O(V + E) plus the op table's per-node inference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from optgraph.errors import Diagnostic, OptGraphError, Span, VerifyError, did_you_mean
from optgraph.ir import ops
from optgraph.ir.gc_pause import gc_paused
from optgraph.ir.graph import (
    DATA_PREDECESSORS,
    EVENT_OPS,
    NODE_COSTS,
    QUANT_BLOCKS,
    VALUE_TYPES,
    Graph,
    Input,
    Node,
    TensorType,
    Weight,
    differs_only_in_annotations,
)
from optgraph.ir.layout import ALIAS_ROOTS
from optgraph.ir.limits import limit_diagnostics, node_annotation_diagnostics
from optgraph.ir.verify_devices import device_diagnostics

_MAX_SUGGESTIONS = 10


def _operand_span(node: Node, index: int) -> Span | None:
    if index < len(node.operand_spans):
        return node.operand_spans[index]
    return node.span


def _cyclic_components(graph: Graph, producers: dict[str, int]) -> dict[str, int]:
    """Strongly connected component of every node on a dependency loop (iterative Tarjan, O(V+E)).

    Edges go from a node to the nodes producing its operands. Nodes on no loop are absent.
    """
    succ = {
        n.name: tuple(o for o in n.operands if o in producers)
        for n in graph.nodes
        if not n.is_event
    }
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    component: dict[str, int] = {}
    components = 0
    for root in succ:
        if root in index:
            continue
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        work = [(root, 0)]
        while work:
            v, i = work[-1]
            if i < len(succ[v]):
                work[-1] = (v, i + 1)
                w = succ[v][i]
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[v])
            if low[v] != index[v]:
                continue
            members = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                members.append(w)
                if w == v:
                    break
            if len(members) > 1 or v in succ[v]:
                component.update((m, components) for m in members)
                components += 1
    return component


def _cycle_through(graph: Graph, producers: dict[str, int], user: str, operand: str) -> list[str]:
    """`[user, operand, ..., user]`: a loop from `user` through `operand` back (BFS, O(V+E))."""
    parent: dict[str, str] = {operand: operand}
    queue = [operand]
    for name in queue:
        if name == user:
            break
        for nxt in graph.nodes[producers[name]].operands:
            if nxt in producers and nxt not in parent:
                parent[nxt] = name
                queue.append(nxt)
    path = [user]
    while path[-1] != operand:
        path.append(parent[path[-1]])
    return [user, *reversed(path)] if user != operand else [user, user]


def verify(graph: Graph, previous: Graph | None = None) -> None:
    """Raise `VerifyError` listing every problem in `graph`; return None when it is well-formed.

    `previous`: a graph `graph` was made from (a pass's input). When it verified and `graph`
    differs from it only in node annotations other than `device` (what analyze-lifetimes and
    plan-memory change), only the checks that read those annotations run: everything else would
    find what it found in `previous`, nothing."""
    if graph.__dict__.get(_VERIFIED):
        return
    with gc_paused():  # O(V) small objects next to the graph's own: see optgraph.ir.gc_pause
        if (
            previous is not None
            and previous.__dict__.get(_VERIFIED)
            and differs_only_in_annotations(previous, graph, kept=("device",))
        ):
            _verify_node_annotations(graph)
            _share_value_facts(previous, graph)
        else:
            _verify(graph)
    graph.__dict__[_VERIFIED] = True


# What a graph remembers about its values alone (types, producers, alias roots, data
# predecessors, node costs) and its device annotations, in its instance `__dict__`: the same for
# a graph differing from it only in other annotations, so the graph a pass re-annotates takes
# them over instead of computing them again.
_VALUE_FACTS = (
    VALUE_TYPES,
    "_producers",
    "_device_count",
    ALIAS_ROOTS,
    DATA_PREDECESSORS,
    NODE_COSTS,
)


def _share_value_facts(previous: Graph, graph: Graph) -> None:
    for key in _VALUE_FACTS:
        if key in previous.__dict__ and key not in graph.__dict__:
            graph.__dict__[key] = previous.__dict__[key]


def _verify_node_annotations(graph: Graph) -> None:
    """What `_verify` reports about node annotations: limits, then layouts (in node order)."""
    beyond_limits = node_annotation_diagnostics(graph)
    if beyond_limits:
        raise VerifyError.from_diagnostics(beyond_limits)
    diags = [
        Diagnostic(f"'%{node.name}': only weights take a layout", node.span)
        for node in graph.nodes
        if node.ann.layout is not None
    ]
    if diags:
        raise VerifyError.from_diagnostics(diags)


def is_verified(graph: Graph) -> bool:
    """Whether `verify` passed on this graph object: then, among the rest, every operand is
    defined before the node reading it (graphs are immutable)."""
    return bool(graph.__dict__.get(_VERIFIED))


# Set in a graph's instance `__dict__` (outside the dataclass fields, so equality and `replace`
# never see it) once it verified: graphs are immutable, and a compile verifies the same graph
# object several times (after reading it, when a pipeline starts, in the verify pass, after a
# pass that returns its input). Failures are not remembered.
_VERIFIED = "_verified"


def _verify(graph: Graph) -> None:
    beyond_limits = limit_diagnostics(graph)
    if beyond_limits:  # sizes and ids every later check would compute with
        raise VerifyError.from_diagnostics(beyond_limits)
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
        if i.ann.layout is not None:
            diags.append(Diagnostic(f"input '%{i.name}': only weights take a layout", i.span))
        if i.type.is_quantized:
            diags.append(
                Diagnostic(f"input '%{i.name}' {i.type}: {_QUANTIZED_WEIGHTS_ONLY}", i.span)
            )
    for w in graph.weights:
        define(w.name, w.type, w.span)
        if w.value is not None and (w.type.is_quantized or len(w.value) != w.type.nbytes):
            diags.append(
                Diagnostic(
                    f"weight '%{w.name}' {w.type}: a constant's value has {len(w.value)} bytes, "
                    f"not {w.type.nbytes}",
                    w.span,
                )
            )
        if w.type.is_quantized:
            diags.extend(_quantized_weight_diagnostics(w))
        elif w.ann.layout is not None and w.type.rank != 2:
            diags.append(
                Diagnostic(f"weight '%{w.name}' {w.type}: a transposed layout needs 2 axes", w.span)
            )

    # "Did you mean" costs O(V) per unknown name: give it to the first few only, so a file full
    # of typos stays linear.
    suggestions_left = [_MAX_SUGGESTIONS]

    def suggest(word: str, choices: Callable[[], list[str]]) -> str:
        if suggestions_left[0] <= 0:
            return ""
        suggestions_left[0] -= 1
        return did_you_mean(word, choices())

    producers = graph.producers()
    recorded: dict[str, int] = {}
    forward_uses: list[tuple[int, str, str]] = []  # (diagnostic position, user, operand)
    op_names = list(ops.op_names())
    known_ops = ops.OPS
    alike: dict[tuple[object, ...], TensorType] = {}  # see `ops.remembered_type`
    typed_events = False  # an event with a type: `Graph.value_types` would list it
    type_of = types.get

    for index, node in enumerate(graph.nodes):
        op = node.op
        if node.ann.layout is not None:
            diags.append(Diagnostic(f"'%{node.name}': only weights take a layout", node.span))
        if op in EVENT_OPS:
            typed_events = typed_events or node.type is not None
            if op == "record":
                if node.name in recorded:
                    diags.append(Diagnostic(f"event '^{node.name}' is recorded twice", node.span))
                recorded[node.name] = index
            elif node.name not in recorded:
                diags.append(
                    Diagnostic(f"wait on event '^{node.name}' before it is recorded", node.span)
                )
            continue

        # The lookups in C; a type object is always true, so `all` finds a missing one.
        operand_types: list[Any] = list(map(type_of, node.operands))
        missing = not all(operand_types)
        for k, operand in enumerate(node.operands) if missing else ():
            if types.get(operand) is not None:
                continue
            if operand in defined_at:
                continue  # defined without a usable type: reported already
            span = _operand_span(node, k)
            if operand in producers and producers[operand] >= index:
                # A cycle or only a misordering: decided after the walk, for all uses at once.
                forward_uses.append((len(diags), node.name, operand))
                diags.append(Diagnostic("", span))
            else:
                hint = suggest(operand, lambda: list(defined_at) + list(producers))
                diags.append(Diagnostic(f"use of undefined value '%{operand}'{hint}", span))

        node_type = node.type
        if op not in known_ops:
            diags.append(Diagnostic(f"unknown op '{op}'{did_you_mean(op, op_names)}", node.span))
        elif not missing:
            try:
                inferred = ops.remembered_type(node, operand_types, alike)
            except OptGraphError as err:
                diags.extend(err.diagnostics)
            else:
                if node_type is not None and inferred is not node_type and inferred != node_type:
                    diags.append(
                        Diagnostic(
                            f"{op}: declared type {node_type} but the operands give {inferred}",
                            node.span,
                        )
                    )
        if node_type is not None and node_type.dtype in QUANT_BLOCKS and op not in _MOVES_BYTES:
            diags.append(
                Diagnostic(f"'%{node.name}' {node_type}: {_QUANTIZED_WEIGHTS_ONLY}", node.span)
            )
        name = node.name  # `define`, inline: once per node
        if name in defined_at:
            diags.append(Diagnostic(f"redefinition of '%{name}'", node.span))
        else:
            defined_at[name] = node.span
            if node_type is not None:
                types[name] = node_type

    if forward_uses:
        _explain_forward_uses(graph, producers, forward_uses, diags)
    diags.extend(device_diagnostics(graph))

    if not graph.outputs:
        # The graph has no span of its own: point at its last declaration, where `output` belongs.
        declared: list[Input | Weight | Node] = [*graph.inputs, *graph.weights, *graph.nodes]
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
    if not typed_events:
        # `types` is now `graph.value_types()` (every value once, declared types, in order):
        # kept for the pass that reads it next instead of being made again.
        graph.__dict__.setdefault(VALUE_TYPES, types)


# Quantized values are weights; the copies passes make of them (split-backends, plan-prefetch)
# keep their bytes and type.
_QUANTIZED_WEIGHTS_ONLY = "a quantized type is only for weights (dequantize them to compute)"
_MOVES_BYTES = frozenset({"copy", "prefetch"})


def _quantized_weight_diagnostics(w: Weight) -> list[Diagnostic]:
    """Blocks run along the last axis, whole: it must hold a multiple of the block; the weight is
    read as stored (no layout)."""
    elems, size = QUANT_BLOCKS[w.type.dtype]
    if w.type.rank == 0:
        return [
            Diagnostic(f"weight '%{w.name}' {w.type}: a quantized weight needs an axis", w.span)
        ]
    diags = []
    last = w.type.shape[-1]
    if last % elems:
        diags.append(
            Diagnostic(
                f"weight '%{w.name}' {w.type}: the last dimension ({last}) must be a multiple of "
                f"the {w.type.dtype} block ({elems} elements, {size} bytes)",
                w.span,
            )
        )
    if w.ann.layout is not None:
        diags.append(
            Diagnostic(
                f"weight '%{w.name}' {w.type}: a quantized weight takes no layout (its blocks "
                "run along the last axis as stored)",
                w.span,
            )
        )
    return diags


def _explain_forward_uses(
    graph: Graph,
    producers: dict[str, int],
    forward_uses: list[tuple[int, str, str]],
    diags: list[Diagnostic],
) -> None:
    """Fill in the placeholder diagnostics of uses before definitions: one per dependency loop,
    "used before it is defined" for the rest."""
    component = _cyclic_components(graph, producers)
    reported: set[int] = set()
    drop: set[int] = set()
    for position, user, operand in forward_uses:
        span = diags[position].span
        loop = component.get(user)
        if loop is not None and component.get(operand) == loop:
            if loop in reported:
                drop.add(position)
                continue
            reported.add(loop)
            cycle = " -> ".join(f"%{n}" for n in _cycle_through(graph, producers, user, operand))
            diags[position] = Diagnostic(f"cycle: {cycle}", span)
        else:
            message = f"'%{operand}' is used before it is defined (nodes must be in issue order)"
            diags[position] = Diagnostic(message, span)
    if drop:
        diags[:] = [d for i, d in enumerate(diags) if i not in drop]
