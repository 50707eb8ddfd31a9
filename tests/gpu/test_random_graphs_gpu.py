"""Differential test on the GPU: random graphs through the default and a forced multi-stream
pipeline, compiled for CUDA (fusion, merged launches, PDL, one CUDA graph), against the reference.

    python -m pytest tests/gpu/test_random_graphs_gpu.py --random-graphs 300 -s

Graphs come from the generator of the property tests (`tests/support/random_graphs.py`: f32
elementwise, reductions, softmax, matmul and views with broadcasting, several inputs, weights and
outputs). Each graph must compile (a codegen failure fails the test) and every output must be
within the f32 bound of `gpu_support` (NMSE ≤ 1e-7) after a run and after a graph replay, which
must equal the run bit for bit. The count is the hypothesis profile's (`examples(40)`) unless
`--random-graphs N` says otherwise; `-s` prints one line a graph with its largest NMSE.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import optgraph as og
from optgraph.ir.graph import Graph
from tests.support.gpu_support import assert_close, reference, require_gpu
from tests.support.property_examples import examples
from tests.support.random_graphs import random_dag_graphs

pytestmark = pytest.mark.gpu

require_gpu()

PIPELINES = {
    "default": "default",
    "4-streams": (
        "verify,dce,cse,fuse,assign-streams{max-streams=4,min-branch-us=0},insert-sync,"
        "analyze-lifetimes,plan-memory"
    ),
}


def _check(graph: Graph) -> float:
    """The largest NMSE of `graph`'s outputs over both pipelines (asserts on the way)."""
    inputs, weights, want = reference(graph)
    worst = 0.0
    for pipeline in PIPELINES.values():
        program = og.compile(graph, pipeline=pipeline, target="cuda")
        first = program.run(inputs, weights)
        replay = program.run(inputs, weights)
        for name in first:
            assert np.asarray(first[name]).tobytes() == np.asarray(replay[name]).tobytes(), name
        errors = assert_close(program.graph, first, want)
        worst = max([worst, *errors.values()])
        program._cuda_runner().close()
    return worst


def test_random_graphs_match_the_reference(random_graph_count: int | None) -> None:
    count = random_graph_count if random_graph_count is not None else examples(40)
    seen: list[float] = []

    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(graph=random_dag_graphs(max_nodes=14), _=st.just(None))
    def run(graph: Graph, _: None) -> None:
        worst = _check(graph)
        seen.append(worst)
        print(f"graph {len(seen)}: {len(graph.nodes)} nodes, max nmse {worst:.2e}", flush=True)

    run()
    assert seen, "no graph ran"
    print(f"{len(seen)} graphs, worst nmse {max(seen):.3e}")
