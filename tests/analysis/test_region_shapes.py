"""`RegionShapes` answers as `plan_region` (and the prologue row limits) would, and plans each
shape of region once: on the examples and a generated Llama graph, every producer-consumer pair
and chain of three fusable nodes is asked, and the answers are compared with a fresh plan."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import optgraph as og
from optgraph.analysis import region_shapes
from optgraph.analysis.fusion_rules import (
    NORM_OPS,
    PRODUCT,
    is_anchor,
    is_elementwise,
    plan_region,
)
from optgraph.analysis.region_shapes import RegionShapes
from optgraph.ir.graph import Graph, TensorType

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((ROOT / "examples").glob("*.ir"))


def _llama(layers: int, hidden: int) -> Graph:
    spec = importlib.util.spec_from_file_location("gen_llama", ROOT / "examples" / "gen_llama.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return og.parse(module.generate_llama(layers=layers, hidden=hidden))


def _expected(graph: Graph, types: dict[str, TensorType], union: list[int], limits: int) -> bool:
    region = [graph.nodes[j] for j in union]
    plan, _ = plan_region(region, types)
    if plan is None:
        return False
    if plan.kind == PRODUCT and plan.prologue and plan.anchor is not None:
        by_name = {n.name: n for n in region}
        row = types[by_name[plan.anchor].operands[0]].shape[-1]
        return row <= limits  # one limit for both kinds of prologue here
    return True


def _unions(graph: Graph, types: dict[str, TensorType]) -> list[list[int]]:
    """Pairs (producer, reader) and chains of three, of fusable nodes."""
    producers = graph.producers()
    fusable = {
        i for i, n in enumerate(graph.nodes) if is_elementwise(n) or is_anchor(n, types) is not None
    }
    pairs = [
        [producers[o], i]
        for i in sorted(fusable)
        for o in graph.nodes[i].operands
        if producers.get(o) in fusable
    ]
    chains = [
        [producers[o], *pair]
        for pair in pairs
        for o in graph.nodes[pair[0]].operands
        if producers.get(o) in fusable
    ]
    return [sorted(set(u)) for u in pairs + chains]


@pytest.mark.parametrize("limit", [16, 2048])
@pytest.mark.parametrize(
    "graph",
    [og.parse_file(p) for p in EXAMPLES] + [_llama(3, 64)],
    ids=[p.stem for p in EXAMPLES] + ["llama3"],
)
def test_answers_equal_a_fresh_plan(graph: Graph, limit: int) -> None:
    types = graph.value_types()
    shapes = RegionShapes(list(graph.nodes), types, limit, limit)
    unions = _unions(graph, types)
    assert unions
    answers = [shapes.is_one_kernel(u) for u in unions]
    assert answers == [_expected(graph, types, u, limit) for u in unions]
    assert any(answers)


def test_a_repeated_layer_is_planned_once(monkeypatch: pytest.MonkeyPatch) -> None:
    planned: list[int] = []

    def counting(nodes, types):  # type: ignore[no-untyped-def]
        planned.append(len(nodes))
        return plan_region(nodes, types)

    monkeypatch.setattr(region_shapes, "plan_region", counting)
    few, many = _llama(2, 64), _llama(6, 64)
    counts, asked = [], []
    for graph in (few, many):
        planned.clear()
        types = graph.value_types()
        shapes = RegionShapes(list(graph.nodes), types, 2048, 2048)
        unions = _unions(graph, types)
        answers = [shapes.is_one_kernel(union) for union in unions]
        assert answers == [_expected(graph, types, u, 2048) for u in unions]
        counts.append(len(planned))
        asked.append(len(unions))
    # Four more layers ask more questions and plan none of them again (a layer's pairs read the
    # layer before's result: the second layer is the first repeat).
    assert asked[1] > asked[0] and counts[0] > 0 and counts[1] == counts[0]
    assert any(n.op in NORM_OPS for n in many.nodes)
