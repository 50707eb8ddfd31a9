"""`check-races`: report every pair of conflicting accesses that happens-before does not order.

    before: %a = exp(%x) !{stream = 1}     %b = neg(%a) !{stream = 0}      (no record/wait)
    after:  error: race: %b (stream 1) reads %a while %a (stream 0) writes it; no event orders them
            note: %a (stream 1) writes %a here

Two accesses conflict when they touch the same bytes and at least one writes; they race when
neither happens-before the other (`HappensBefore`: stream order, events, the graph start).
Accesses are:

- values: each node writes its result and reads its operands, so every data edge must be ordered
  (a view is a value too, even when it aliases);
- in place: `kv_cache_write` writes into its cache operand's buffer (through aliasing views to
  the root, only the view's bytes: a cache that is the first half of a buffer leaves the second
  alone) when the plan puts its result at the cache's bytes, or when memory is not planned yet
  (the conservative reading); planned as a copy (its own bytes) it only reads the cache;
- arena bytes, once memory is planned: a buffer is a node result with `offset`/`size`; an aliasing
  view's readers read its root's bytes, only those of the view (a slice of the second half reads
  nothing of the first), and a materialized `slice` reads only its rows of its operand (columns
  4..8 of an f32[4,8]: bytes 16 + 32·k + [0, 16), a strided `ByteSet`); two different buffers
  whose byte ranges overlap conflict where accesses of both reach the shared bytes;
- the end: the host returns the outputs and starts the next replay after stream 0's end, so every
  stream's last node must happen-before it; the host then reads every output, so no later write
  may land on an output's bytes (a plan that reuses them after the output's last in-graph read;
  an output that is a view holds only its own bytes).

Several devices: also collectives that wait for each other (`optgraph.analysis.deadlocks`): a
send blocks until its recv is posted and a group collective until every participant reached it,
so a cycle of lane order, events and rendezvous is a deadlock, reported naming the collectives;
and two collectives of one NCCL communicator that nothing orders on a device they share
(`optgraph.analysis.communicator_order`: NCCL runs a communicator's calls one at a time).

Overlapping buffers are checked in order of their first write against an interval map of the arena
holding, per byte range, the buffers not yet "entirely before" a later one. A buffer entirely before
the next one (every access of one happens-before every access of the other) is retired under it;
by transitivity only the frontier is compared, and a retired buffer is revisited only when its
successor races. Does not handle: host-side buffers, intra-kernel races, ordering across replays.

Complexity: O((V + E)·k) for happens-before, O(E) for values, O(B log B + touched ranges·k) for B
planned buffers when race-free, plus O(accesses²) for each racing pair of buffers.
"""

from __future__ import annotations

from dataclasses import dataclass

from optgraph.analysis.communicator_order import find_unordered_collectives
from optgraph.analysis.deadlocks import find_deadlocks
from optgraph.analysis.races import find_races, race_diagnostics
from optgraph.errors import VerifyError
from optgraph.ir.graph import Graph
from optgraph.passes.base import Pass


@dataclass(frozen=True)
class CheckRacesPass(Pass):
    name = "check-races"
    summary = "report conflicting accesses on different streams that no event orders (verifier)"

    def run(self, graph: Graph) -> Graph:
        races = find_races(graph)
        diagnostics = race_diagnostics(graph, races) if races else []
        diagnostics += find_deadlocks(graph)
        diagnostics += find_unordered_collectives(graph)
        if diagnostics:
            raise VerifyError.from_diagnostics(diagnostics)
        return graph
