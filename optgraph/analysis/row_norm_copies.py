"""Copies of a norm shared by one-row products, one per product: `fuse{row-prologues}`'s first step.

A decode step normalizes one row and reads it from several one-row products (q/k/v; gate/up).
`row_norm_copies` names a copy of the norm for each product, which `fuse` then absorbs as
the product's prologue (the matrix-vector kernel computes the norm while reading its row), so
the norm is no kernel of its own:

    before: %n = rms_norm(%h, %g)   %q = matmul(%n, %wq)   %k = matmul(%n, %wk)
    after:  %n.0 = rms_norm(%h, %g)  %q = matmul(%n.0, %wq)  %n.1 = rms_norm(%h, %g)  %k = ...

`append_copies` puts the copies past a node list's end and rewires the readers (no index moves).
Inside a fused region each copy takes its original's name back (`restored_names`: a body is a
scope of its own). Complexity O(V + E).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TypeVar

from optgraph.analysis.fusion_rules import NORM_OPS, plan_region, reduction_cols
from optgraph.ir.graph import Graph, Node, TensorType
from optgraph.ir.ops import attrs_key

T = TypeVar("T")


def _signature(node: Node, types: dict[str, TensorType]) -> tuple[object, ...]:
    """What `plan_region` reads of a node besides its name: op, attributes, operand and result
    types (types by identity: the graph keeps each alive while the copies are planned, and two
    equal type objects only cost a second plan)."""
    # each attribute with its type (`typed_value`), kept on the node
    return node.op, attrs_key(node), id(node.type), *[id(types.get(o)) for o in node.operands]


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


@dataclass
class AppendedCopies:
    """What `append_copies` did: the issue order of the nodes (each norm's copies where the
    norm was), the fusable nodes in that order, each copy's place in issue order (between its
    norm's and the next node's, to sort by) and {copy name: norm name}."""

    order: list[int]
    walk: list[int]
    positions: dict[int, float]
    copies: dict[str, str]


def append_copies(
    nodes: list[Node],
    made: list[tuple[int, list[tuple[str, int]]]],
    types: dict[str, TensorType],
    readers: dict[str, list[int]],
    producers: dict[str, int],
    fusable: dict[int, T],
) -> AppendedCopies:
    """Give each reader of a norm of `made` (`row_norm_copies`) its copy, in place of the norm.

    The copies go to the end of `nodes` (no index moves: the `readers` and `producers` found
    stay true, and get the copies) and each reader is rewired to its copy; `types` gets the
    copies' types, `fusable` (indices in issue order, the norms among them) the copies with
    their norm's value. O(V) for the orders (list slices), O(1) per copy and per read of a
    norm's operand.
    """
    last = len(nodes)  # the graph's own nodes: [0, last)
    indices = list(fusable)  # in issue order
    done = AppendedCopies([], [], {}, {})
    start = seen = 0
    for i, named in made:
        norm = nodes[i]
        done.order += range(start, i)
        at = bisect_left(indices, i, seen)
        assert indices[at] == i  # `row_norm_copies` copies fusable norms only
        done.walk += indices[seen:at]
        start, seen = i + 1, at + 1
        made_here = list(range(len(nodes), len(nodes) + len(named)))
        for k, (name, r) in enumerate(named):
            c = made_here[k]
            nodes.append(norm.with_fields(name=name))
            reader = nodes[r]
            nodes[r] = reader.with_fields(operands=(name, *reader.operands[1:]))
            producers[name] = c
            types[name] = types[norm.name]
            readers[name] = [r]
            done.copies[name] = norm.name
            done.positions[c] = i + (k + 1) / (len(named) + 1)
            fusable[c] = fusable[i]
        done.order += made_here
        done.walk += made_here
        for operand in set(norm.operands):  # each copy reads what the norm read
            found = readers.get(operand)
            if found is not None:
                readers[operand] = [c for u in found for c in (made_here if u == i else (u,))]
    done.order += range(start, last)
    done.walk += indices[seen:]
    return done


def restored_names(names: Sequence[str], copies: dict[str, str]) -> dict[str, str]:
    """Inside a region whose body nodes are `names`, the new name of each norm copy: its
    original's (bodies are scopes), unless a body node already has that name."""
    rename = {name: copies[name] for name in names if name in copies}
    if not rename:
        return rename
    taken = set(names)
    return {k: v for k, v in rename.items() if v not in taken}
