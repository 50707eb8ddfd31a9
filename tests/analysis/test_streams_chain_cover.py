"""The chain algorithms behind assign-streams, against networkx on random DAGs: reachability
labels, transitive reduction (labels and the search fallback for very wide graphs), maximum
matching / minimum path cover (Nimble's count) and the width (maximum antichain)."""

from __future__ import annotations

import itertools
import random

import networkx as nx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optgraph.analysis import chain_cover
from optgraph.analysis.chain_cover import (
    Reachability,
    TooWide,
    _reduction_by_search,
    path_cover,
    transitive_reduction,
    widest_level,
    width,
)
from tests.support.property_examples import examples


@st.composite
def dags(draw, max_nodes: int = 40) -> list[list[int]]:  # type: ignore[no-untyped-def]
    n = draw(st.integers(1, max_nodes))
    density = draw(st.floats(0.0, 0.4))
    rng = random.Random(draw(st.integers(0, 2**32)))
    return [[u for u in range(v) if rng.random() < density] for v in range(n)]


def _nx(preds: list[list[int]]) -> nx.DiGraph:
    g = nx.DiGraph()
    g.add_nodes_from(range(len(preds)))
    g.add_edges_from((u, v) for v, ps in enumerate(preds) for u in ps)
    return g


def _matching_size(edges: list[tuple[int, int]], n: int) -> int:
    b = nx.Graph()
    left = [("l", i) for i in range(n)]
    b.add_nodes_from(left + [("r", i) for i in range(n)])
    b.add_edges_from((("l", u), ("r", v)) for u, v in edges)
    return len(nx.bipartite.hopcroft_karp_matching(b, top_nodes=left)) // 2


@settings(max_examples=examples(150))
@given(preds=dags())
def test_against_networkx(preds: list[list[int]]) -> None:
    g = _nx(preds)
    n = len(preds)
    reach = Reachability(preds)
    for u in range(n):
        below = nx.descendants(g, u) | {u}
        assert [reach.reaches(u, v) for v in range(n)] == [v in below for v in range(n)]
    expected = set(nx.transitive_reduction(g).edges())
    for reduced in (transitive_reduction(preds, reach), _reduction_by_search(preds)):
        assert {(u, v) for v, ps in enumerate(reduced) for u in ps} == expected
    cover = path_cover(preds, priority=[random.random() for _ in range(n)])
    assert cover.matching == _matching_size(sorted(expected), n)
    assert cover.nimble_syncs == len(expected) - cover.matching
    assert sorted(v for chain in cover.chains for v in chain) == list(range(n))
    for chain in cover.chains:
        assert all((a, b) in expected for a, b in itertools.pairwise(chain))
    closure = list(nx.transitive_closure_dag(g).edges())
    assert width(preds) == n - _matching_size(closure, n)


@settings(max_examples=examples(100))
@given(preds=dags())
def test_widest_level_is_an_antichain(preds: list[list[int]]) -> None:
    """The lower bound `width` stops at when the greedy chains meet it: some antichain of that
    size exists (and none larger than the width)."""
    g = _nx(preds)
    level = [0] * len(preds)
    for v, ps in enumerate(preds):
        level[v] = 1 + max((level[p] for p in ps), default=-1)
    widest = max(range(len(preds)), key=lambda d: level.count(d))
    nodes = [v for v in range(len(preds)) if level[v] == widest]
    assert widest_level(preds) == len(nodes)
    assert not any(nx.has_path(g, u, v) for u in nodes for v in nodes if u != v)
    closure = list(nx.transitive_closure_dag(g).edges())
    assert widest_level(preds) <= width(preds) == len(preds) - _matching_size(closure, len(preds))


def test_width_beyond_the_widest_level() -> None:
    """A widest antichain across levels: the levels prove no cover, the flow decides."""
    preds: list[list[int]] = [[], [], [1], [1]]  # 0 alone, 1 -> 2 and 1 -> 3: {0, 2, 3}
    assert (widest_level(preds), Reachability(preds).chains) == (2, 3)
    assert width(preds) == 3


@settings(max_examples=examples(60))
@given(preds=dags(max_nodes=30))
def test_width_without_labels(preds: list[list[int]]) -> None:
    n = len(preds)
    closure = list(nx.transitive_closure_dag(_nx(preds)).edges())
    saved = chain_cover.LABEL_BUDGET
    chain_cover.LABEL_BUDGET = 0  # every graph is "too wide": the fallback path runs
    try:
        assert width(preds) == n - _matching_size(closure, n)
    finally:
        chain_cover.LABEL_BUDGET = saved


def test_wide_fan_in_falls_back(monkeypatch: pytest.MonkeyPatch) -> None:
    n = 3000  # 2999 independent roots joined by one node: 2999 chains of labels
    preds: list[list[int]] = [[] for _ in range(n - 1)] + [list(range(n - 1))]
    monkeypatch.setattr(chain_cover, "LABEL_BUDGET", 1_000_000)
    with pytest.raises(TooWide):
        Reachability(preds)
    assert transitive_reduction(preds)[-1] == list(range(n - 1))
    assert width(preds) == n - 1
    assert path_cover(preds).nimble_syncs == n - 2


@settings(max_examples=examples(60))
@given(preds=dags(max_nodes=30), seed=st.integers(0, 2**16))
def test_a_preferred_start_still_gives_a_minimum_cover(preds: list[list[int]], seed: int) -> None:
    """`prefer` (fanout's continuations) only seeds the matching: it is still maximum, and a
    preferred link along a reduced edge that nothing else needs stays."""
    rng = random.Random(seed)
    n = len(preds)
    prefer = [rng.randrange(-1, n) for _ in range(n)]
    expected = set(nx.transitive_reduction(_nx(preds)).edges())
    cover = path_cover(preds, prefer=prefer)
    assert cover.matching == _matching_size(sorted(expected), n)
    for chain in cover.chains:
        assert all((a, b) in expected for a, b in itertools.pairwise(chain))
