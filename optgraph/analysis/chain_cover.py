"""Chains of a DAG: reachability labels, transitive reduction, maximum matching, minimum path cover.

The graph algorithms behind `assign-streams` (and the benchmark's Nimble count), on a DAG given as
predecessor lists over nodes 0..V-1 numbered in a topological order (issue order):

- `Reachability`: a greedy chain decomposition of the reachability order (a node joins a chain whose
  tail is one of its ancestors) and, per node, the latest ancestor on every chain. Then u reaches v iff
  `anc[v][chain(u)] >= pos(u)`. O((V + E)·C) time and O(V·C) memory for C chains; C stays near the
  graph's width on structured models (a Llama stack of any depth: 3). Past a memory budget (very
  wide graphs) the reduction falls back to bounded backward searches, O(V·E) worst case.
- `transitive_reduction`: edge p -> v is redundant iff p reaches another predecessor of v. O(E·d)
  for in-degree d, or O(d·C) per node with a top-two-per-chain trick for wide joins.
- `maximum_matching`: Hopcroft-Karp on the bipartite (tails, heads) graph of the reduced edges, from a
  greedy start. O(E·√V).
- `path_cover`: matched edges link nodes into paths; V - |matching| paths is the minimum path cover
  of the reduced DAG (Nimble's chains: any two independent nodes lie on different paths), and
  |reduced edges| - |matching| is Nimble's synchronization count.

No V×V structure is built anywhere.

    preds = [[], [0], [0], [1, 2, 0]]     # a diamond plus the redundant edge 0 -> 3
    transitive_reduction(preds) == [[], [0], [0], [1, 2]]
    path_cover(...) == ([0, 1, 3], [2]) : 2 chains, Nimble count 4 - 2 = 2
"""

from __future__ import annotations

from collections import Counter, deque
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property
from itertools import zip_longest
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


class TooWide(Exception):
    """The reachability labels would exceed their memory budget (a very wide graph)."""


# Cells (4 bytes each) the labels may take: 128 MB, e.g. 320 chains at 100k nodes.
LABEL_BUDGET = 32_000_000


class Reachability:
    """Reachability labels of a DAG in topological order (see the module docstring).

    Raises `TooWide` when V·C would pass `budget` cells; callers then fall back to searches.
    """

    def __init__(self, preds: Sequence[Sequence[int]], budget: int | None = None):
        budget = LABEL_BUDGET if budget is None else budget
        n = len(preds)
        # Built in lists (C is a few chains: NumPy's per-call cost would dominate each row),
        # and as arrays when first asked for. A row is as long as the chains were when it was made; the
        # chains made since are 0 in it (no ancestor there).
        capacity = 8
        rows: list[list[int]] = []
        chain: list[int] = []
        pos: list[int] = []  # 1-based position on its chain
        tail_node: list[int] = []  # last node of each chain
        tail_pos: list[int] = []
        for v in range(n):
            ps = preds[v]
            c = -1
            if len(ps) == 1:
                p = ps[0]
                row = rows[p].copy()
                if tail_node[chain[p]] == p:  # the usual case: extend its only input's chain
                    c = chain[p]
                    tail_node[c] = v
                    tail_pos[c] += 1
                    chain.append(c)
                    pos.append(tail_pos[c])
                    row[c] = tail_pos[c]
                    rows.append(row)
                    continue
            elif ps:
                row = [max(column) for column in zip_longest(*(rows[p] for p in ps), fillvalue=0)]
                for p in ps:  # prefer extending a direct predecessor's chain
                    if tail_node[chain[p]] == p:
                        c = chain[p]
                        break
            else:
                row = []
            if c < 0 and ps:
                for k, ancestor in enumerate(row):
                    if ancestor > 0 and tail_pos[k] == ancestor:
                        c = k
                        break
            if c < 0:
                c = len(tail_node)
                tail_node.append(-1)
                tail_pos.append(0)
                if c >= capacity:
                    capacity *= 2
                    if n * capacity > budget:
                        raise TooWide(f"{n} nodes need more than {capacity // 2} chains")
            if len(row) <= c:
                row.extend([0] * (c + 1 - len(row)))
            tail_node[c] = v
            tail_pos[c] += 1
            chain.append(c)
            pos.append(tail_pos[c])
            row[c] = tail_pos[c]
            rows.append(row)
        chains = len(tail_node)
        for row in rows:
            if len(row) < chains:
                row.extend([0] * (chains - len(row)))
        self.rows = rows  # rows[v][c]: the position of v's latest ancestor on chain c (0: none)
        self.chain_of = chain
        self.pos_of = pos
        self.chains = chains

    # The labels as NumPy arrays, made on first use (only wide joins read them).
    @cached_property
    def anc(self) -> np.ndarray:
        import numpy as np

        return np.array(self.rows, dtype=np.int32).reshape(len(self.rows), self.chains)

    @cached_property
    def chain(self) -> np.ndarray:
        import numpy as np

        return np.array(self.chain_of, dtype=np.int64)

    @cached_property
    def pos(self) -> np.ndarray:
        import numpy as np

        return np.array(self.pos_of, dtype=np.int64)

    def reaches(self, u: int, v: int) -> bool:
        """Whether there is a path u -> ... -> v (True for u == v)."""
        return self.rows[v][self.chain_of[u]] >= self.pos_of[u]


def transitive_reduction(
    preds: Sequence[Sequence[int]], reach: Reachability | None = None
) -> list[list[int]]:
    """Predecessor lists of the transitive reduction (duplicates removed, order kept)."""
    import numpy as np

    if reach is None:
        try:
            reach = Reachability(preds)
        except TooWide:
            return _reduction_by_search(preds)
    rows, chain, pos = reach.rows, reach.chain_of, reach.pos_of
    reduced: list[list[int]] = []
    for ps in preds:
        unique = list(dict.fromkeys(ps))
        if len(unique) < 2:
            reduced.append(unique)
        elif len(unique) <= 6:
            keep = []
            for p in unique:
                cp, sp = chain[p], pos[p]
                if not any(q != p and rows[q][cp] >= sp for q in unique):
                    keep.append(p)
            reduced.append(keep)
        else:
            block = reach.anc[
                unique
            ]  # d × C: the two largest per column tell "another pred reaches p"
            top = np.argmax(block, axis=0)
            first = block[top, np.arange(block.shape[1])]
            masked = block.copy()
            masked[top, np.arange(block.shape[1])] = -1
            second = masked.max(axis=0)
            keep = []
            for i, p in enumerate(unique):
                cp = chain[p]
                other = second[cp] if top[cp] == i else first[cp]
                if other < pos[p]:
                    keep.append(p)
            reduced.append(keep)
    return reduced


def _reduction_by_search(preds: Sequence[Sequence[int]]) -> list[list[int]]:
    """The transitive reduction for graphs too wide for labels: for each node, one backward
    search from its predecessors' predecessors, bounded below by its earliest predecessor, marks
    the redundant ones. O(V·E) worst case, O(V + E) for a wide fan-in of independent nodes."""
    reduced: list[list[int]] = []
    for ps in preds:
        unique = list(dict.fromkeys(ps))
        if len(unique) < 2:
            reduced.append(unique)
            continue
        low = min(unique)
        seen: set[int] = set()
        stack = [q for p in unique for q in preds[p] if q >= low]
        while stack:
            u = stack.pop()
            if u not in seen:
                seen.add(u)
                stack.extend(q for q in preds[u] if q >= low and q not in seen)
        reduced.append([p for p in unique if p not in seen])
    return reduced


def maximum_matching(
    succs: Sequence[Sequence[int]], n: int, initial: Sequence[int] | None = None
) -> list[int]:
    """Hopcroft-Karp on edges u -> v (u, v in 0..n-1). Returns match[u] = v or -1. O(E·√V).

    `initial` (match[u] = v or -1, a valid matching) is extended; otherwise a greedy start.
    Augmenting paths keep every matched head matched, so an initial choice mostly survives.
    """
    match_left = list(initial) if initial is not None else [-1] * n
    match_right = [-1] * n
    for u, v in enumerate(match_left):
        if v >= 0:
            match_right[v] = u
    for u in range(n):  # greedy start: usually close to maximum on DAGs in topological order
        if match_left[u] >= 0:
            continue
        for v in succs[u]:
            if match_right[v] < 0:
                match_left[u], match_right[v] = v, u
                break
    inf = n + 1
    while True:
        dist = [inf] * n
        queue = deque(u for u in range(n) if match_left[u] < 0 and succs[u])
        for u in queue:
            dist[u] = 0
        found = False
        while queue:
            u = queue.popleft()
            for v in succs[u]:
                w = match_right[v]
                if w < 0:
                    found = True
                elif dist[w] == inf:
                    dist[w] = dist[u] + 1
                    queue.append(w)
        if not found:
            return match_left
        for root in range(n):
            if match_left[root] >= 0 or not succs[root] or dist[root] != 0:
                continue
            # iterative DFS along the BFS layers
            stack = [(root, 0)]
            while stack:
                u, i = stack[-1]
                if i >= len(succs[u]):
                    dist[u] = inf  # dead end for this phase
                    stack.pop()
                    continue
                stack[-1] = (u, i + 1)
                v = succs[u][i]
                w = match_right[v]
                if w < 0:
                    for x, j in stack:  # augment along the stack
                        y = succs[x][j - 1]
                        match_left[x], match_right[y] = y, x
                    break
                if dist[w] == dist[u] + 1:
                    stack.append((w, 0))


@dataclass(frozen=True)
class PathCover:
    """Chains (lists of nodes along reduced edges) and the counts that go with them."""

    chains: list[list[int]]
    chain_of: list[int]
    reduced_edges: int
    matching: int
    reduced: list[list[int]]  # predecessor lists of the transitive reduction
    reach: Reachability | None = None  # the labels, unless the graph was too wide for them

    @property
    def nimble_syncs(self) -> int:
        """Nimble's synchronization count: reduced edges that are not inside a chain."""
        return self.reduced_edges - self.matching


def path_cover(
    preds: Sequence[Sequence[int]],
    priority: Sequence[float] | None = None,
    prefer: Sequence[int] | None = None,
) -> PathCover:
    """Minimum path cover of the transitive reduction of a DAG in topological order.

    With `priority` (e.g. each node's bottom level: its longest estimated path to the end), the
    matching starts by linking, from the last node back, every node to its free successor of
    highest priority (ties: the one whose chain reaches the last node), so chains follow critical
    paths, the trunk ends where the last node is, and light branches are left as separate chains.
    With `prefer` (prefer[u]: the successor u should continue into, or -1), the matching starts
    from those links that are reduced edges (first come, first served); either way it is then
    made maximum, so the cover is minimum whatever the preference.
    """
    n = len(preds)
    try:
        reach: Reachability | None = Reachability(preds)
    except TooWide:
        reach = None
    reduced = _reduction_by_search(preds) if reach is None else transitive_reduction(preds, reach)
    succs: list[list[int]] = [[] for _ in range(n)]
    edges = 0
    for v, ps in enumerate(reduced):
        edges += len(ps)
        for p in ps:
            succs[p].append(v)
    initial = None
    if prefer is not None and n:
        initial = [-1] * n
        taken = [False] * n
        for u, v in enumerate(prefer):
            if v >= 0 and not taken[v] and v in succs[u]:
                initial[u], taken[v] = v, True
    elif priority is not None and n:
        initial = [-1] * n
        taken = [False] * n
        to_last = [False] * n
        to_last[n - 1] = True
        for u in range(n - 1, -1, -1):
            # the free successor that maximizes (priority, to_last, -v)
            best = -1
            for v in succs[u]:
                if taken[v]:
                    continue
                if best < 0:
                    best = v
                    continue
                pv, pb = priority[v], priority[best]
                if pv > pb or (pv == pb and (to_last[v], -v) > (to_last[best], -best)):
                    best = v
            if best >= 0:
                initial[u], taken[best], to_last[u] = best, True, to_last[best]
    nxt = maximum_matching(succs, n, initial)
    has_pred = [False] * n
    for v in nxt:
        if v >= 0:
            has_pred[v] = True
    chains: list[list[int]] = []
    chain_of = [-1] * n
    for start in range(n):
        if has_pred[start]:
            continue
        chain = []
        v = start
        while v >= 0:
            chain_of[v] = len(chains)
            chain.append(v)
            v = nxt[v]
        chains.append(chain)
    matched = n - len(chains)
    return PathCover(chains, chain_of, edges, matched, reduced, reach)


def width(preds: Sequence[Sequence[int]], reach: Reachability | None = None) -> int:
    """The maximum antichain (most pairwise independent nodes) of a DAG in topological order.

    Dilworth: equals the fewest chains of the reachability order covering every node, i.e. the
    minimum flow through the DAG (paths may share nodes) with at least one unit through each node.
    Start from the greedy chains of `Reachability`, each routed along a real path (for graphs too
    wide for labels, from the minimum path cover), then cancel one unit per augmenting path from
    T to S in the residual network. O((V + E)·(C - width + 1)) for C starting chains, plus the
    routing; no closure is built. Where some level of the DAG (`widest_level`) holds C nodes, that
    antichain already proves the C greedy chains fewest: O(V + E), no flow.
    """
    n = len(preds)
    if n == 0:
        return 0
    if reach is None:
        try:
            reach = Reachability(preds)
        except TooWide:  # start from the minimum path cover: its chains are real paths
            cover = path_cover(preds)
            return _min_flow(cover.reduced, cover.chain_of, None)
    if widest_level(preds) == reach.chains:  # an antichain meeting every chain: no flow to cancel
        return reach.chains
    return _min_flow(transitive_reduction(preds, reach), list(reach.chain_of), reach)


def widest_level(preds: Sequence[Sequence[int]]) -> int:
    """The most nodes of one level (the longest path from a source to the node, in edges) of a
    DAG in topological order: an antichain, since a path from u to v puts v on a deeper level
    than u. So a lower bound of the width, met by the greedy chains on layered models. O(V + E).
    """
    level = [0] * len(preds)
    for v, ps in enumerate(preds):
        if ps:
            level[v] = 1 + max([level[p] for p in ps])
    return max(Counter(level).values(), default=0)


def _min_flow(
    preds: Sequence[Sequence[int]], chain_of: Sequence[int], reach: Reachability | None
) -> int:
    """Minimum flow covering every node, from one unit along each chain (see `width`)."""
    n = len(preds)
    succs: list[list[int]] = [[] for _ in range(n)]
    for v, ps in enumerate(preds):
        for p in ps:
            succs[p].append(v)
    through = [0] * n  # flow on v_in -> v_out (lower bound 1)
    source = [0] * n  # S -> v_in
    sink = [0] * n  # v_out -> T
    edge: dict[tuple[int, int], int] = {}
    last: dict[int, int] = {}
    for v in range(n):  # route each chain through the DAG
        c = chain_of[v]
        through[v] += 1
        if c not in last:
            source[v] += 1
        else:
            a, b = last[c], v
            while b != a:  # walk back from v along predecessors that a still reaches
                q = a if reach is None else next(q for q in preds[b] if reach.reaches(a, q))
                edge[(q, b)] = edge.get((q, b), 0) + 1
                if q != a:
                    through[q] += 1
                b = q
        last[c] = v
    for v in last.values():
        sink[v] += 1
    flow = len(last)
    while True:  # BFS from T to S in the residual network; nodes are ("in"|"out", v)
        parent: dict[tuple[str, int], tuple[str, int] | None] = {}
        queue: deque[tuple[str, int]] = deque()
        for v in range(n):
            if sink[v] > 0:
                parent[("out", v)] = None
                queue.append(("out", v))
        end: tuple[str, int] | None = None
        while queue and end is None:
            side, v = queue.popleft()
            if side == "out":
                steps = [("in", w) for w in succs[v]]
                if through[v] > 1:
                    steps.append(("in", v))
            else:
                if source[v] > 0:
                    end = (side, v)
                    break
                steps = [("out", v)] + [("out", u) for u in preds[v] if edge.get((u, v), 0) > 0]
            for step in steps:
                if step not in parent:
                    parent[step] = (side, v)
                    queue.append(step)
        if end is None:
            return flow
        source[end[1]] -= 1
        node: tuple[str, int] = end
        while parent[node] is not None:
            prev = parent[node]
            assert prev is not None
            (prev_side, pv), (node_side, nv) = prev, node
            if prev_side == "out" and node_side == "in":
                if pv == nv:  # reverse of v_in -> v_out
                    through[pv] -= 1
                else:  # forward along edge pv -> nv
                    edge[(pv, nv)] = edge.get((pv, nv), 0) + 1
            elif prev_side == "in" and node_side == "out":
                if pv == nv:  # forward through the node
                    through[pv] += 1
                else:  # reverse of edge nv -> pv
                    edge[(nv, pv)] -= 1
            node = prev
        sink[node[1]] -= 1
        flow -= 1
