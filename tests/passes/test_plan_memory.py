"""plan-memory and its bounds: conflicting buffers never share bytes, bounds are exact."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

import optgraph as og
from optgraph.analysis.arena_packing import (
    ORDERINGS,
    align_up,
    arena_top,
    lower_bound,
    placements,
)
from optgraph.analysis.arena_plan import (
    apply_plan,
    build_slots,
    check_plan,
    entirely_before,
    plan,
)
from optgraph.analysis.happens_before import HappensBefore, happens_before
from optgraph.analysis.lifetimes import compute_lifetimes
from optgraph.analysis.memory_bounds import (
    concurrency_bound,
    issue_order_bound,
    memory_figures,
    without_streams,
)
from optgraph.analysis.races import find_races
from optgraph.errors import PipelineError
from optgraph.ir.layout import alias_roots
from optgraph.passes.manager import run_pipeline
from tests.support.property_examples import examples
from tests.support.random_graphs import random_dag_graphs
from tests.support.scheduled_graphs import random_memory_graph, random_streams

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
ALGOS = ("best", "size", "lifetime", "issue")


def _overlapping_conflicts(graph: og.Graph) -> list[tuple[str, str]]:
    """Brute force, from happens-before only: overlapping buffers neither of which is entirely
    before the other, except a legal in-place pair (same offset; the later one's producer reads the
    earlier one and every other access to it happens-before that producer)."""
    hb = HappensBefore(graph)
    roots = alias_roots(graph)
    lifetimes = compute_lifetimes(graph, hb)
    bad = []
    for a, b in itertools.combinations(sorted(lifetimes.values(), key=lambda x: x.producer), 2):
        na, nb = graph.nodes[a.producer], graph.nodes[b.producer]
        lo_a, lo_b = na.ann.offset, nb.ann.offset
        assert lo_a is not None and lo_b is not None
        if lo_a + a.nbytes <= lo_b or lo_b + b.nbytes <= lo_a or not a.nbytes or not b.nbytes:
            continue
        if not a.is_output and all(hb.ordered(x, b.producer) for x in a.accesses):
            continue
        via = [o for o in nb.operands if roots.get(o, (o, 0))[0] == a.name]
        others_before = all(hb.ordered(x, b.producer) for x in a.accesses if x != b.producer)
        if via and others_before and lo_a == lo_b and not a.is_output:
            # Same element layout: the operand read (maybe a full view of a) has b's type.
            types = graph.value_types()
            assert len(set(via)) == 1 and a.nbytes == b.nbytes
            assert nb.op == "kv_cache_write" or types[via[0]] == nb.type
            continue
        bad.append((a.name, b.name))
    return bad


@settings(max_examples=examples(40))
@given(
    seed=st.integers(0, 100_000),
    size=st.integers(2, 18),
    streams=st.integers(1, 8),
    algo=st.sampled_from(ALGOS),
    explicit=st.booleans(),
)
@example(seed=3, size=16, streams=4, algo="best", explicit=True)
def test_conflicting_buffers_never_overlap(
    seed: int, size: int, streams: int, algo: str, explicit: bool
) -> None:
    graph = random_streams(random_memory_graph(seed, size), streams, seed)
    # explicit=False: only the stacked-permanents placement (what very large graphs get).
    memory = plan(graph, algo, 256, explicit_limit=2_000_000 if explicit else -1)
    assert explicit or all(", outputs stacked" in name for name in memory.arenas)
    planned = apply_plan(graph, memory)
    assert _overlapping_conflicts(planned) == []
    assert check_plan(planned) == []


@settings(max_examples=examples(40))
@given(
    seed=st.integers(0, 100_000),
    size=st.integers(2, 18),
    streams=st.integers(1, 8),
    explicit=st.booleans(),
)
def test_orderings_stop_at_the_lower_bound(
    seed: int, size: int, streams: int, explicit: bool
) -> None:
    """No ordering's arena is below `lower_bound`, and the orderings that stop at it keep the
    one all of them would choose (the smallest arena, the earliest of equals)."""
    graph = random_streams(random_memory_graph(seed, size), streams, seed)
    hb = happens_before(graph)
    slots, _ = build_slots(graph, compute_lifetimes(graph, hb), 256, hb, True)
    limit = 2_000_000 if explicit else -1
    every = placements(slots, list(ORDERINGS), limit)
    tops = {name: arena_top(slots, offsets) for name, offsets in every.items()}
    bound = lower_bound(slots)
    assert bound <= min(tops.values())
    stopped = placements(slots, list(ORDERINGS), limit, stop_at_bound=True)
    assert stopped == dict(list(every.items())[: len(stopped)])
    names = list(every)
    best = min(names, key=lambda name: (tops[name], names.index(name)))
    assert best == min(stopped, key=lambda name: (tops[name], names.index(name)))


@settings(max_examples=examples(25))
@given(
    graph=random_dag_graphs(max_nodes=14),
    streams=st.integers(1, 8),
    seed=st.integers(0, 1000),
    algo=st.sampled_from(ALGOS),
)
def test_shared_generator_graphs_plan_soundly(
    graph: og.Graph, streams: int, seed: int, algo: str
) -> None:
    planned = run_pipeline(
        random_streams(graph, streams, seed), f"analyze-lifetimes,plan-memory{{algo={algo}}}"
    )
    assert _overlapping_conflicts(planned) == []
    assert og.parse(og.print_graph(planned)) == planned


def test_check_plan_reports_an_overlap() -> None:
    graph = og.parse(
        """graph g {
      input %x : f32[64]
      %a = softmax(%x) : f32[64] !{offset = 0, size = 256}
      %b = softmax(%x) : f32[64] !{offset = 128, size = 256}
      %c = add(%a, %b) : f32[64] !{offset = 512, size = 256}
      output %c
    }"""
    )
    problems = check_plan(graph)
    assert len(problems) == 1 and "'%b'" in problems[0] and "'%a'" in problems[0]


def _brute_antichain(graph: og.Graph, alignment: int) -> int:
    lifetimes = list(compute_lifetimes(graph).values())
    best = 0
    for r in range(1, len(lifetimes) + 1):
        for group in itertools.combinations(lifetimes, r):
            if all(
                not entirely_before(a, b, graph) and not entirely_before(b, a, graph)
                for a, b in itertools.combinations(group, 2)
            ):
                best = max(best, sum(align_up(x.nbytes, alignment) for x in group))
    return best


@settings(max_examples=examples(20))
@given(seed=st.integers(0, 100_000), size=st.integers(2, 9), streams=st.integers(1, 4))
def test_concurrency_bound_is_the_max_weight_antichain(seed: int, size: int, streams: int) -> None:
    graph = random_streams(random_memory_graph(seed, size), streams, seed)
    lifetimes = compute_lifetimes(graph)
    if len(lifetimes) > 13:
        return
    exact = _brute_antichain(graph, 64)
    assert concurrency_bound(graph, lifetimes, 64) == exact
    lower = issue_order_bound(lifetimes, 64, len(graph.nodes))
    assert lower <= exact  # every issue-order clique is an antichain
    no_inplace = plan(graph, "best", 64, inplace=False)
    assert no_inplace.arena_bytes >= exact  # pairwise conflicting buffers need disjoint bytes
    if streams == 1:
        assert exact == lower  # intervals: max clique = max antichain


@pytest.mark.parametrize("name", ["diamond", "llama_decode", "gpt2_block", "moe_block", "mlp"])
def test_examples_near_the_lower_bound(name: str) -> None:
    graph = og.parse_file(EXAMPLES / f"{name}.ir")
    planned = run_pipeline(graph, "analyze-lifetimes,plan-memory")
    figures = memory_figures(planned)
    arena, lower = figures["arena_bytes"], figures["memory_lower_bound_bytes"]
    assert arena is not None and lower is not None
    assert arena <= 1.05 * lower
    assert figures["concurrency_bound_bytes"] == lower  # one stream
    assert figures["stream_extra_bytes"] == 0
    assert figures["no_reuse_bytes"] == sum(
        n.ann.size for _, n in planned.compute_nodes() if n.ann.size is not None
    )


def test_best_is_no_worse_than_each_ordering() -> None:
    graph = random_streams(random_memory_graph(11, 40), 3, 11)
    best = plan(graph, "best")
    assert best.arena_bytes == min(
        plan(graph, a).arena_bytes for a in ("size", "lifetime", "issue")
    )
    assert plan(graph, "none").arena_bytes >= best.arena_bytes


def test_stream_extra_is_measured_against_one_stream() -> None:
    graph = random_streams(random_memory_graph(5, 30), 4, 5)
    figures = memory_figures(graph)
    one = plan(without_streams(graph)).arena_bytes
    assert figures["one_stream_arena_bytes"] == one
    assert figures["stream_extra_bytes"] == figures["arena_bytes"] - one  # type: ignore[operator]


@pytest.mark.parametrize(
    ("pipeline", "message"),
    [
        ("plan-memory{algo=fastest}", "algo must be one of"),
        ("plan-memory{alignment=100}", "power of two"),
    ],
)
def test_bad_options(pipeline: str, message: str) -> None:
    graph = og.parse("graph g {\n input %x : f32[4]\n %a = exp(%x) : f32[4]\n output %a\n}")
    with pytest.raises(PipelineError, match=message):
        run_pipeline(graph, "analyze-lifetimes," + pipeline)


def test_plan_memory_requires_lifetimes() -> None:
    graph = og.parse("graph g {\n input %x : f32[4]\n %a = exp(%x) : f32[4]\n output %a\n}")
    with pytest.raises(PipelineError, match="run analyze-lifetimes first"):
        run_pipeline(graph, "plan-memory")


# -- check-races on planned graphs (its overlap check is the streams engineer's) ----------------

OVER_OPERAND = """graph g {
  input %x : f32[4,64]
  %a = sum(%x) {axes = [1], keepdims = true} : f32[4,1] !{offset = 0, size = 256}
  %b = sub(%x, %a) : f32[4,64] !{offset = 0, size = 1024}
  output %b
}"""

USE_AFTER_REUSE = """graph g {
  input %x : f32[64]
  %a = softmax(%x) : f32[64] !{offset = 0, size = 256}
  %b = softmax(%a) : f32[64] !{offset = 256, size = 256}
  %c = softmax(%b) : f32[64] !{offset = 0, size = 256}
  %d = add(%a, %c) : f32[64] !{offset = 256, size = 256}
  output %d
}"""

UNORDERED_REUSE = """graph g {
  input %x : f32[64]
  %a = softmax(%x) : f32[64] !{stream = 0, offset = 0, size = 256}
  record ^e0 !{stream = 0}
  wait ^e0 !{stream = 1}
  %b = softmax(%a) : f32[64] !{stream = 1, offset = 256, size = 256}
  %c = softmax(%x) : f32[64] !{stream = 0, offset = 0, size = 256}
  record ^e1 !{stream = 1}
  wait ^e1 !{stream = 0}
  %d = add(%b, %c) : f32[64] !{stream = 0, offset = 512, size = 256}
  output %d
}"""


def test_check_races_sees_an_unordered_reuse() -> None:
    graph = og.parse(UNORDERED_REUSE)
    assert check_plan(graph)  # %c takes %a's bytes while stream 1 may still read %a
    assert find_races(graph)


@pytest.mark.parametrize("text", [OVER_OPERAND, USE_AFTER_REUSE], ids=["over-operand", "reuse"])
def test_check_races_sees_every_overlap_check_plan_sees(text: str) -> None:
    graph = og.parse(text)
    assert check_plan(graph)
    races = find_races(graph)
    assert races and all(r.clobber for r in races)  # ordered, but the wrong way round
