"""`plan-prefetch{times=FILE}`: measured node times price the compute of the ring/resident trade
(`prefetch_choice.measured_seconds`, `dense_resident`). The plans stay within the budget, free
of races and equal to the reference in random interleavings, whichever layers the measurement
says are slow; the densest segments are the ones `dense_resident` keeps; unmeasured nodes scale
with the measured ones; a bad times file is a clear error."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from optgraph.analysis.prefetch_choice import dense_resident, measured_seconds
from optgraph.analysis.races import find_races
from optgraph.analysis.schedule_estimate import node_seconds, profile_named
from optgraph.analysis.segments import Layout, Segment, device_memory
from optgraph.errors import OptGraphError
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline
from tests.passes.test_prefetch_ring import PLAN, SIZES
from tests.support.offload_models import assert_runs_equal_reference, llama


def _planned() -> tuple[Graph, Graph]:
    g = llama(layers=4, batch=2, seq=4, mode="prefill", **SIZES)
    return g, run_pipeline(g, PLAN)


def _times(graph: Graph, slow_layers: set[int], path: Path) -> str:
    """Roofline times x 3, x 60 for the nodes of `slow_layers` (names `l<i>.`...)."""
    roofline = node_seconds(graph, profile_named("h100"))
    times = {}
    for node, t in zip(graph.nodes, roofline):
        layer = node.name.split(".")[0]
        slow = layer.startswith("l") and layer[1:].isdigit() and int(layer[1:]) in slow_layers
        times[node.name] = t * (60.0 if slow else 3.0)
    path.write_text(json.dumps(times))
    return str(path)


def _streamed(planned: Graph, options: str) -> tuple[Graph, int]:
    budget = int(device_memory(planned).peak * 0.5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        g = run_pipeline(planned, f"plan-prefetch{{budget={budget},host-bandwidth=2GB{options}}}")
    return g, budget


def test_plans_priced_by_measured_times_are_exact_and_race_free(tmp_path: Path) -> None:
    g, planned = _planned()
    for slow in ({0}, {3}, {1, 2}):
        times = _times(planned, slow, tmp_path / "times.json")
        streamed, budget = _streamed(planned, f",segment-bytes=1KiB,times={times}")
        memory = device_memory(streamed)
        assert memory.streamed_weights > 0 and memory.peak <= budget
        assert find_races(streamed) == []
        assert_runs_equal_reference(streamed, g, interleavings=3)


def test_dense_resident_keeps_the_segments_of_most_bytes_per_second() -> None:
    segments = [
        Segment(("a",), 1 << 20, 0, 4),
        Segment(("b",), 80 << 20, 5, 5),
        Segment(("c",), 2 << 20, 6, 9),
    ]
    seconds = {i: 1e-3 for i in range(10)}  # the docstring's example: B's compute is short
    layout = Layout(segments, frozenset(), 0, 1)
    out = dense_resident(layout, lambda resident, ring: resident <= 81 << 20, lambda x: x, seconds)
    assert [sorted(x.kept) for x in out][:2] == [[1], []]


def test_unmeasured_nodes_take_the_roofline_times_the_median_ratio() -> None:
    _, planned = _planned()
    profile = profile_named("h100")
    roofline = node_seconds(planned, profile)
    named = [(n.name, t) for n, t in zip(planned.nodes, roofline) if t > 0]
    measured = {name: 5 * t for name, t in named[: len(named) // 2]}
    got = measured_seconds(planned, profile, measured)
    for node, t, want in zip(planned.nodes, got, roofline):
        assert t == pytest.approx(5 * want)


@pytest.mark.parametrize(
    "text, words",
    [
        (None, "cannot read times file"),
        ("{not json", "is not JSON"),
        ('{"a": "fast"}', "object of node names and seconds"),
        ('{"a": -1}', "object of node names and seconds"),
        ("[1, 2]", "object of node names and seconds"),
    ],
)
def test_a_bad_times_file_is_a_clear_error(tmp_path: Path, text: str | None, words: str) -> None:
    _, planned = _planned()
    path = tmp_path / "times.json"
    if text is not None:
        path.write_text(text)
    with pytest.raises(OptGraphError, match=words):
        _streamed(planned, f",times={path}")
