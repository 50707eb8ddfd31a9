"""Lowering a device-annotated graph to one program per rank (codegen/rank_programs.py).

Each rank's program is checked on the CPU without its peers: its kernels run in the CUDA
emulator at its planned offsets, its collectives fed from the reference's values, and what it
sends is compared with the reference's value of its operand (tests/support/rank_emulator.py).
"""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.plan.plan_text import describe_plan
from optgraph.codegen.plan.steps import CollectiveStep, CopyStep
from optgraph.codegen.rank_programs import lower_ranks, rank_graph
from optgraph.ir.graph import Graph
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.support import cuda_emulator
from tests.support.placed_graphs import COLLECTIVES, FOUR_DEVICES, ONE_MEMBER, TP_PP
from tests.support.rank_emulator import expected_sent, run_rank_emulated

GRAPHS = {"collectives": COLLECTIVES, "tp_pp": TP_PP, "four": FOUR_DEVICES, "one": ONE_MEMBER}


def planned(text: str, pipeline: str) -> Graph:
    graph = og.parse(text)
    return graph if pipeline == "none" else og.compile(graph, pipeline, "cpu").graph


def test_rank_graph_keeps_its_own_nodes_with_the_local_operand() -> None:
    graph = og.parse(TP_PP)
    one = rank_graph(graph, 1)
    assert [i.name for i in one.inputs] == ["x"]
    assert [w.name for w in one.weights] == ["w1.d1", "w2.d1"]
    nodes = {n.name: n for n in one.nodes}
    assert list(nodes) == ["h.d1", "a.d1", "p.d1", "s", "y", "g", "r", "o"]
    assert nodes["s"].operands == ("p.d1",)
    assert nodes["g"].operands == ("a.d1",)
    assert nodes["r"].operands == ()
    assert all(n.ann.device == (1,) for n in one.nodes)
    assert one.output_names() == ("o",)
    zero = rank_graph(graph, 0)
    assert zero.output_names() == ("y",)
    assert [n.name for n in zero.nodes][-2:] == ["z", "t"]


def test_collective_steps_name_their_buffers_group_and_layout() -> None:
    ranks = lower_ranks(og.parse(COLLECTIVES))
    zero = describe_plan(ranks.ranks[0].main.plan).splitlines()
    common = "f32 count=32 group=[0,1] rank=0"
    assert zero == [
        f"all_reduce %s {common} rows=1 src=input:a+0 dst=value:s+0 stream 0",
        f"all_gather %g {common} rows=4 src=input:a+0 dst=value:g+0 stream 0",
        f"all_gather %g0 {common} rows=1 src=input:a+0 dst=value:g0+0 stream 0",
        f"send %t {common} rows=1 src=input:a+0 stream 0",
    ]
    one = describe_plan(ranks.ranks[1].main.plan).splitlines()
    assert one[0].startswith("all_reduce %s f32 count=32 group=[0,1] rank=1 rows=1 src=input:b+0")
    assert one[-1] == "recv %r f32 count=32 group=[0,1] rank=1 rows=1 dst=value:r+0 stream 0"
    assert ranks.outputs == {"s": 0, "g": 0, "g0": 0, "r": 1}


def test_groups_are_every_collective_group_and_the_world_for_point_to_point() -> None:
    ranks = lower_ranks(og.parse(FOUR_DEVICES))
    assert ranks.world == 4
    assert ranks.groups == ((0, 1), (0, 1, 2, 3), (3, 2))
    steps = {s.node: s for r in range(4) for s in ranks.collectives(r) if r == 2}
    assert steps["s32"].rank == 1 and steps["s32"].group == (3, 2)
    assert steps["r"].kind == "recv" and steps["r"].peer == 1
    assert ranks.outputs == {"s01": 0, "s32": 3, "r": 2}


@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("pipeline", ["none", "default"])
def test_every_rank_meets_each_group_in_the_same_order(name: str, pipeline: str) -> None:
    ranks = lower_ranks(planned(GRAPHS[name], pipeline))
    for group in ranks.groups:
        orders = [
            [s.node for s in ranks.collectives(r) if s.group == group and s.kind[0] == "a"]
            for r in group
        ]
        assert all(order == orders[0] for order in orders), (group, orders)


def test_planned_rank_programs_use_their_arena_and_streams() -> None:
    ranks = lower_ranks(planned(TP_PP, "default"))
    for program in ranks.ranks:
        plan = program.main.plan
        assert plan.is_planned and plan.arena_bytes > 0
        collectives = [s for s in plan.steps if isinstance(s, CollectiveStep)]
        assert collectives and all(s.dst is None or s.dst.space == "arena" for s in collectives)
        assert not any(isinstance(s, CopyStep) and s.node == "t" for s in plan.steps)


@pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
@pytest.mark.parametrize("name", sorted(GRAPHS))
@pytest.mark.parametrize("pipeline", ["none", "default"])
def test_each_rank_alone_in_the_emulator_equals_the_reference(name: str, pipeline: str) -> None:
    graph = og.parse(GRAPHS[name])
    ranks = lower_ranks(planned(GRAPHS[name], pipeline))
    inputs, weights = random_inputs(graph, seed=3), random_weights(graph, seed=3)
    reference = run_reference(graph, inputs, weights)
    for rank in range(ranks.world):
        outputs, sent = run_rank_emulated(ranks, rank, inputs, weights)
        assert set(outputs) == {o for o, r in ranks.outputs.items() if r == rank}
        for out, value in outputs.items():
            assert nmse(value, reference[out]) <= 1e-7, (rank, out)
        expected = expected_sent(ranks, rank, inputs, weights)
        assert set(sent) == set(expected)
        for node, value in sent.items():
            assert np.asarray(value).shape == expected[node].shape
            assert nmse(value, expected[node]) <= 1e-7, (rank, node)


SPLITS = ["tensor-parallel{ways=2}", "pipeline-parallel{stages=2}"]
SMALL_LLAMA = {
    "layers": 2, "hidden": 64, "heads": 4, "kv_heads": 2, "ffn": 128, "vocab": 128,
    "dtype": "f32", "batch": 1, "seq": 1, "cache_len": 16, "mode": "decode",
}  # fmt: skip


def small_llama() -> Graph:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from gen_llama import generate_llama

    return og.parse(generate_llama(**SMALL_LLAMA))


@pytest.mark.parametrize("split", SPLITS)
def test_sliced_weights_fit_the_split_graph_and_keep_its_results(split: str) -> None:
    from optgraph.api.program_devices import parallel_inputs, parallel_weights, whole_outputs

    source = small_llama()
    graph = og.compile(source, f"{split},default", "cpu").graph
    inputs, weights = random_inputs(source, seed=1), random_weights(source, seed=1)
    sliced = parallel_weights(source, graph, weights)
    assert [(n, a.shape) for n, a in sliced.items()] == [
        (w.name, w.type.shape) for w in graph.weights
    ]
    pieces = parallel_inputs(source, graph, inputs)  # tensor-parallel: caches cut by KV head
    assert [(n, a.shape) for n, a in pieces.items()] == [
        (i.name, i.type.shape) for i in graph.inputs
    ]
    got = whole_outputs(source, graph, run_reference(graph, pieces, sliced))
    want = run_reference(source, inputs, weights)
    for name in source.output_names():
        assert nmse(got[name], want[name]) <= 1e-12, name


@pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
@pytest.mark.parametrize("take_adds", [False, True])
@pytest.mark.parametrize("split", SPLITS)
def test_each_rank_of_a_split_llama_in_the_emulator_equals_the_reference(
    split: str, take_adds: bool
) -> None:
    """Each rank alone against the reference; with `take_adds`, every offered residual add done
    at its all_reduce's place, its own launch skipped (what the peer all_reduce does)."""
    from optgraph.api.program_devices import parallel_inputs, parallel_weights

    source = small_llama()
    graph = og.compile(source, f"{split},default", "cpu").graph
    ranks = lower_ranks(graph)
    inputs, weights = random_inputs(source, seed=2), random_weights(source, seed=2)
    sliced = parallel_weights(source, graph, weights)
    inputs = parallel_inputs(source, graph, inputs)  # each rank's pieces of a split cache
    # the split graph's own reference: it names the cache pieces each rank outputs (that it
    # equals the source's is test_sliced_weights_fit_the_split_graph_and_keep_its_results)
    reference = run_reference(graph, inputs, sliced)
    owned: set[str] = set()
    sends = 0
    for rank in range(ranks.world):
        outputs, sent = run_rank_emulated(ranks, rank, inputs, sliced, take_adds=take_adds)
        owned |= set(outputs)
        sends += len(sent)
        # The kernels sum in another order than the reference: f32 rounding, no more.
        for out, value in outputs.items():
            assert nmse(value, reference[out]) <= 1e-10, (rank, out)
        expected = expected_sent(ranks, rank, inputs, sliced)
        assert sent.keys() == expected.keys()
        for node, value in sent.items():
            assert nmse(value, expected[node]) <= 1e-10, (rank, node)
    assert owned == set(graph.output_names()) and sends > 0
    offered = [s for r in ranks.ranks for s in r.main.plan.steps if getattr(s, "then_add", None)]
    assert bool(offered) == split.startswith("tensor-parallel")  # pipeline stages: no all_reduce


def test_a_collective_planned_over_its_operand_is_refused() -> None:
    from optgraph.codegen.cuda_source import CodegenError

    graph = og.parse("""graph overlap {
  input %a : f32[4,8]
  input %b : f32[4,8] !{device = 1}
  %h = exp(%a) : f32[4,8] !{offset = 0, size = 128}
  %hb = exp(%b) : f32[4,8] !{device = 1, offset = 0, size = 128}
  %g = all_gather(%h, %hb) {group = [0, 1], axis = 0} : f32[8,8] !{device = [0, 1], offset = 64}
  output %g
}""")
    with pytest.raises(CodegenError, match="all_gather: '%g' is planned over its operand '%h'"):
        lower_ranks(graph)
