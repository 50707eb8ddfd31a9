"""Copies of a norm shared by one-row products, one per product: `fuse{row-prologues}`'s first step.

A decode step normalizes one row and reads it from several one-row products (q/k/v; gate/up).
`row_norm_copies` names a copy of the norm for each product, which `fuse` then absorbs as
the product's prologue (the matrix-vector kernel computes the norm while reading its row), so
the norm is no kernel of its own:

    before: %n = rms_norm(%h, %g)   %q = matmul(%n, %wq)   %k = matmul(%n, %wk)
    after:  %n.0 = rms_norm(%h, %g)  %q = matmul(%n.0, %wq)  %n.1 = rms_norm(%h, %g)  %k = ...

Inside a fused region each copy takes its original's name back (`restored_names`: a body is a
scope of its own). Complexity O(V + E).
"""

from __future__ import annotations

from collections.abc import Sequence

from optgraph.analysis.fusion_rules import NORM_OPS, plan_region, reduction_cols
from optgraph.ir.graph import Graph, Node, TensorType
from optgraph.ir.op_specs import typed_value


def _signature(node: Node, types: dict[str, TensorType]) -> tuple[object, ...]:
    """What `plan_region` reads of a node besides its name: op, attributes, operand and result
    types (types by identity: the graph keeps each alive while the copies are planned, and two
    equal type objects only cost a second plan)."""
    attrs = tuple([(k, typed_value(v)) for k, v in node.attrs.items()])
    return node.op, attrs, id(node.type), *[id(types.get(o)) for o in node.operands]


def _shares_row_norm(
    graph: Graph,
    types: dict[str, TensorType],
    norm: Node,
    readers: Sequence[int],
    outputs: frozenset[str],
    fusable: dict[tuple[object, ...], bool],
) -> bool:
    """`norm` normalizes one row, is no graph output, and every reader (two or more) is a
    one-row product on its stream and backend reading it as the row: each can recompute it.

    `fusable`: whether `plan_region` made one kernel of earlier pairs, by both nodes'
    signatures: a reader reads the norm as its row only, so the pair's plan depends on nothing
    else, and a model's repeated layers are planned once, not once a pair."""
    if norm.op not in NORM_OPS or len(readers) < 2 or norm.name in outputs:
        return False
    if types[norm.operands[0]].numel != reduction_cols(norm, types[norm.operands[0]]):
        return False
    signature = None
    for r in readers:
        reader = graph.nodes[r]
        if reader.op != "matmul" or reader.operands[0] != norm.name:
            return False
        if norm.name in reader.operands[1:] or (reader.ann.stream, reader.ann.backend) != (
            norm.ann.stream,
            norm.ann.backend,
        ):
            return False
        signature = signature or _signature(norm, types)
        key = (signature, _signature(reader, types))
        found = fusable.get(key)
        if found is None:
            found = fusable[key] = plan_region([norm, reader], types)[0] is not None
        if not found:
            return False
    return True


def row_norm_copies(
    graph: Graph,
    types: dict[str, TensorType],
    readers: dict[str, list[int]],
    norms: Sequence[int],
    max_k: int = 2048,
) -> list[tuple[int, list[tuple[str, int]]]]:
    """The norms to copy, one copy per one-row product reading the norm: for each, in issue
    order, its index and a (copy name, reader index) per reader, in issue order.

    A decode step normalizes one row and feeds it to several products (q/k/v; gate/up): stored,
    the norm is a kernel of its own; copied, each product computes it while reading its row
    (the row is K elements, its statistics cost the product a block reduction). Rows up to
    `max_k`. `types`: `graph.value_types()`; `norms`: the indices, in issue order, of the norms
    `fusion_rules.is_anchor` accepts (one it refuses `plan_region` refuses too: never copied);
    `readers`: the nodes reading each of them. The caller rewires each reader to its copy.
    O(norms + their readers), plus O(V) for the names in use where a norm is copied.
    """
    nodes = graph.nodes
    outputs = frozenset(graph.output_names())
    fusable: dict[tuple[object, ...], bool] = {}
    shared: dict[int, list[int]] = {}  # norm -> its readers, each to get a copy
    for i in norms:
        node = nodes[i]
        if types[node.name].shape[-1] > max_k:  # rows up to max_k
            continue
        distinct = sorted(set(readers[node.name]))
        if _shares_row_norm(graph, types, node, distinct, outputs, fusable):
            shared[i] = distinct
    if not shared:
        return []
    # Names in use: every value's (`types`), every node's (events and untyped nodes have no
    # type), and the copies'.
    taken = {n.name for n in nodes if n.type is None}
    made: list[tuple[int, list[tuple[str, int]]]] = []
    for i, norm_readers in shared.items():  # in issue order
        base = nodes[i].name
        named: list[tuple[str, int]] = []
        for k, r in enumerate(norm_readers):
            name, n = f"{base}.{k}", k
            while name in types or name in taken:
                n += 1
                name = f"{base}.{n}"
            taken.add(name)
            named.append((name, r))
        made.append((i, named))
    return made


def restored_names(names: Sequence[str], copies: dict[str, str]) -> dict[str, str]:
    """Inside a region whose body nodes are `names`, the new name of each norm copy: its
    original's (bodies are scopes), unless a body node already has that name."""
    rename = {name: copies[name] for name in names if name in copies}
    if not rename:
        return rename
    taken = set(names)
    return {k: v for k, v in rename.items() if v not in taken}
