"""analyze-lifetimes: live ranges and per-stream "visible at" points, checked against brute force."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import optgraph as og
from optgraph.analysis.happens_before import HappensBefore
from optgraph.analysis.lifetimes import compute_lifetimes
from optgraph.ir.layout import alias_roots
from optgraph.passes.manager import run_pipeline
from tests.support.property_examples import examples
from tests.support.scheduled_graphs import random_memory_graph, random_streams

CONCURRENT = """
graph g {
  input %x : f32[64]
  %a = exp(%x) : f32[64] !{stream = 0}
  record ^e0 !{stream = 0}
  wait ^e0 !{stream = 1}
  %b = neg(%a) : f32[64] !{stream = 0}
  %c = tanh(%a) : f32[64] !{stream = 1}
  %n = exp(%b) : f32[64] !{stream = 0}
  record ^e1 !{stream = 1}
  wait ^e1 !{stream = 0}
  %d = add(%n, %c) : f32[64] !{stream = 0}
  %f = relu(%d) : f32[64] !{stream = 0}
  output %f
}
"""


def _brute_accesses(graph: og.Graph) -> dict[str, set[int]]:
    """Accesses per root buffer, following alias chains one node at a time."""
    roots = alias_roots(graph)
    out: dict[str, set[int]] = {}
    for i, n in graph.compute_nodes():
        if n.name not in roots:
            out.setdefault(n.name, set()).add(i)
        touched = [n.name] if n.name in roots else []
        for name in [*n.operands, *touched]:
            root = roots[name][0] if name in roots else name
            if root in out:
                out[root].add(i)
    return out


def test_visible_waits_for_the_other_stream() -> None:
    graph = og.parse(CONCURRENT)
    lt = compute_lifetimes(graph)["a"]
    # Issue order: %a's last access is %c (index 4); %n (index 5) follows it in issue order but
    # stream 0 learns that %c is done only at `wait ^e1` (index 7): first free node is %d (8).
    assert lt.last == 4
    assert lt.visible == (8, -1)
    assert lt.accesses == (0, 3, 4)


def test_output_lives_to_the_end_and_is_never_free() -> None:
    graph = og.parse(CONCURRENT)
    lt = compute_lifetimes(graph)["f"]
    assert lt.is_output and lt.last == len(graph.nodes)
    assert lt.visible == (-1, -1)


def test_output_through_a_view_keeps_the_root_alive() -> None:
    graph = og.parse(
        """graph g {
      input %x : f32[4,8]
      %a = exp(%x) : f32[4,8]
      %v = reshape(%a) {shape = [32]} : f32[32]
      %b = neg(%x) : f32[4,8]
      output %v, %b
    }"""
    )
    lifetimes = compute_lifetimes(graph)
    assert set(lifetimes) == {"a", "b"}  # the view owns no bytes
    assert lifetimes["a"].is_output and lifetimes["a"].last == len(graph.nodes)


def test_pass_clears_stale_annotations_on_views() -> None:
    graph = og.parse(
        """graph g {
      input %x : f32[4,8]
      %a = exp(%x) : f32[4,8]
      %v = reshape(%a) {shape = [32]} : f32[32] !{live = [9, 9], visible = [3]}
      %d = sigmoid(%v) : f32[32]
      output %d
    }"""
    )
    out = run_pipeline(graph, "analyze-lifetimes")
    assert out.nodes[1].ann.live is None and out.nodes[1].ann.visible is None
    assert out.nodes[0].ann.live == (0, 2)
    assert og.parse(og.print_graph(out)) == out


@settings(max_examples=examples(40))
@given(seed=st.integers(0, 10_000), streams=st.integers(1, 8), size=st.integers(2, 16))
def test_visible_matches_brute_force(seed: int, streams: int, size: int) -> None:
    """visible[s] is the first node on s that every access happens-before (checked pairwise)."""
    graph = random_streams(random_memory_graph(seed, size), streams, seed)
    hb = HappensBefore(graph)
    lifetimes = compute_lifetimes(graph, hb)
    accesses = _brute_accesses(graph)
    assert set(lifetimes) == set(accesses)
    outputs = {alias_roots(graph).get(o, (o, 0))[0] for o in graph.output_names()}
    for name, lt in lifetimes.items():
        assert set(lt.accesses) == accesses[name]
        assert lt.first == min(accesses[name])
        assert lt.last == (len(graph.nodes) if name in outputs else max(accesses[name]))
        for s in range(len(lt.visible)):
            on_s = [i for i, n in graph.compute_nodes() if n.stream == s]
            free = [i for i in on_s if all(hb.ordered(a, i) for a in accesses[name])]
            expected = -1 if name in outputs or not free else free[0]
            assert lt.visible[s] == expected, (name, s)
            # Monotone: every later node on the stream is also after every access.
            if expected >= 0:
                assert all(i in free for i in on_s if i >= expected)


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", ["diamond", "llama_decode", "moe_block", "inception_block"])
def test_examples_round_trip_with_lifetimes(name: str) -> None:
    graph = run_pipeline(og.parse_file(EXAMPLES / f"{name}.ir"), "analyze-lifetimes")
    assert og.parse(og.print_graph(graph)) == graph
    roots = alias_roots(graph)
    for _, node in graph.compute_nodes():
        assert (node.ann.live is None) == (node.name in roots), node.name
