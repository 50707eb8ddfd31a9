"""Copies of a norm shared by one-row products, one per product: `fuse{row-prologues}`'s first step.

A decode step normalizes one row and reads it from several one-row products (q/k/v; gate/up).
`recompute_row_norms` gives each product its own copy of the norm, which `fuse` then absorbs as
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


def recompute_row_norms(
    graph: Graph, types: dict[str, TensorType], max_k: int = 2048
) -> tuple[Sequence[Node], dict[str, str]]:
    """Give each one-row product reading a shared row norm its own copy of the norm.

    A decode step normalizes one row and feeds it to several products (q/k/v; gate/up): stored,
    the norm is a kernel of its own; copied, each product computes it while reading its row
    (the row is K elements, its statistics cost the product a block reduction). Rows up to
    `max_k`. `types`: `graph.value_types()`. Returns the nodes (the graph's own when nothing is
    copied) and {copy name: original name}. O(V + E): one walk over the operands finds the
    readers of the norms alone.
    """
    nodes = graph.nodes
    # Norms only (what `_shares_row_norm` tests first), of rows up to max_k.
    norms = [
        i for i, n in enumerate(nodes) if n.op in NORM_OPS and types[n.name].shape[-1] <= max_k
    ]
    if not norms:
        return nodes, {}
    users: dict[str, list[int]] = {nodes[i].name: [] for i in norms}
    get = users.get
    for i, node in enumerate(nodes):
        for operand in node.operands:
            found = get(operand)
            if found is not None:
                found.append(i)
    outputs = frozenset(graph.output_names())
    fusable: dict[tuple[object, ...], bool] = {}
    shared: dict[int, list[int]] = {}  # norm -> its readers, each to get a copy
    for i in norms:
        node = nodes[i]
        readers = sorted(set(users[node.name]))
        if _shares_row_norm(graph, types, node, readers, outputs, fusable):
            shared[i] = readers
    if not shared:
        return nodes, {}
    # Names in use: every value's, and every node's (events and untyped nodes have no type).
    taken = set(types).union(n.name for n in nodes if n.type is None)
    copies: dict[str, str] = {}
    rewired = list(nodes)  # each reader reading its copy
    out: list[Node] = []
    start = 0
    for i, readers in shared.items():  # in issue order
        node = nodes[i]
        out += rewired[start:i]
        start = i + 1
        for k, r in enumerate(readers):
            name, n = f"{node.name}.{k}", k
            while name in taken:
                n += 1
                name = f"{node.name}.{n}"
            taken.add(name)
            copies[name] = node.name
            out.append(node.with_fields(name=name))
            reader = rewired[r]
            rewired[r] = reader.with_fields(operands=(name, *reader.operands[1:]))
    out += rewired[start:]
    return out, copies


def restored_names(names: Sequence[str], copies: dict[str, str]) -> dict[str, str]:
    """Inside a region whose body nodes are `names`, the new name of each norm copy: its
    original's (bodies are scopes), unless a body node already has that name."""
    rename = {name: copies[name] for name in names if name in copies}
    if not rename:
        return rename
    taken = set(names)
    return {k: v for k, v in rename.items() if v not in taken}
