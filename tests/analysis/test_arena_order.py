"""The race search's fast path (`arena_order.is_arena_ordered`) skips only searches that find
nothing: on planned graphs and on plans with buffers moved onto each other's bytes, the races
found with it equal those of the full search alone."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

import optgraph as og
from optgraph.analysis import races
from optgraph.analysis.arena_order import is_arena_ordered
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PIPELINES = (
    "default",
    "assign-streams{max-streams=3, policy=fanout},insert-sync,analyze-lifetimes,plan-memory",
)


def _planned(example: str, pipeline: str) -> Graph:
    return run_pipeline(og.parse_file(EXAMPLES / example), pipeline)


def _moved(graph: Graph, rng: random.Random) -> Graph:
    """Some planned buffers moved to the offset of another (the plan's sizes kept)."""
    planned = [i for i, n in enumerate(graph.nodes) if n.ann.offset is not None]
    offsets = sorted({o for n in graph.nodes if (o := n.ann.offset) is not None})
    nodes = list(graph.nodes)
    for i in rng.sample(planned, k=min(len(planned), rng.randint(1, 3))):
        nodes[i] = nodes[i].with_ann(offset=rng.choice(offsets))
    return graph.with_nodes(nodes)


def _full_search(graph: Graph, monkeypatch: pytest.MonkeyPatch) -> list[races.Race]:
    with monkeypatch.context() as m:
        m.setattr(races, "is_arena_ordered", lambda *args: False)
        return races.find_races(graph)


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("example", ["inception_block.ir", "gpt2_block.ir", "llama_decode.ir"])
def test_fast_path_finds_what_the_full_search_finds(
    example: str, pipeline: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = _planned(example, pipeline)
    proved = {True: 0, False: 0}
    calls: list[bool] = []
    real = is_arena_ordered

    def spy(*args: object) -> bool:
        calls.append(real(*args))  # type: ignore[arg-type]
        return calls[-1]

    rng = random.Random(f"{example} {pipeline}")
    for k in range(25):
        g = graph if k == 0 else _moved(graph, rng)
        calls.clear()
        with monkeypatch.context() as m:
            m.setattr(races, "is_arena_ordered", spy)
            found = races.find_races(g)
        assert found == _full_search(g, monkeypatch)
        for answer in calls:
            proved[answer] += 1
        if k == 0:
            assert calls == [True] and found == []  # the planned graph: proved race-free
    assert proved[False] > 0  # some moves make buffers clash: the full search ran


def test_overlapping_ordered_buffers_are_proved() -> None:
    """A one-stream chain planned without in-place reuse shares bytes between buffers ordered
    one after the other: proved. The same bytes under a buffer the host reads at the end: not."""
    graph = run_pipeline(og.parse(CHAIN), "analyze-lifetimes,plan-memory{inplace=false}")
    offsets = {n.name: n.ann.offset for n in graph.nodes if n.ann.offset is not None}
    assert len(offsets) > len(set(offsets.values()))  # some bytes are shared
    f = races._Finder(graph)
    accesses = races._buffer_accesses(graph, {})[0]
    buffers = [
        (i, n.name, n.ann.offset, n.ann.offset + n.ann.size)
        for i, n in enumerate(graph.nodes)
        if n.ann.offset is not None and n.ann.size
    ]
    allows = races._InPlaceRule(graph, {}).allows
    assert is_arena_ordered(f.hb, buffers, accesses, f.one_instance, {"f"}, allows)
    assert races.find_races(graph) == []
    reused = next(name for name, o in offsets.items() if list(offsets.values()).count(o) > 1)
    assert not is_arena_ordered(f.hb, buffers, accesses, f.one_instance, {reused}, allows)


CHAIN = """graph chain {
  input %x : f32[64]
  %a = exp(%x) : f32[64]
  %b = neg(%a) : f32[64]
  %c = relu(%x) : f32[64]
  %d = add(%b, %c) : f32[64]
  %e = sigmoid(%d) : f32[64]
  %f = tanh(%e) : f32[64]
  output %f
}
"""
