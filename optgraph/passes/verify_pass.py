"""`verify`: check the graph and change nothing.

    before: %y = matmul(%x, %w) : f32[2,4]     (with %x : f32[2,8], %w : f32[4,4])
    after:  error: matmul: inner dimensions differ (8 vs 4)

Every problem is reported (see `optgraph.ir.verify`). Does not handle: races and memory plans
(`check-races`), the facts later passes need (the pass manager checks those).

Complexity O(V + E).
"""

from __future__ import annotations

from dataclasses import dataclass

from optgraph.ir.graph import Graph
from optgraph.ir.verify import verify
from optgraph.passes.base import Pass


@dataclass(frozen=True)
class VerifyPass(Pass):
    name = "verify"
    summary = "check names, order, cycles, events, shapes and dtypes; change nothing"

    def run(self, graph: Graph) -> Graph:
        verify(graph)
        return graph
