"""How many waits a stream assignment needs: insert-sync's count, without building the graph.

For an event-free DAG on one device, given as predecessor lists in issue order, and a stream per
node, `waits_needed` walks the nodes with one vector clock per stream exactly as insert-sync
does: a node on stream s waits, per other stream, for its latest producer there that s's clock
does not cover, unless another of its candidates' clocks covers it; at the end stream 0 waits for
the last node of every other stream it does not cover. Each wait raises the waiting stream's
clock to the producer's. So the count is the fewest waits for that assignment and per-stream
order (insert-sync's own), and `assign-streams` can compare an assignment with Nimble's count
before choosing it.

    preds = [[], [0], [0], [1, 2]]    streams = [0, 0, 1, 0]    ->  2 (node 2 waits for 0, node 3
                                                                     for 2; the end covers all)

Complexity: O((V + E)·k) for k streams, plus O(c²·k) per node for its c candidate streams.
"""

from __future__ import annotations

from collections.abc import Sequence


def waits_needed(preds: Sequence[Sequence[int]], streams: Sequence[int]) -> int:
    """The waits insert-sync would add for `streams` (node v on `streams[v]`, issue order)."""
    names = sorted(set(streams) | {0})
    col = {s: c for c, s in enumerate(names)}
    k = len(names)
    current = [[0] * k for _ in range(k)]  # each stream's clock
    clock: list[list[int]] = []  # each node's clock once issued
    seq: list[int] = []
    last_on: dict[int, int] = {}
    waits = 0

    def sync(c: int, needed: Sequence[int]) -> int:
        mine = current[c]
        latest: dict[int, int] = {}
        for p in needed:
            pc = col[streams[p]]
            if pc == c or mine[pc] >= seq[p]:
                continue
            if pc not in latest or seq[p] > seq[latest[pc]]:
                latest[pc] = p
        chosen = [
            p
            for pc, p in latest.items()
            if not any(clock[q][pc] >= seq[p] for d, q in latest.items() if d != pc)
        ]
        for p in chosen:
            mine[:] = [max(a, b) for a, b in zip(mine, clock[p])]
        return len(chosen)

    for v, ps in enumerate(preds):
        c = col[streams[v]]
        waits += sync(c, ps)
        row = list(current[c])
        row[c] += 1
        current[c][c] = row[c]
        clock.append(row)
        seq.append(row[c])
        last_on[c] = v
    others = [v for c, v in last_on.items() if c != col[0]]
    return waits + sync(col[0], others)
