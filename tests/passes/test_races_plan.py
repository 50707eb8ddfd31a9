"""check-races follows the memory plan (issue 13, classes 1 and 2).

1. The host reads every output when the graph returns: a plan that gives an output's bytes to a
   later buffer (after the output's last in-graph read) is a race, and the planned executor, an
   independent ground truth, returns a wrong output for it.
2. A `kv_cache_write` planned as a copy (its own bytes) only reads its cache: concurrent readers
   of the cache are no race. Planned in place (its result at the cache's bytes) it writes the
   cache, and a concurrent reader is one.
"""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.analysis.races import END, find_races
from optgraph.codegen.plan.lower_arena import lower
from optgraph.errors import VerifyError
from optgraph.ir.graph import Graph
from optgraph.passes.check_races import CheckRacesPass
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from optgraph.runtime.cpu.planned_executor import PlanViolation, execute

CHAIN = """graph chain {
  input %x : f32[64]
  %a = exp(%x) : f32[64]
  %b = neg(%a) : f32[64]
  %c = relu(%b) : f32[64]
  %d = sigmoid(%c) : f32[64]
  output %a, %d
}
"""

CACHE_READ_TWICE = """graph kv {
  input %cache : f32[1,2,8,4]
  input %new : f32[1,2,1,4]
  input %pos : i32[1]
  %w = kv_cache_write(%cache, %new, %pos) : f32[1,2,8,4]
  %r = exp(%cache) : f32[1,2,8,4]
  output %w, %r
}
"""

ARENA_CACHE = """graph kv_arena {
  input %x : f32[1,2,8,4]
  input %new : f32[1,2,1,4]
  input %pos : i32[1]
  %cache = neg(%x) : f32[1,2,8,4]
  %w = kv_cache_write(%cache, %new, %pos) : f32[1,2,8,4]
  %r = exp(%cache) : f32[1,2,8,4]
  output %w, %r
}
"""

PLANNED = (
    "verify,dce,cse,{fuse}assign-streams{{{streams}}},insert-sync,analyze-lifetimes,plan-memory"
)
MULTI_STREAM = ["policy=chains,min-branch-us=0", "policy=fanout", "max-streams=1"]


def _planned(text: str, streams: str = "max-streams=1", fuse: bool = False) -> Graph:
    return run_pipeline(og.parse(text), PLANNED.format(streams=streams, fuse="fuse," * fuse))


def _move(graph: Graph, name: str, offset: int) -> Graph:
    nodes = [n.with_ann(offset=offset) if n.name == name else n for n in graph.nodes]
    return graph.with_nodes(nodes)


def test_compiler_output_is_race_free() -> None:
    assert find_races(_planned(CHAIN)) == []


def test_a_buffer_reusing_an_output_after_its_last_read_is_a_race() -> None:
    planned = _planned(CHAIN)
    offsets = {n.name: n.ann.offset for n in planned.nodes}
    bad = _move(planned, "c", offsets["a"])  # %a's last in-graph read is %b, before %c
    races = find_races(bad)
    assert len(races) == 1
    race = races[0]
    assert race.second.node == END and race.second.value == "a" and race.clobber
    assert race.first.value == "c" and race.first.writes
    with pytest.raises(VerifyError, match="clobber: %c .* of output %a, which the host reads"):
        CheckRacesPass().run(bad)
    # The ground truth: the planned executor sees %a's bytes change before the host reads them.
    graph = og.parse(CHAIN)
    inputs, weights = random_inputs(graph), random_weights(graph)
    with pytest.raises(PlanViolation, match="'%a' was overwritten while still live"):
        execute(lower(bad), inputs, weights)
    got = execute(lower(planned), inputs, weights).outputs
    assert np.array_equal(got["a"], run_reference(graph, inputs, weights)["a"])


@pytest.mark.parametrize("streams", MULTI_STREAM)
def test_kv_cache_write_planned_as_a_copy_is_no_race(streams: str) -> None:
    for text in (CACHE_READ_TWICE, ARENA_CACHE):
        planned = _planned(text, streams, fuse=True)
        assert find_races(planned) == [], (text.split()[1], streams)
        assert CheckRacesPass().run(planned) is planned


def test_kv_cache_write_planned_in_place_beside_a_reader_is_a_race() -> None:
    planned = _planned(ARENA_CACHE, "policy=fanout")
    by_name = {n.name: n for n in planned.nodes}
    assert by_name["w"].stream != by_name["r"].stream, "the test needs the two on two streams"
    assert by_name["w"].ann.offset != by_name["cache"].ann.offset  # planned as a copy
    in_place = _move(planned, "w", by_name["cache"].ann.offset or 0)
    keys = {(r.first.value, r.second.value) for r in find_races(in_place) if r.second.node != END}
    assert ("cache", "cache") in keys or ("w", "cache") in keys or ("cache", "w") in keys
