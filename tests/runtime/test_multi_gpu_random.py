"""Random several-device graphs (tests/support/device_graphs.py) through the rank lowering and
the runtime on the fake CuPy with the fake NCCL (ranks as threads).

- Lowering: every rank meets each communicator's collectives in the same order, and the steps
  are exactly the graph's collectives on their devices.
- Runtime: the ranks run, capture and replay without waiting on each other forever, and each
  communicator's members ran the same collectives in the same order (eager run and replay).
- Emulator (a few examples): each rank's program in the CUDA emulator, its collectives fed from
  the reference, equals the reference.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings

import optgraph as og
from optgraph.codegen.rank_programs import lower_ranks
from optgraph.ir.graph import Graph
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.support import cuda_emulator, fake_nccl
from tests.support.device_graphs import random_device_graphs
from tests.support.fake_cupy import fake_cupy
from tests.support.fake_nccl import NcclCommunicator
from tests.support.rank_emulator import expected_sent, run_rank_emulated


@settings(deadline=None, max_examples=40)
@given(random_device_graphs())
def test_rank_steps_are_the_graphs_collectives_in_one_order(graph: Graph) -> None:
    ranks = lower_ranks(graph)
    for rank in range(ranks.world):
        want = [n.name for n in graph.nodes if n.op in {"all_reduce", "all_gather", "send", "recv"}
                and rank in n.devices]  # fmt: skip
        assert [s.node for s in ranks.collectives(rank)] == want
    for group in ranks.groups:
        orders = [
            [s.node for s in ranks.collectives(r) if s.group == group and s.kind[0] == "a"]
            for r in group
        ]
        assert all(order == orders[0] for order in orders)


@settings(deadline=None, max_examples=10)
@given(graph=random_device_graphs())
def test_ranks_run_and_replay_meeting_every_collective(graph: Graph) -> None:
    from optgraph.runtime.multi.gpus import MultiGpuProgram

    monkeypatch = pytest.MonkeyPatch()
    monkeypatch.setattr(fake_nccl, "WAIT_SECONDS", 10.0)
    try:
        with fake_cupy(monkeypatch) as fake:
            fake.device_count = graph.device_count()
            weights = random_weights(graph, seed=0)
            program = MultiGpuProgram(lower_ranks(graph), weights, launcher="thread")
            with program:
                inputs = random_inputs(graph, seed=0)
                first, second = program.run(inputs), program.run(inputs)
            assert set(first) == set(second) == set(graph.output_names())
            by_folder: dict[object, list[list[tuple[str, int]]]] = {}
            for comm in NcclCommunicator.created:
                calls = [(kind, seq) for kind, _, seq in comm.calls if kind.startswith("all_")]
                by_folder.setdefault(comm.folder, []).append(calls)
            for members in by_folder.values():
                assert all(m == members[0] for m in members)
    finally:
        monkeypatch.undo()


def close(got: np.ndarray, want: np.ndarray) -> bool:
    """f32 within the GPU tests' bound (kernels sum in their own order), anything else exact."""
    got = np.asarray(got).reshape(want.shape)
    if want.dtype.kind == "f" and want.dtype.itemsize == 4:
        return nmse(got, want) <= 1e-7
    return bool(np.array_equal(got, want, equal_nan=want.dtype.kind == "f"))


@pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
@settings(deadline=None, max_examples=3)
@given(random_device_graphs(max_nodes=5))
def test_each_rank_of_a_random_graph_in_the_emulator(graph: Graph) -> None:
    ranks = lower_ranks(graph)
    inputs, weights = random_inputs(graph, seed=1), random_weights(graph, seed=1)
    reference = run_reference(graph, inputs, weights)
    for rank in range(ranks.world):
        outputs, sent = run_rank_emulated(ranks, rank, inputs, weights)
        for out, value in outputs.items():
            assert close(value, reference[out]), (rank, out)
        # the residual adds the all_reduces are offered, done at their place (the peer kernel's)
        taken, _ = run_rank_emulated(ranks, rank, inputs, weights, take_adds=True)
        for out, value in taken.items():
            assert close(value, reference[out]), (rank, out)
        expected = expected_sent(ranks, rank, inputs, weights)
        for node, value in sent.items():
            assert close(value, expected[node]), (rank, node)
    assert og.parse(og.print_graph(graph)) == graph
