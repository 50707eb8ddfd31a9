"""The CPU-testable parts of the CUDA runtime: storage and serialization of the launch plan, the
graph-cache key and decisions, re-typing for new input shapes, DOT node counting."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

import optgraph as og
from optgraph.codegen.cuda_source import CodegenError
from optgraph.codegen.lower_cuda import (
    EventStep,
    GemmStep,
    KernelStep,
    Location,
    lower_cuda,
)
from optgraph.codegen.plan.plan_text import plan_json
from optgraph.errors import InputError
from optgraph.ir.graph import TensorType
from optgraph.passes.manager import run_pipeline
from optgraph.runtime.cuda.graph_cache import (
    Action,
    Binding,
    GraphCache,
    GraphKey,
    count_dot_nodes,
    moved_weights,
    retype_graph,
)

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.ir"))
PLANNED = (
    "verify,dce,cse,assign-streams{max-streams=4,min-branch-us=0},insert-sync,"
    "analyze-lifetimes,plan-memory"
)


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_plan_places_every_value_and_keeps_issue_order(path: Path) -> None:
    graph = run_pipeline(og.parse_file(path), PLANNED)
    plan = lower_cuda(graph)
    assert plan.is_planned and not plan.value_bytes
    for node in graph.nodes:
        if node.is_event:
            continue
        loc = plan.locations[node.name]
        if node.ann.offset is not None:
            assert loc == Location("arena", "", node.ann.offset)
            assert node.ann.offset + (node.ann.size or 0) <= plan.arena_bytes
    # Steps follow the issue order of the nodes they come from, on the nodes' streams.
    order = {n.name: i for i, n in enumerate(graph.nodes) if not n.is_event}
    stream = {n.name: n.stream for n in graph.nodes}
    positions = [order[s.node] for s in plan.steps if isinstance(s, (KernelStep, GemmStep))]
    assert positions == sorted(positions)
    for s in plan.steps:
        if isinstance(s, (KernelStep, GemmStep)):
            assert s.stream == stream[s.node]
    events = [s for s in plan.steps if isinstance(s, EventStep)]
    assert len(events) == sum(1 for n in graph.nodes if n.is_event)
    data = json.loads(json.dumps(plan_json(plan)))
    assert data["arena_bytes"] == plan.arena_bytes and len(data["steps"]) == len(plan.steps)


def test_weights_are_aligned_in_declaration_order() -> None:
    plan = lower_cuda(og.parse_file(EXAMPLES[0].parent / "mlp.ir"))
    offsets = list(plan.weight_offsets.values())
    assert offsets == sorted(offsets) and all(o % 256 == 0 for o in offsets)
    assert plan.weights_bytes >= offsets[-1] + 10 * 4


def test_unplanned_graph_gets_one_buffer_per_value() -> None:
    graph = og.parse_file(EXAMPLES[0].parent / "gpt2_block.ir")
    plan = lower_cuda(graph)
    assert not plan.is_planned
    locations = {n.name: plan.locations[n.name] for n in graph.nodes}
    owned = {n for n, loc in locations.items() if loc.space == "value" and loc.key == n}
    assert owned == set(plan.value_bytes)
    assert all(loc.space == "value" for loc in locations.values())
    # The q/k/v slices along the last axis are materialized; the reshapes of them alias.
    assert plan.locations["q"].space == "value"
    assert plan.locations["q4"] == plan.locations["q"]


def test_partially_planned_graph_is_an_error() -> None:
    graph = run_pipeline(og.parse_file(EXAMPLES[0].parent / "diamond.ir"), PLANNED)
    broken = graph.with_nodes(n.with_ann(offset=None) if n.name == "y" else n for n in graph.nodes)
    with pytest.raises(CodegenError, match="no arena offset"):
        lower_cuda(broken)


# -- the graph cache ---------------------------------------------------------------------------


def test_cache_decides_replay_update_capture() -> None:
    evicted: list[str] = []
    cache: GraphCache[str] = GraphCache(capacity=2, on_evict=evicted.append)
    t = {"x": TensorType("f32", (4, 64))}
    key = GraphKey.of(t, frozenset({"x"}))
    b1, b2 = Binding.of({"x": 1000}, {}), Binding.of({"x": 2000}, {})
    assert cache.decide(key, b1) is Action.CAPTURE
    cache.store(key, b1, "g1")
    assert cache.decide(key, b1) is Action.REPLAY
    assert cache.decide(key, b2) is Action.UPDATE
    cache.rebind(key, b2)
    assert cache.decide(key, b2) is Action.REPLAY
    # Other shapes, other binding kinds: other keys.
    wide = GraphKey.of({"x": TensorType("f32", (8, 64))}, frozenset({"x"}))
    staged = GraphKey.of(t)
    assert wide != key and staged != key
    assert cache.decide(wide, b1) is Action.CAPTURE
    cache.store(wide, b1, "g2")
    cache.decide(key, b2)  # touch: key is now the most recently used
    cache.store(staged, Binding(), "g3")
    assert evicted == ["g2"] and key in cache and wide not in cache


def test_key_ignores_input_order_and_names_dtypes() -> None:
    a = GraphKey.of({"x": TensorType("f32", (2,)), "y": TensorType("i32", (1,))})
    b = GraphKey.of({"y": TensorType("i32", (1,)), "x": TensorType("f32", (2,))})
    c = GraphKey.of({"x": TensorType("f16", (2,)), "y": TensorType("i32", (1,))})
    assert a == b and hash(a) == hash(b) and a != c
    assert a.types()["x"] == TensorType("f32", (2,))


def test_retype_graph_infers_new_shapes_and_drops_the_plan() -> None:
    graph = run_pipeline(og.parse_file(EXAMPLES[0].parent / "diamond.ir"), PLANNED)
    wide = retype_graph(graph, {"x": TensorType("f32", (8, 64))})
    assert wide.value_types()["y"] == TensorType("f32", (8, 64))
    assert all(n.ann.offset is None for n in wide.nodes)
    assert [n.stream for n in wide.nodes] == [n.stream for n in graph.nodes]
    gpt2 = og.parse_file(EXAMPLES[0].parent / "gpt2_block.ir")
    with pytest.raises(InputError) as err:
        retype_graph(gpt2, {"x": TensorType("f32", (9, 64))})  # reshape to 8 tokens fails
    assert "cannot take input '%x' as f32[9,64] (was f32[8,64])" in err.value.message
    assert err.value.span is not None and err.value.span.line > 6  # the reshape, not the input


def test_moved_weights_finds_weights_placed_differently() -> None:
    mlp = og.parse_file(EXAMPLES[0].parent / "mlp.ir")
    planned = run_pipeline(mlp, PLANNED)
    wide = retype_graph(planned, {"x": TensorType("f32", (16, 64))})
    assert moved_weights(lower_cuda(planned), lower_cuda(wide)) == []
    # fc1.w kept in host memory: it leaves the device buffer, and every later weight moves up.
    host = tuple(replace(w, placement="host") if w.name == "fc1.w" else w for w in mlp.weights)
    moved = moved_weights(lower_cuda(planned), lower_cuda(replace(planned, weights=host)))
    assert moved == sorted(w.name for w in mlp.weights)


def test_count_dot_nodes() -> None:
    dot = """digraph dot {
subgraph cluster_1 {
"graph_1_node_0"[style="solid" shape="rectangle" label="0
KERNEL
og_add_0123456789ab
\\<\\<\\<(1,1,1),(256,1,1)\\>\\>\\>"];
"graph_1_node_1"[style="solid" shape="rectangle" label="1
KERNEL
sm90_xmma_gemm_f32f32"];
"graph_1_node_2"[style="solid" shape="rectangle" label="2
MEMCPY
(DtoH,1024)"];
"graph_1_node_0" -> "graph_1_node_1";
"graph_1_node_1" -> "graph_1_node_2";
}
}"""
    nodes = count_dot_nodes(dot)
    assert nodes.kinds == {"KERNEL": 2, "MEMCPY": 1} and nodes.total == 3
    assert nodes.kernels == ["og_add_0123456789ab", ""]
