"""`dce`: remove nodes whose results no output needs.

    before: %a = exp(%x) : f32[4]    %b = neg(%x) : f32[4]    output %a
    after:  %a = exp(%x) : f32[4]                              output %a

Event nodes (`record`/`wait`) are kept, except a `record` whose event no `wait` uses and a `wait` on
an event that is no longer recorded. Weights no live node reads are dropped; inputs are kept (they
are the graph's calling convention).

Does not handle: dead values inside fused bodies, unused inputs (kept). Invalidates live ranges
(removing nodes shifts issue indices): it runs before analyze-lifetimes. An arena plan stays sound
(fewer accesses), and so do events.

Complexity O(V + E): one backward sweep.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from optgraph.ir.graph import Graph
from optgraph.passes.base import Pass


@dataclass(frozen=True)
class DcePass(Pass):
    name = "dce"
    summary = "remove nodes whose results no output needs"
    invalidates = ("lifetimes-analyzed",)

    def run(self, graph: Graph) -> Graph:
        needed = set(graph.output_names())
        keep = [False] * len(graph.nodes)
        for i in range(len(graph.nodes) - 1, -1, -1):
            node = graph.nodes[i]
            if node.is_event or node.name in needed:
                keep[i] = True
                needed.update(node.operands)
        waited = {n.name for i, n in enumerate(graph.nodes) if keep[i] and n.op == "wait"}
        recorded = {n.name for i, n in enumerate(graph.nodes) if keep[i] and n.op == "record"}
        nodes = [
            n
            for i, n in enumerate(graph.nodes)
            if keep[i]
            and not (n.op == "record" and n.name not in waited)
            and not (n.op == "wait" and n.name not in recorded)
        ]
        weights = tuple(w for w in graph.weights if w.name in needed)
        if len(nodes) == len(graph.nodes) and len(weights) == len(graph.weights):
            return graph  # nothing dead: the graph itself, with what it knows of itself
        return replace(graph, nodes=tuple(nodes), weights=weights)
