"""`insert-sync`: `record`/`wait` events for the cross-stream dependencies happens-before lacks.

    before: %a = exp(%x) !{stream = 1}    %b = neg(%x) !{stream = 0}    %y = add(%a, %b) !{stream = 0}
    after:  %a = exp(%x) !{stream = 1}    record ^e0 !{stream = 1}    %b = neg(%x) !{stream = 0}
            wait ^e0 !{stream = 0}    %y = add(%a, %b) !{stream = 0}

Nodes are walked in issue order with one vector clock per stream, exactly as `HappensBefore`
computes them (graph start orders inputs before everything; the host stream of split-backends is a
stream whose events are its synchronization). For a node on stream s, every producer on another stream that the
clock of s does not already cover is a candidate; per source stream only the latest candidate is
kept (a wait on it covers the earlier ones), and a candidate covered by another candidate's clock is
dropped. Each remaining candidate gets one `wait` right before the node, on a `record` placed right
after the producer (one record serves every wait on it). So a wait exists only for a cross-stream
edge of the transitive reduction of (data edges ∪ same-stream order): the fewest waits for the given
assignment and issue order, never more than Nimble's |reduced edges| - |matching|. Finally stream 0
waits for the last node of every other stream the end does not already cover, so all streams join
before the outputs are returned. Events already in the graph are kept and count.

New events shift the issue index of every node after them, so the contract refuses a graph that
carries live ranges (run insert-sync before analyze-lifetimes); arena offsets stay sound (events
only add ordering).

Does not handle: moving nodes to save waits (the order is assign-streams' decision), events across
graph replays (every replay starts from the host, which orders it after the previous end).

Complexity: O((V + E)·k) for k streams, plus O(c²·k) per node for its c candidate streams.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from optgraph.analysis.schedule_estimate import data_predecessors
from optgraph.ir.graph import Annotations, Graph, Node
from optgraph.passes.base import Pass


def _event_names(graph: Graph) -> Iterator[str]:
    taken = {n.name for n in graph.nodes if n.is_event}
    i = 0
    while True:
        name = f"e{i}"
        i += 1
        if name not in taken:
            yield name


def _event_ann(node: Node) -> Annotations:
    """An event runs on its node's stream (and backend, for split graphs)."""
    return Annotations(stream=node.stream, backend=node.ann.backend)


@dataclass(frozen=True)
class InsertSyncPass(Pass):
    name = "insert-sync"
    summary = "add record/wait events for cross-stream dependencies not already ordered"
    requires = ("streams-assigned",)
    provides = ("synced",)
    invalidates = ("lifetimes-analyzed",)  # new events shift every issue index after them

    def run(self, graph: Graph) -> Graph:
        nodes = graph.nodes
        streams = sorted({n.stream for n in nodes} | {0})
        col = {s: c for c, s in enumerate(streams)}
        k = len(streams)
        preds = data_predecessors(graph)
        names = _event_names(graph)
        cur = [[0] * k for _ in range(k)]  # each stream's clock
        clock: list[list[int]] = [[] for _ in nodes]
        seq = [0] * len(nodes)
        recorded: dict[str, list[int]] = {}
        record_after: set[int] = set()  # producers followed by a new record
        waits_before: dict[int, list[int]] = {}  # node -> producers whose records it waits on
        last_on: dict[int, int] = {}  # column -> last compute node

        def sync(consumer_col: int, needed: list[int]) -> list[int]:
            """Waits that make stream column `consumer_col` cover every node in `needed`."""
            mine = cur[consumer_col]
            latest: dict[int, int] = {}
            for p in needed:
                c = col[nodes[p].stream]
                if c == consumer_col or mine[c] >= seq[p]:
                    continue
                if c not in latest or seq[p] > seq[latest[c]]:
                    latest[c] = p
            chosen = [
                p
                for c, p in latest.items()
                if not any(clock[q][c] >= seq[p] for d, q in latest.items() if d != c)
            ]
            for p in chosen:
                record_after.add(p)
                mine[:] = [max(a, b) for a, b in zip(mine, clock[p])]
            return sorted(chosen)

        for i, node in enumerate(nodes):
            c = col[node.stream]
            if node.op == "record":
                recorded[node.name] = list(cur[c])
                continue
            if node.op == "wait":
                if node.name in recorded:
                    cur[c][:] = [max(a, b) for a, b in zip(cur[c], recorded[node.name])]
                continue
            if preds[i]:
                waits = sync(c, preds[i])
                if waits:
                    waits_before[i] = waits
            cur[c][c] += 1
            seq[i] = cur[c][c]
            clock[i] = list(cur[c])
            last_on[c] = i
        final_waits = sync(col[0], [i for c, i in last_on.items() if c != col[0]])

        out: list[Node] = []
        event_of: dict[int, str] = {}  # named in issue order of the records
        for i, node in enumerate(nodes):
            for p in waits_before.get(i, ()):
                out.append(Node(event_of[p], "wait", ann=_event_ann(node), span=node.span))
            out.append(node)
            if i in record_after:
                event_of[i] = next(names)
                out.append(Node(event_of[i], "record", ann=_event_ann(node), span=node.span))
        end = Annotations(stream=0)
        out.extend(Node(event_of[p], "wait", ann=end) for p in final_waits)
        return graph.with_nodes(out)
