"""Happens-before over a scheduled graph, with one vector clock per node.

A happens-before B when they are on the same stream and A is issued first; or A precedes a
`record ^e` on its stream and B follows a `wait ^e` on its own (transitively). Graph start orders
every input and weight before every node; the host returning outputs is the end. Nodes without a
stream are on stream 0, so an unscheduled graph is totally ordered.

Walking nodes in issue order, each stream keeps a clock vector (one entry per stream: how many nodes
of that stream are known to have finished). A node on stream s takes its stream's clock with entry s
advanced; `record` snapshots the clock into the event; `wait` joins the event's clock into the
waiting stream. Then A (stream s, sequence number q) happens-before B iff clock(B)[s] >= q.

Complexity: O(V·k) time and memory to build (k = number of streams), O(1) per ordered() query,
O(k·log V) for `first_node_after`.

    before: %a = exp(%x) !{stream = 1}   record ^e !{stream = 1}   wait ^e !{stream = 0}   %b = neg(%a)
    after:  ordered(%a, %b) is True; without the wait it is False.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

from optgraph.ir.graph import Graph


class HappensBefore:
    """Vector clocks of a graph's nodes. Indices are positions in `graph.nodes`."""

    def __init__(self, graph: Graph):
        import numpy as np

        self.graph = graph
        nodes = graph.nodes
        self.streams: list[int] = sorted({n.stream for n in nodes} | {0})
        self.column: dict[int, int] = {s: c for c, s in enumerate(self.streams)}
        k = len(self.streams)
        self.clocks = np.zeros((len(nodes), k), dtype=np.int64)
        self.seq = np.zeros(len(nodes), dtype=np.int64)
        self.stream_col = np.zeros(len(nodes), dtype=np.int64)
        # Per stream: node indices in issue order and their clock rows, for first_node_after().
        self.on_stream: list[list[int]] = [[] for _ in range(k)]
        current = np.zeros((k, k), dtype=np.int64)
        events: dict[str, np.ndarray] = {}
        self.missing_events: list[int] = []
        for i, node in enumerate(nodes):
            c = self.column[node.stream]
            self.stream_col[i] = c
            if node.op == "record":
                events[node.name] = current[c].copy()
            elif node.op == "wait":
                clock = events.get(node.name)
                if clock is None:
                    self.missing_events.append(i)
                else:
                    np.maximum(current[c], clock, out=current[c])
            else:
                current[c, c] += 1
                self.on_stream[c].append(i)
            self.seq[i] = current[c, c]
            self.clocks[i] = current[c]
        self.final = current  # each stream's clock when the host reaches the end
        self._stream_clock_cols: list[np.ndarray] = [
            self.clocks[idx] if idx else np.zeros((0, k), dtype=np.int64) for idx in self.on_stream
        ]
        # Python lists of the same figures for `ordered` and `first_node_after`, called once per
        # data edge or buffer: a NumPy scalar read costs more than the whole query on lists.
        self._stream_col_list: list[int] = self.stream_col.tolist()
        self._seq_list: list[int] = self.seq.tolist()
        self._clock_columns: dict[tuple[int, int], list[int]] = {}
        self._clock_rows: list[list[int]] = self.clocks.tolist()

    def ordered(self, a: int, b: int) -> bool:
        """Whether node a happens-before node b (both compute nodes; False when a == b)."""
        if a == b:
            return False
        stream_col = self._stream_col_list
        ca = stream_col[a]
        return self._clock_rows[b][ca] >= self._seq_list[a] and (ca != stream_col[b] or a < b)

    def concurrent(self, a: int, b: int) -> bool:
        """Neither orders the other."""
        return a != b and not self.ordered(a, b) and not self.ordered(b, a)

    def unordered_data_edges(self) -> list[tuple[int, int]]:
        """(producer, consumer) pairs of data edges that happens-before does not cover."""
        producers = self.graph.producers()
        bad = []
        for i, node in self.graph.compute_nodes():
            for operand in node.operands:
                p = producers.get(operand)
                if p is not None and not self.ordered(p, i):
                    bad.append((p, i))
        return bad

    def first_node_after(self, accesses: Iterable[int], stream: int) -> int:
        """Index of the first compute node on `stream` that every access happens-before; -1 if none.

        Clocks along one stream only grow, so for each access this is a binary search.
        """
        c = self.column.get(stream)
        if c is None:
            return -1
        indices = self.on_stream[c]
        stream_col, seq = self._stream_col_list, self._seq_list
        position = 0
        for a in accesses:
            sa = stream_col[a]
            if sa == c:
                pos = bisect_left(indices, a + 1)  # strictly later on the same stream
            else:
                pos = bisect_left(self._clock_column(c, sa), seq[a])
            position = max(position, pos)
            if position >= len(indices):
                return -1
        return indices[position] if position < len(indices) else -1

    def _clock_column(self, c: int, sa: int) -> list[int]:
        """Entry `sa` of the clocks of the nodes on stream column `c`, in issue order (it only
        grows along a stream, so it can be bisected)."""
        key = (c, sa)
        column = self._clock_columns.get(key)
        if column is None:
            column = self._clock_columns[key] = self._stream_clock_cols[c][:, sa].tolist()
        return column

    def joined_at_end(self, stream: int = 0) -> bool:
        """Whether every node on every stream happens-before the end of `stream` (default 0)."""
        c = self.column[stream]
        return bool((self.final[c] >= self.final.diagonal()).all())

    def width(self) -> int:
        """Number of streams in use."""
        return sum(1 for idx in self.on_stream if idx)
