"""Fusion with the rest of the pipeline: streams (before or after assign-streams), memory plans,
the race checker and the planned executor's simulated stream interleavings.

Each pipeline is run on the examples and on random DAGs; the planned arena executor runs the
result in several seeded interleavings and must match the NumPy reference of the unfused graph.
Passes another engineer has not registered yet are skipped, not failed.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

import optgraph as og
from optgraph.codegen.plan.lower_arena import lower
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from optgraph.runtime.cpu.planned_executor import execute
from tests.support.property_examples import examples
from tests.support.random_graphs import random_dag_graphs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
STREAMS = "assign-streams{max-streams=4},insert-sync"
ORDERS = {
    "fuse-then-streams": f"fuse,{STREAMS}",
    "streams-then-fuse": f"{STREAMS},fuse",
}


def _pipeline(order: str) -> str:
    return f"{ORDERS[order]},analyze-lifetimes,plan-memory,check-races"


def _check_planned(original: Graph, compiled: Graph, seeds: range) -> None:
    inputs, weights = random_inputs(original, 3), random_weights(original, 3)
    expected = run_reference(original, inputs, weights)
    program = lower(compiled)
    used = {w.name for w in compiled.weights}
    for seed in seeds:
        result = execute(
            program, inputs, {k: v for k, v in weights.items() if k in used}, seed=seed
        )
        for name, value in expected.items():
            np.testing.assert_allclose(
                result.outputs[name].astype(np.float64),
                value.astype(np.float64),
                rtol=1e-6,
                atol=1e-6,
            )


@pytest.mark.parametrize("order", sorted(ORDERS))
@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.ir")), ids=lambda p: p.stem)
def test_examples_fused_with_streams_run_correctly(path: Path, order: str) -> None:
    graph = og.parse_file(str(path))
    compiled = run_pipeline(graph, _pipeline(order))
    fused = [n for n in compiled.nodes if n.op == "fused"]
    if path.stem in ("mlp", "moe_block", "llama_decode", "inception_block"):
        assert fused, "expected fused regions"
    for node in fused:
        assert node.ann.stream is not None
    _check_planned(graph, compiled, range(4))


def test_fusing_before_streams_finds_at_least_as_many_regions() -> None:
    """Fusing first is not limited by stream boundaries (why the default pipeline does it)."""
    for path in sorted(EXAMPLES.glob("*.ir")):
        graph = og.parse_file(str(path))
        before = run_pipeline(graph, ORDERS["fuse-then-streams"])
        after = run_pipeline(graph, ORDERS["streams-then-fuse"])
        absorbed_before = len(graph.nodes) - sum(1 for n in before.nodes if not n.is_event)
        absorbed_after = len(graph.nodes) - sum(1 for n in after.nodes if not n.is_event)
        assert absorbed_before >= absorbed_after, path.stem


@pytest.mark.parametrize("order", sorted(ORDERS))
@given(graph=random_dag_graphs(max_nodes=12))
@settings(max_examples=examples(25))
def test_random_graphs_fused_with_streams_run_correctly(order: str, graph: Graph) -> None:
    compiled = run_pipeline(graph, _pipeline(order))
    _check_planned(graph, compiled, range(2))


def test_default_pipeline_program_matches_reference() -> None:
    """`og.compile` with the default pipeline (which fuses) on the CPU target."""
    for name in ("mlp", "moe_block", "llama_decode"):
        graph = og.parse_file(str(EXAMPLES / f"{name}.ir"))
        program = og.compile(graph, target="cpu")
        assert any(n.op == "fused" for n in program.graph.nodes)
        inputs, weights = random_inputs(graph, 4), random_weights(graph, 4)
        expected = run_reference(graph, inputs, weights)
        used = {w.name for w in program.graph.weights}
        actual = program.run(inputs, {k: v for k, v in weights.items() if k in used})
        for key, value in expected.items():
            np.testing.assert_allclose(actual[key], value, rtol=1e-6, atol=1e-6)
