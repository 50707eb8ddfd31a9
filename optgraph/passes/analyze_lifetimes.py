"""`analyze-lifetimes`: when each buffer is written, last read, and free as seen from each stream.

A *buffer* is the result of a compute node that is not an aliasing view (`optgraph.ir.layout`):
aliasing views own no bytes, and every access through a view counts as an access of its root.
For each buffer the pass annotates its producing node with

- `live = [first, last]`: the producer's index and the last access's index in issue order (events
  counted). A graph output, or a buffer an output aliases, lives to the end: `last = len(nodes)`,
  the host's return.
- `visible = [v0, v1, ...]`: per stream s, the index of the first node on s that every access to
  the buffer happens-before (vector clocks, `HappensBefore.first_node_after`): from there on, work
  issued on s may reuse the bytes. `-1` where no such node exists (and always for outputs).

ggml frees by node order alone; on several streams issue order says nothing about when another
stream is done reading. `visible` is the "becomes visible at" table it proposed but never built.

    before: %a = exp(%x) !{stream = 0}  record ^e0  wait ^e0 !{stream = 1}  %b = neg(%a) ...
            %c = tanh(%a) !{stream = 1}  ...  wait ^e1 !{stream = 0}  %d = add(%b, %c) ...
    after:  %a = exp(%x) : f32[64] !{stream = 0, live = [0, 4], visible = [8, -1]}
            (free on stream 0 only after `wait ^e1`; never on stream 1, which never learns
            that %b is done; tests/fixtures/analyze-lifetimes/concurrent_reader_visible_per_stream.ir)

Does not handle: buffers of inputs and weights (they are not in the arena); fused bodies (a fused
node is one access of each operand). Complexity: O(V·k) for the clocks plus O(A·k·log V) for the
visible points (A = accesses, k = streams); the clocks are the ones the `synced` contract check
built for this graph, and the lifetimes are remembered for plan-memory and the report.
"""

from __future__ import annotations

from dataclasses import dataclass

from optgraph.analysis.happens_before import happens_before, share_clocks
from optgraph.analysis.lifetimes import annotate_lifetimes, compute_lifetimes
from optgraph.ir.gc_pause import gc_paused
from optgraph.ir.graph import Graph
from optgraph.passes.base import Pass


@dataclass(frozen=True)
class AnalyzeLifetimesPass(Pass):
    name = "analyze-lifetimes"
    summary = "annotate each buffer's live range and, per stream, the node from which it is free"
    provides = ("lifetimes-analyzed",)

    def run(self, graph: Graph) -> Graph:
        with gc_paused():
            hb = happens_before(graph)
            result = annotate_lifetimes(graph, compute_lifetimes(graph, hb))
            share_clocks(result, hb)  # only lifetimes changed: plan-memory finds the clocks
            return result
