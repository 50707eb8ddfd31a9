"""check-races: the examples compile race-free, and `find_races` agrees with a brute force over
every pair of accesses on random schedules with forgotten waits and overlapping arena plans."""

from __future__ import annotations

import random
from itertools import combinations
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import optgraph as og
from optgraph.analysis.happens_before import HappensBefore
from optgraph.analysis.races import END, find_races
from optgraph.errors import VerifyError
from optgraph.ir.graph import Graph
from optgraph.ir.layout import alias_roots
from optgraph.passes.check_races import CheckRacesPass
from optgraph.passes.manager import run_pipeline
from tests.support.property_examples import examples
from tests.support.random_graphs import random_dag_graphs
from tests.support.scheduled_graphs import random_streams
from tests.support.touched_bytes import read_bytes

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

Key = tuple[int, str, int, str]
Touch = tuple[int, str, bool, str, bool, frozenset[int] | None]


def _brute_force(graph: Graph) -> set[Key]:
    """Every unordered conflicting pair, by enumerating all pairs of accesses."""
    hb = HappensBefore(graph)
    roots = alias_roots(graph)
    producers = graph.producers()
    found: set[Key] = set()
    for i, node in graph.compute_nodes():  # values, views included: every data edge
        for o in dict.fromkeys(node.operands):
            if o in producers and hb.concurrent(producers[o], i):
                found.add((i, o, producers[o], o))
    # node, value, writes, root, in place, bytes of the root it touches (None: all of them)
    accesses: list[Touch] = []
    offsets = {n.name: n.ann.offset for _, n in graph.compute_nodes()}
    types = graph.value_types()
    for i, node in graph.compute_nodes():
        if node.name not in roots:  # an aliasing view touches no bytes
            accesses.append((i, node.name, True, node.name, False, None))
            for o in dict.fromkeys(node.operands):  # a view's or a slice's part: its bytes
                root = roots.get(o, (o, 0))[0]
                accesses.append((i, o, False, root, False, read_bytes(node, o, types, roots)))
        if node.op == "kv_cache_write":  # into its cache unless planned as a copy
            root, extra = roots.get(node.operands[0], (node.operands[0], 0))
            root_offset = offsets.get(root)
            if node.ann.offset is None or (
                root_offset is not None and root_offset + extra == node.ann.offset
            ):  # through a view of part of the cache: only its bytes
                written = read_bytes(node, node.operands[0], types, roots)
                accesses.append((i, root, True, root, True, written))
    span = {
        n.name: (n.ann.offset, n.ann.offset + n.ann.size)
        for _, n in graph.compute_nodes()
        if n.name not in roots and n.ann.offset is not None and n.ann.size
    }
    for a, b in combinations(accesses, 2):
        if a[0] == b[0] or not (a[2] or b[2]) or not hb.concurrent(a[0], b[0]):
            continue
        later, earlier = (a, b) if a[0] > b[0] else (b, a)
        # kv_cache_write into its cache's root, where the two reach a common byte
        in_place = (a[4] or b[4]) and a[3] == b[3] and _meet(a[5], b[5])
        ra, rb = _touched(span, a), _touched(span, b)
        overlap = a[3] != b[3] and ra and rb and not ra.isdisjoint(rb)
        if in_place or overlap:
            found.add((later[0], later[1], earlier[0], earlier[1]))
    return found


def _meet(a: frozenset[int] | None, b: frozenset[int] | None) -> bool:
    """Whether two byte sets of one root share a byte (None: all of the root's)."""
    if a is None:
        return b is None or bool(b)
    if b is None:
        return bool(a)
    return not a.isdisjoint(b)


def _touched(span: dict[str, tuple[int, int]], access: Touch) -> set[int] | None:
    """The arena bytes an access touches: its root's, or the part a view or a slice of it reads
    (within the root's planned bytes: the random plans here may be smaller than the values)."""
    whole = span.get(access[3])
    if whole is None:
        return None
    if access[5] is None:
        return set(range(*whole))
    return {whole[0] + b for b in access[5] if whole[0] + b < whole[1]}


def _keys(graph: Graph) -> set[Key]:
    return {
        (r.first.node, r.first.value, r.second.node, r.second.value)
        for r in find_races(graph)
        if r.second.node != END and not r.clobber
    }


@settings(max_examples=examples(80))
@given(
    graph=random_dag_graphs(max_nodes=14),
    streams=st.integers(2, 4),
    seed=st.integers(0, 10_000),
    arena=st.sampled_from([None, 256, 1024]),
)
def test_find_races_equals_brute_force(graph: Graph, streams: int, seed: int, arena: int | None):
    rng = random.Random(seed)
    scheduled = random_streams(graph, streams, seed)
    nodes = [n for n in scheduled.nodes if not (n.op == "wait" and rng.random() < 0.4)]
    if arena is not None:
        nodes = [
            n
            if n.is_event
            else n.with_ann(offset=rng.randrange(0, arena, 16), size=rng.choice([16, 64, 128]))
            for n in nodes
        ]
    mutated = scheduled.with_nodes(nodes)
    assert _keys(mutated) == _brute_force(mutated)


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.ir")), ids=lambda p: p.stem)
def test_examples_compile_race_free(path: Path) -> None:
    for pipeline in (
        "default",
        "assign-streams{min-branch-us=0},insert-sync,analyze-lifetimes,plan-memory",
    ):
        compiled = run_pipeline(og.parse_file(path), pipeline)
        assert find_races(compiled) == []
        assert CheckRacesPass().run(compiled) is compiled


def test_every_race_is_an_error_with_a_note() -> None:
    graph = og.parse(
        """graph g {
  input %x : f32[4]
  %a = exp(%x) : f32[4] !{stream = 1}
  %b = neg(%a) : f32[4] !{stream = 2}
  %c = add(%a, %b) : f32[4] !{stream = 0}
  output %c
}""",
        "g.ir",
    )
    with pytest.raises(VerifyError) as info:
        CheckRacesPass().run(graph)
    diags = info.value.diagnostics
    errors = [d for d in diags if d.severity == "error"]
    # %b reads %a, %c reads %a, %c reads %b, and streams 1 and 2 never join stream 0.
    assert len(errors) == 5 and len(diags) - len(errors) == 3
    assert "g.ir:4:12: error: race: %b (stream 2) reads %a while %a (stream 1)" in str(info.value)
