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

from optgraph.ir.graph import EVENT_OPS, Graph
from optgraph.passes.base import Pass


@dataclass(frozen=True)
class DcePass(Pass):
    name = "dce"
    summary = "remove nodes whose results no output needs"
    invalidates = ("lifetimes-analyzed",)

    def run(self, graph: Graph) -> Graph:
        nodes = graph.nodes
        needed = set(graph.output_names())
        keep = [False] * len(nodes)
        events = False
        for i in range(len(nodes) - 1, -1, -1):
            node = nodes[i]
            if node.op in EVENT_OPS:
                events = keep[i] = True
                needed.update(node.operands)
            elif node.name in needed:
                keep[i] = True
                needed.update(node.operands)
        kept = [n for n, k in zip(nodes, keep) if k]
        if events:  # unpaired events go: a record nobody waits on, a wait on no record
            waited = {n.name for n in kept if n.op == "wait"}
            recorded = {n.name for n in kept if n.op == "record"}
            kept = [
                n
                for n in kept
                if not (n.op == "record" and n.name not in waited)
                and not (n.op == "wait" and n.name not in recorded)
            ]
        weights = tuple(w for w in graph.weights if w.name in needed)
        if len(kept) == len(nodes) and len(weights) == len(graph.weights):
            return graph  # nothing dead: the graph itself, with what it knows of itself
        return replace(graph, nodes=tuple(kept), weights=weights)
