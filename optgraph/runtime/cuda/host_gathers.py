"""Products of rows gathered from host tables, read in place (the CPU side of a split MoE step).

A mixture of experts on the CPU gathers the picked experts' weights from a host table
(`get_rows`) and applies them (`matmul`, right operand, through a reshape). Evaluated node by node
the gather copies megabytes into the host arena only for the product to read them once. Where
nothing else needs the gathered rows, the product reads each picked row where it lies in the
pinned table (a view: one BLAS call per row) and the gather does nothing:

    %w = get_rows(%experts, %ids) : f32[2,H*F]         (CPU: skipped)
    %w3 = reshape(%w) {shape = [2, H, F]}              (a view of it)
    %y = matmul(%x3, %w3) : f32[2,1,F]                 (CPU: y[k] = x3[0 or k] @ experts[ids[k]])

`gathers_read_in_place` finds those gathers in a split graph: CPU `get_rows` of a `host` table,
not an output, every reader (through reshapes only) a CPU f32 product taking the rows as its
right operand shaped [rows, K, N] (K x N the table's row length, no transposes), directly or in a
CPU fused node's body. `rows_product` is the product; NumPy runs it per row with the same BLAS
call as the stacked product of the reference, so the bits are the reference's.

Complexity O(V + E) for the search.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from optgraph.errors import InputError
from optgraph.ir.graph import Graph, Node, TensorType
from optgraph.ir.layout import VIEW_OPS, alias_roots


class Gather(NamedTuple):
    table: str  # the host weight
    ids: str  # the ids operand


def gathers_read_in_place(graph: Graph) -> dict[str, Gather]:
    """{gather node: (table, ids)} for the gathers no node needs materialized."""
    host = {w.name for w in graph.weights if w.placement == "host"}
    types = graph.value_types()
    found = {
        n.name: Gather(n.operands[0], n.operands[1])
        for n in graph.nodes
        if n.op == "get_rows" and n.ann.backend == "cpu" and n.operands[0] in host
        and types[n.operands[0]].rank == 2 and types[n.name].rank == 2
        and not types[n.operands[0]].is_quantized  # its rows are blocks: dequantized, not read
    }  # fmt: skip
    roots = alias_roots(graph)
    refused = {roots.get(o, (o, 0))[0] for o in graph.output_names()}
    for node in graph.nodes:
        if node.is_event:
            continue
        for k, operand in enumerate(node.operands):
            root, offset = roots.get(operand, (operand, 0))
            if root not in found:
                continue
            if node.op in VIEW_OPS:
                ok = node.op == "reshape" and offset == 0
            else:
                ok = offset == 0 and _applies_rows(node, k, types, types[root].shape[0])
            if not ok:
                refused.add(root)
    return {g: v for g, v in found.items() if g not in refused}


def _applies_rows(node: Node, k: int, types: dict[str, TensorType], rows: int) -> bool:
    """`node` (CPU) uses its operand `k` only as a product's right operand [rows, K, N]."""
    if node.ann.backend != "cpu":
        return False
    if node.op == "matmul":
        return _is_rows_product(node, node.operands, k, types, rows)
    if node.op != "fused" or node.body is None:
        return False
    param = node.body.params[k]
    inner_types = dict(types)
    inner_types.update(zip(node.body.params, (types[o] for o in node.operands)))
    for inner in node.body.nodes:
        if inner.type is not None:
            inner_types[inner.name] = inner.type
        uses = [i for i, o in enumerate(inner.operands) if o == param]
        if uses and not (
            uses == [1] and _is_rows_product(inner, inner.operands, 1, inner_types, rows)
        ):
            return False
    return node.body.result != param


def _is_rows_product(
    node: Node, operands: tuple[str, ...], k: int, types: dict[str, TensorType], rows: int
) -> bool:
    if node.op != "matmul" or k != 1 or operands[0] == operands[1]:
        return False
    if node.attrs.get("transpose_a") or node.attrs.get("transpose_b"):
        return False
    a, b = types[operands[0]], types[operands[1]]
    return (
        a.dtype == b.dtype == "f32" and a.rank == b.rank == 3
        and b.shape[0] == rows and a.shape[0] in (1, rows)
    )  # fmt: skip


def rows_product(
    a: np.ndarray, table: np.ndarray, ids: np.ndarray, kn: tuple[int, int], out: np.ndarray
) -> None:
    """out[r] = a[0 or r] @ table[ids[r]].reshape(kn), each row read in place."""
    picked = ids.reshape(-1)
    for r, i in enumerate(picked.tolist()):
        if not 0 <= i < table.shape[0]:
            raise InputError(f"get_rows: id {i} out of range for a table of {table.shape[0]} rows")
        np.matmul(a[r if a.shape[0] > 1 else 0], table[i].reshape(kn), out=out[r])
