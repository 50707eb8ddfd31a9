"""Differential test on the GPU: random graphs through the default and a forced multi-stream
pipeline, compiled for CUDA (fusion, merged launches, PDL, one CUDA graph), against the reference.

    python -m pytest tests/gpu/test_random_graphs_gpu.py --random-graphs 300 -s

Graphs come from the generator of the property tests (`tests/support/random_graphs.py`: f32
elementwise, reductions, softmax, matmul and views with broadcasting, several inputs, weights and
outputs). Each graph must compile (a codegen failure fails the test) and every output must be
within the f32 bound of `gpu_support` (NMSE ≤ 1e-7) after a run and after a graph replay, which
must equal the run bit for bit. The count is the hypothesis profile's (`examples(40)`) unless
`--random-graphs N` says otherwise; `-s` prints one line a graph with its largest NMSE.

Mixed-precision graphs (`random_dag_graphs(mixed=True)`: f16/bf16 inputs, weights and `cast`
nodes among f32 values) go through the same pipelines with the bounds stated in
tests/support/gpu_support.py (`mixed_bound`), per output by its dtype and what it is computed from:

- f16 or bf16 output: NMSE ≤ 1e-4 (fusion keeps a region's interior in float32 where the
  reference rounds every node to f16/bf16; one narrow ulp is 2^-11 or 2^-8 of a value);
- f32 output fed by f16 paths only: NMSE ≤ 1e-6; fed by a bf16 path: NMSE ≤ 1e-4 (the narrow
  dtype's own bound: the f32 value carries a narrow value that may sit one narrow ulp away);
- f32 output fed by f32 values only: NMSE ≤ 1e-7, as in the pure-f32 test.

    python -m pytest tests/gpu/test_random_graphs_gpu.py --random-graphs 300 -s -k mixed

Decode-like graphs (`rows=True`: one-row values, norms, skip connections, one-row products with
norm prologues) run with the mixed bounds too; their lowering and a sample of their kernels also
run on the CPU in CI (tests/codegen/test_random_lowering.py).
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import optgraph as og
from optgraph.ir.graph import Graph
from optgraph.reference.interpreter import nmse
from tests.support.gpu_support import assert_close, mixed_bound, reference, require_gpu
from tests.support.property_examples import examples
from tests.support.random_graphs import narrow_ancestry, random_dag_graphs

pytestmark = pytest.mark.gpu

require_gpu()

PIPELINES = {
    "default": "default",
    "4-streams": (
        "verify,dce,cse,fuse,assign-streams{max-streams=4,min-branch-us=0},insert-sync,"
        "analyze-lifetimes,plan-memory"
    ),
}


def _check(graph: Graph, mixed: bool = False) -> float:
    """The largest NMSE of `graph`'s outputs over both pipelines (asserts on the way)."""
    inputs, weights, want = reference(graph)
    worst = 0.0
    for pipeline in PIPELINES.values():
        program = og.compile(graph, pipeline=pipeline, target="cuda")
        used = {w.name: weights[w.name] for w in program.graph.weights}
        first = program.run(inputs, used)
        replay = program.run(inputs, used)
        for name in first:
            assert np.asarray(first[name]).tobytes() == np.asarray(replay[name]).tobytes(), name
        if mixed:
            errors = _assert_mixed_close(graph, first, want)
        else:
            errors = assert_close(program.graph, first, want)
        worst = max([worst, *errors.values()])
        program.close()
    return worst


def _assert_mixed_close(graph: Graph, got: dict, want: dict) -> dict[str, float]:
    """Every output of a mixed-precision graph within `mixed_bound`; returns {output: nmse}."""
    types, ancestry = graph.value_types(), narrow_ancestry(graph)
    errors = {}
    for name, value in want.items():
        g = np.asarray(got[name])
        assert g.shape == value.shape and g.dtype == value.dtype, (name, g.dtype, value.dtype)
        bound = mixed_bound(types[name].dtype, ancestry[name])
        errors[name] = nmse(g, value)
        assert errors[name] <= bound, (
            f"%{name} ({types[name]}): nmse {errors[name]:.3e} > {bound:g}"
        )
    return errors


def _run_random_graphs(count: int, mixed: bool, rows: bool = False) -> None:
    seen: list[float] = []

    @settings(
        max_examples=count,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
    )
    @given(graph=random_dag_graphs(max_nodes=14, mixed=mixed, rows=rows))
    def run(graph: Graph) -> None:
        worst = _check(graph, mixed)
        seen.append(worst)
        print(f"graph {len(seen)}: {len(graph.nodes)} nodes, max nmse {worst:.2e}", flush=True)

    run()
    assert seen, "no graph ran"
    print(f"{len(seen)} {'mixed' if mixed else 'f32'} graphs, worst nmse {max(seen):.3e}")


def _count(option: int | None) -> int:
    return option if option is not None else examples(40)


def test_random_graphs_match_the_reference(random_graph_count: int | None) -> None:
    _run_random_graphs(_count(random_graph_count), mixed=False)


def test_mixed_precision_graphs_match_the_reference(random_graph_count: int | None) -> None:
    _run_random_graphs(_count(random_graph_count), mixed=True)


def test_decode_like_row_graphs_match_the_reference(random_graph_count: int | None) -> None:
    """`rows=True`: one-row values, norms, skips and one-row products (norm prologues)."""
    _run_random_graphs(_count(random_graph_count), mixed=True, rows=True)
