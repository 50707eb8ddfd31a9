"""`cse`: merge nodes that compute the same thing from the same operands.

    before: %a = exp(%x) : f32[4]    %b = exp(%x) : f32[4]    %c = add(%a, %b) : f32[4]
    after:  %a = exp(%x) : f32[4]                              %c = add(%a, %a) : f32[4]

Two nodes merge when op, operands (after earlier merges), attributes, type, body and annotations are
equal; the later one is removed and its uses read the earlier one. Equal annotations keep the merge
safe on a scheduled graph: the survivor runs on the same stream, before the removed node would have.
A graph output is never the one removed: output names are the graph's calling convention.

Collectives and send/recv are never merged (each pairs with its peers). Does not handle:
commutative operands in another order (`add(%a, %b)` and `add(%b, %a)` stay two
nodes), equal values inside fused bodies, equal nodes with different annotations (streams,
offsets). Invalidates live ranges and arena offsets (removing a node shifts issue indices and
lengthens the survivor's life): it runs before analyze-lifetimes and plan-memory.

Complexity O(V + E), with each node's text printed and hashed only where an earlier node has
the same op and operands.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from optgraph.ir.graph import EVENT_OPS, Graph, Node
from optgraph.ir.ops import get_op
from optgraph.ir.printer import format_node
from optgraph.passes.base import Pass


def _communicates(node: Node) -> bool:
    """Collectives and send/recv pair up across devices: two equal sends are two transfers, each
    received once, so merging them would leave a send received twice."""
    op = get_op(node.op)
    return op is not None and op.category == "collective"


def _key(node: Node) -> str:
    """The node's text without its result name (`%h = ...` -> `% = ...`). Cut from the printed
    text rather than printing a renamed copy: a copy of every node costs as much as the print."""
    return "%" + format_node(node, indent="")[len(node.name) + 1 :]


@dataclass(frozen=True)
class CsePass(Pass):
    name = "cse"
    summary = "merge nodes that compute the same value from the same operands"
    invalidates = ("lifetimes-analyzed", "memory-planned")

    def run(self, graph: Graph) -> Graph:
        outputs = set(graph.output_names())
        rename: dict[str, str] = {}
        # Equal texts have equal ops and operands: texts are printed only within a group of kept
        # nodes with the same op and operands, once a second node joins it (printing every node
        # costs most of the pass). A group of one is its node alone (no group object).
        groups: dict[tuple[str, tuple[str, ...]], Node | _SameOperands] = {}
        apart: dict[str, bool] = {}  # by op: events and collectives are never merged
        nodes: list[Node] = []
        for node in graph.nodes:
            if rename and not rename.keys().isdisjoint(node.operands):
                node = replace(node, operands=tuple(rename.get(o, o) for o in node.operands))
            op = node.op
            never = apart.get(op)
            if never is None:
                never = apart[op] = op in EVENT_OPS or _communicates(node)
            if never:
                nodes.append(node)
                continue
            key = (op, node.operands)
            group = groups.get(key)
            if group is None:
                groups[key] = node
                nodes.append(node)
                continue
            if not isinstance(group, _SameOperands):
                group = groups[key] = _SameOperands(group)
            survivor = group.survivor(node)
            if survivor is not None and node.name not in outputs:
                rename[node.name] = survivor
                continue
            nodes.append(node)
        if not rename:
            return graph  # nothing merged: the graph itself, with what it knows of itself
        return replace(graph, nodes=tuple(nodes))


class _SameOperands:
    """Kept nodes with one op and one operand tuple: the first of each text (`_key`), printed
    when a second node arrives."""

    def __init__(self, first: Node):
        self.first: Node | None = first
        self.names: dict[str, str] = {}

    def survivor(self, node: Node) -> str | None:
        """The earlier kept node `node` merges into, if any; `node` counts as kept from now."""
        if self.first is not None:
            self.names[_key(self.first)] = self.first.name
            self.first = None
        key = _key(node)
        survivor = self.names.get(key)
        self.names.setdefault(key, node.name)
        return survivor
