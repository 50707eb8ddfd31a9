"""The `fuse` pass: semantics preserved on random DAGs and on the examples, region invariants.

Fixtures in tests/fixtures/fuse/ pin each rule (fusion happens / is blocked); here hypothesis
checks, on random graphs, that every region the pass builds is one kernel by
`fusion_rules.plan_body`, that no absorbed value escapes its region, that the reference
interpreter gives the same outputs, and that the pass is idempotent and round-trips as text.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

import optgraph as og
from optgraph.analysis.fusion_rules import ELEMENTWISE, PRODUCT, REDUCTION, plan_body
from optgraph.ir.graph import Graph
from optgraph.ir.verify import verify
from optgraph.passes.fuse import FusePass
from optgraph.passes.manager import parse_pipeline, run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from tests.support.property_examples import examples
from tests.support.random_graphs import random_dag_graphs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def _fused(graph: Graph, max_ops: int = 64) -> Graph:
    return FusePass(max_ops=max_ops).run(graph)


def _assert_same_results(before: Graph, after: Graph, seed: int = 0) -> None:
    inputs, weights = random_inputs(before, seed), random_weights(before, seed)
    expected = run_reference(before, inputs, weights)
    actual = run_reference(after, inputs, {w.name: weights[w.name] for w in after.weights})
    assert list(actual) == list(expected)
    for name, value in expected.items():
        # The reference evaluates a body node by node with the same rounding: results agree
        # within float32 noise (bit-identical in practice).
        np.testing.assert_allclose(
            actual[name].astype(np.float64), value.astype(np.float64), rtol=1e-6, atol=1e-6
        )


def _check_regions(before: Graph, after: Graph, max_ops: int) -> None:
    """Each region is one kernel, within max-ops, and hides only values nobody else sees."""
    types = after.value_types()
    outputs = set(after.output_names())
    outside_names = {n.name for n in after.nodes} | after.input_names() | after.weight_names()
    for node in after.nodes:
        if node.op != "fused" or node.body is None:
            continue
        assert 2 <= len(node.body.nodes) <= max_ops
        plan = plan_body(node.body, [types[o] for o in node.operands])
        assert plan.kind in (ELEMENTWISE, REDUCTION, PRODUCT)
        assert node.body.result == node.name
        for inner in node.body.nodes[:-1]:
            # absorbed: not a graph output, and gone from the graph
            assert inner.name not in outputs
            assert inner.name not in outside_names
            assert inner.ann.is_empty()
        assert len(set(node.operands)) == len(node.operands)
    # the graph's own values are unchanged, minus the absorbed ones
    kept = {n.name for n in after.nodes}
    assert kept <= {n.name for n in before.nodes}


@given(random_dag_graphs(max_nodes=14))
@settings(max_examples=examples(80))
def test_fusion_preserves_results_on_random_graphs(graph: Graph) -> None:
    after = _fused(graph)
    verify(after)
    _check_regions(graph, after, 64)
    _assert_same_results(graph, after)


@given(random_dag_graphs(max_nodes=14))
@settings(max_examples=examples(40))
def test_small_max_ops_bounds_regions(graph: Graph) -> None:
    after = _fused(graph, max_ops=2)
    _check_regions(graph, after, 2)
    _assert_same_results(graph, after)


@given(random_dag_graphs(max_nodes=12))
@settings(max_examples=examples(40))
def test_fuse_is_idempotent_and_round_trips(graph: Graph) -> None:
    once = _fused(graph)
    assert _fused(once) == once
    assert og.parse(og.print_graph(once)) == once


@given(random_dag_graphs(max_nodes=12, annotations=True, events=True))
@settings(max_examples=examples(60))
def test_annotated_graphs_fuse_within_one_stream_and_backend(graph: Graph) -> None:
    after = _fused(graph)
    verify(after)
    _assert_same_results(graph, after)
    by_name = {n.name: n for n in graph.nodes if not n.is_event}
    for node in after.nodes:
        if node.body is None:
            continue
        members = [by_name[inner.name] for inner in node.body.nodes]
        assert len({(m.ann.stream, m.ann.backend) for m in members}) == 1
        root_ann = by_name[node.name].ann
        assert replace(node.ann, live=None, visible=None) == replace(
            root_ann, live=None, visible=None
        )


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.ir")), ids=lambda p: p.stem)
def test_examples_fused_agree_with_unfused(path: Path) -> None:
    graph = og.parse_file(str(path))
    after = _fused(graph)
    _check_regions(graph, after, 64)
    _assert_same_results(graph, after, seed=1)


def test_examples_get_the_expected_regions() -> None:
    """The patterns the models rely on are found: product epilogues, SwiGLU gates, conv+relu."""

    def kinds(name: str) -> list[str]:
        g = _fused(og.parse_file(str(EXAMPLES / f"{name}.ir")))
        types = g.value_types()
        return [
            plan_body(n.body, [types[o] for o in n.operands]).kind
            for n in g.nodes
            if n.body is not None
        ]

    assert kinds("mlp") == [PRODUCT] * 3
    assert kinds("inception_block").count(PRODUCT) == 6  # every conv2d + bias + relu
    llama = kinds("llama_decode")
    # per layer: q, k, v (each with its own copy of the norm), wo + residual, up (norm),
    # gate (norm, silu·up), down + residual; and the last norm inside the lm_head product
    assert llama.count(PRODUCT) == 15
    assert kinds("diamond") == [ELEMENTWISE]


def test_fusion_reduces_launches_and_bytes_on_moe() -> None:
    graph = og.parse_file(str(EXAMPLES / "moe_block.ir"))
    after = _fused(graph)
    assert len(after.nodes) < len(graph.nodes) - 15


def test_pipeline_option_and_validation() -> None:
    (p,) = parse_pipeline("fuse{max-ops=3}")
    assert isinstance(p, FusePass) and p.max_ops == 3
    with pytest.raises(og.OptGraphError, match="max-ops"):
        parse_pipeline("fuse{max-ops=0}")
    (p,) = parse_pipeline("fuse{prologue-max-k=512}")
    assert isinstance(p, FusePass) and p.prologue_max_k == 512


def test_default_pipeline_fuses_before_scheduling() -> None:
    names = [p.name for p in parse_pipeline("default")]
    assert "fuse" in names
    for later in ("assign-streams", "analyze-lifetimes", "plan-memory"):
        if later in names:
            assert names.index("fuse") < names.index(later), later


def test_fuse_after_memory_planning_keeps_plan_valid() -> None:
    """Fusing a planned graph keeps offsets and must still execute correctly in the arena."""
    graph = og.parse_file(str(EXAMPLES / "mlp.ir"))
    planned = run_pipeline(graph, "analyze-lifetimes,plan-memory")
    after = _fused(planned)
    verify(after)
    assert any(n.op == "fused" for n in after.nodes)
    assert all(n.ann.live is None for n in after.nodes)
    _assert_same_results(graph, after)


WIDE_DECODE = """
graph wide {
  input %x : f16[1, 64]
  weight %g : f16[64]
  weight %wu : f16[64, 4096]
  weight %wg : f16[64, 4096]
  weight %wd : f16[4096, 64]
  weight %wo : f16[64, 4096]
  %n = rms_norm(%x, %g) : f16[1, 64]
  %u = matmul(%n, %wu) : f16[1, 4096]
  %a = matmul(%n, %wg) : f16[1, 4096]
  %s = silu(%a) : f16[1, 4096]
  %m = mul(%s, %u) : f16[1, 4096]
  %d = matmul(%m, %wd) : f16[1, 64]
  %h = add(%x, %d) : f16[1, 64]
  %n2 = rms_norm(%h, %g) : f16[1, 64]
  %o = matmul(%n2, %wo) : f16[1, 4096]
  output %o
}
"""


def _prologue_ops(graph: Graph) -> dict[str, list[str]]:
    """{product region: the ops of its prologue}."""
    types = graph.value_types()
    found = {}
    for node in graph.nodes:
        if node.body is not None:
            plan = plan_body(node.body, [types[o] for o in node.operands])
            if plan.kind == PRODUCT:
                by_name = {n.name: n.op for n in node.body.nodes}
                found[node.name] = [by_name[p] for p in plan.prologue]
    return found


@pytest.mark.parametrize("limit", [2048, 4096])
def test_elementwise_prologues_have_their_own_row_limit(limit: int) -> None:
    """SwiGLU's mul (4096 wide) becomes the down product's prologue only where
    `elementwise-prologue-max-k` allows it; the 64-wide norms are prologues either way, and
    `prologue-max-k` alone (norms) does not move the elementwise limit."""
    graph = og.parse(WIDE_DECODE)
    after = run_pipeline(graph, f"fuse{{prologue-max-k=64,elementwise-prologue-max-k={limit}}}")
    prologues = _prologue_ops(after)
    assert prologues["u"] == ["rms_norm"] and prologues["o"] == ["rms_norm"]
    if limit >= 4096:
        # SwiGLU's mul inside down (+ residual); the gate product (+ silu) independent of up
        assert prologues["h"] == ["mul"] and prologues["s"] == ["rms_norm"]
    else:
        assert prologues["h"] == []  # silu and mul in the gate product's epilogue instead
        assert prologues["m"] == ["rms_norm"]
    _assert_same_results(graph, after, seed=2)
    narrow = run_pipeline(graph, f"fuse{{prologue-max-k=32,elementwise-prologue-max-k={limit}}}")
    assert all("rms_norm" not in ops for ops in _prologue_ops(narrow).values())
