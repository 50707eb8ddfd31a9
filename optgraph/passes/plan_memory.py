"""`plan-memory{algo=best, alignment=256, inplace=true}`: an offset for every buffer in one arena.

Activations (node results that own their bytes) share one device arena; inputs and weights live
apart, aliasing views use their root's bytes, and graph outputs are never overwritten. Two buffers
may share bytes only if every access to one happens-before the first write of the other, read from
the `visible` points of analyze-lifetimes: A is free for a producer p on stream s iff
`visible_A[s] != -1 and visible_A[s] <= p`. That relation is a partial order ("entirely before"),
so placement is a greedy over the conflict graph, as in TFLite and XLA:

- `algo=size`: largest first, each buffer in the smallest gap between the already placed
  buffers it conflicts with (best fit), else above them; `algo=lifetime`: longest live range first;
  `algo=issue`: in issue order; `algo=best` (default) runs the three and keeps the smallest arena;
  `algo=none`: no reuse at all (every buffer its own bytes: the `no_reuse_bytes` figure).
- In place (`inplace=true`): an elementwise op whose result has its operand's type, or a
  `kv_cache_write` on its cache, takes the operand's bytes when the operand is an arena buffer (not
  an output) whose every other access happens-before the op, on whatever stream; the two then form
  one *slot*.

    before: %a = exp(%x) : f32[64] !{live = [0, 1], visible = [2]}   %b = neg(%a) : f32[64] ...
    after:  %a = exp(%x) : f32[64] !{offset = 0, size = 256, ...}
            %b = neg(%a) : f32[64] !{offset = 0, size = 256, ...}     (in place: %a dies at %b)

Does not handle: several arenas (per backend or device), reordering nodes to lower the peak, exact
(optimal) packing. Complexity: O(n·k·log n + P) to find the P conflicting pairs (k streams), then
O(P log P) per ordering for the best-fit placement; O(V) for the clocks and lifetimes when the
graph is analyze-lifetimes' result (they are shared by graphs scheduled alike:
`analysis.happens_before.happens_before`).
"""

from __future__ import annotations

from dataclasses import dataclass

from optgraph.analysis.arena_plan import ALGOS, apply_plan, plan
from optgraph.analysis.happens_before import happens_before, share_clocks
from optgraph.analysis.lifetimes import compute_lifetimes
from optgraph.ir.gc_pause import gc_paused
from optgraph.ir.graph import Graph
from optgraph.passes.base import Pass

MAX_ALIGNMENT = 1 << 21  # a large page


@dataclass(frozen=True)
class PlanMemoryPass(Pass):
    name = "plan-memory"
    summary = "assign arena offsets; buffers share bytes only when happens-before orders them"
    requires = ("lifetimes-analyzed", "synced")
    provides = ("lifetimes-analyzed", "memory-planned")

    algo: str = "best"
    alignment: int = 256
    inplace: bool = True

    def __post_init__(self) -> None:
        if self.algo not in ALGOS:
            raise ValueError(f"algo must be one of {', '.join(ALGOS)}, got '{self.algo}'")
        if self.alignment <= 0 or self.alignment & (self.alignment - 1):
            raise ValueError(f"alignment must be a power of two, got {self.alignment}")
        if self.alignment > MAX_ALIGNMENT:
            # every buffer rounds up to it: a huge one plans an arena no device can hold
            raise ValueError(
                f"alignment must be at most {MAX_ALIGNMENT} (2 MiB), got {self.alignment}"
            )

    def run(self, graph: Graph) -> Graph:
        # Lifetimes are recomputed, never trusted from annotations a later pass may have staled.
        with gc_paused():
            hb = happens_before(graph)
            lifetimes = compute_lifetimes(graph, hb)
            memory = plan(graph, self.algo, self.alignment, self.inplace, lifetimes, hb)
            result = apply_plan(graph, memory, lifetimes)
            share_clocks(result, hb)  # only offsets and lifetimes changed: the report's clocks
            return result
