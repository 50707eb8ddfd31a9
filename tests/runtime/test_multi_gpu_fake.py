"""The several-GPU runtime on a fake CuPy with a fake NCCL (tests/support/fake_nccl.py).

The fake's kernels compute nothing, so the graphs here move inputs through collectives only
(`placed_graphs.COLLECTIVES`, `FOUR_DEVICES`): their outputs are real values, checked against
the reference. Ranks run as threads of this process (one test spawns processes), meet through the
fake NCCL, capture their programs and replay them.
"""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.api.program_devices import MultiDeviceRunner, device_pipeline
from optgraph.codegen.rank_programs import lower_ranks
from optgraph.errors import InputError, OptGraphError
from optgraph.reference.interpreter import random_inputs, run_reference
from tests.support.fake_cupy import fake_cupy, install_in_process
from tests.support.fake_nccl import NcclCommunicator
from tests.support.placed_graphs import COLLECTIVES, FOUR_DEVICES, ONE_MEMBER


def failing_setup() -> None:
    raise RuntimeError("no CUDA driver in this rank")


def run_twice(text: str, monkeypatch: pytest.MonkeyPatch, devices: int, **kwargs: object) -> tuple:
    from optgraph.runtime.multi.gpus import MultiGpuProgram

    graph = og.parse(text)
    inputs = random_inputs(graph, seed=5)
    with fake_cupy(monkeypatch) as fake:
        fake.device_count = devices
        program = MultiGpuProgram(lower_ranks(graph), {}, **kwargs)  # type: ignore[arg-type]
        try:
            first, second = program.run(inputs), program.run(inputs)
        finally:
            program.close()
        return graph, inputs, first, second, fake, program


@pytest.mark.parametrize("text", [COLLECTIVES, FOUR_DEVICES, ONE_MEMBER])
def test_outputs_gathered_from_their_ranks_equal_the_reference(
    text: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph, inputs, first, second, fake, _ = run_twice(text, monkeypatch, 4, launcher="thread")
    reference = run_reference(graph, inputs, {})
    assert list(first) == list(graph.output_names())
    for name, want in reference.items():
        if graph.name != "one_member":  # the fake computes no exp
            assert np.array_equal(first[name], want), name
        assert np.array_equal(second[name], first[name]), name
    world = graph.device_count()
    assert fake.instantiations == world  # each rank captured its program once
    assert fake.graph_launches == world  # and replayed it on the second run


def test_each_rank_captures_its_collectives_in_the_global_order(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_twice(COLLECTIVES, monkeypatch, 2, launcher="thread")
    comms = NcclCommunicator.created
    assert sorted(c.rank for c in comms) == [0, 1]  # one communicator (group [0, 1]) per rank
    for comm in comms:
        collectives = [kind for kind, _, _ in comm.calls if kind.startswith("all_")]
        assert collectives == ["all_reduce", "all_gather", "all_gather"] * 2  # eager, replay
        p2p = [kind for kind, _, _ in comm.calls if kind in ("send", "recv")]
        assert p2p == (["send"] if comm.rank == 0 else ["recv"]) * 2


def test_nvlink_multicast_is_off_in_every_rank(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("NCCL_NVLS_ENABLE", "1")
    *_, program = run_twice(COLLECTIVES, monkeypatch, 2, launcher="thread")
    assert program.nvls == ["0", "0"]
    assert [c.nvls for c in NcclCommunicator.created] == ["0", "0"]


def test_four_devices_make_subgroup_and_world_communicators(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_twice(FOUR_DEVICES, monkeypatch, 4, launcher="thread")
    sizes = sorted((c.size, c.rank) for c in NcclCommunicator.created)
    # [0, 1] and [3, 2] (two members each) and the world (send/recv) for every rank.
    assert sizes == [(2, 0), (2, 0), (2, 1), (2, 1), (4, 0), (4, 1), (4, 2), (4, 3)]


def test_spawned_rank_processes_run_the_program(monkeypatch: pytest.MonkeyPatch) -> None:
    graph, inputs, first, second, *_ = run_twice(
        COLLECTIVES, monkeypatch, 2, launcher="spawn", setup=install_in_process
    )
    reference = run_reference(graph, inputs, {})
    for name, want in reference.items():
        assert np.array_equal(first[name], want) and np.array_equal(second[name], want), name


def test_too_few_gpus_is_refused_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(OptGraphError, match=r"runs on 2 GPUs \(devices \[0, 1\]\) but 1 are"):
        run_twice(COLLECTIVES, monkeypatch, 1, launcher="thread")


def test_a_failing_rank_names_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(OptGraphError, match=r"rank 0 \(GPU 0\) failed:(.|\n)*no CUDA driver"):
        run_twice(COLLECTIVES, monkeypatch, 2, launcher="thread", setup=failing_setup)


def test_missing_weight_is_an_input_error(monkeypatch: pytest.MonkeyPatch) -> None:
    from optgraph.runtime.multi.gpus import MultiGpuProgram

    text = COLLECTIVES.replace("  input %b", "  weight %w : f32[2] !{device = 1}\n  input %b")
    with fake_cupy(monkeypatch) as fake:
        fake.device_count = 2
        with pytest.raises(InputError, match=r"missing weight '%w' \(f32\[2\]\)"):
            MultiGpuProgram(lower_ranks(og.parse(text)), {}, launcher="thread")


def test_one_rank_alone_feeds_its_collectives_and_keeps_what_it_sends(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from optgraph.runtime.multi.gpus import run_rank_alone

    graph = og.parse(COLLECTIVES)
    inputs = random_inputs(graph, seed=2)
    reference = run_reference(graph, inputs, {})
    with fake_cupy(monkeypatch):
        zero = run_rank_alone(lower_ranks(graph), 0, inputs, {})
        one = run_rank_alone(lower_ranks(graph), 1, inputs, {})
    for name in ("s", "g", "g0"):
        assert np.array_equal(zero.outputs[name], reference[name])
    assert np.array_equal(one.outputs["r"], reference["r"])
    assert set(zero.sent) == {"s", "g", "g0", "t"} and set(one.sent) == {"s", "g", "g0"}
    for alone, array in ((zero, inputs["a"]), (one, inputs["b"])):
        for node, sent in alone.sent.items():
            assert np.array_equal(sent, array.reshape(-1)), node
            assert np.array_equal(alone.expected_sent[node], array.reshape(-1)), node


def test_compile_for_cuda_on_two_devices_runs_the_ranks(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = og.parse(COLLECTIVES)
    inputs = random_inputs(graph, seed=4)
    with fake_cupy(monkeypatch) as fake:
        fake.device_count = 2
        program = og.compile(graph, "default", target="cuda", devices=2)
        runner = program._cuda_runner()
        assert isinstance(runner, MultiDeviceRunner) and runner.ranks.world == 2
        runner.launcher = "thread"
        try:
            outputs = program.run(inputs, {})
            with pytest.raises(OptGraphError, match="several devices has no bound steps"):
                program.bind(inputs, {})
        finally:
            program.close()
    for name, want in run_reference(graph, inputs, {}).items():
        assert np.array_equal(outputs[name], want), name


def test_devices_must_match_the_placed_graph() -> None:
    with pytest.raises(OptGraphError, match=r"on 2 device\(s\) but 4 were asked for \(run it on 2"):
        og.compile(og.parse(COLLECTIVES), "default", target="cpu", devices=4)


def test_an_unplaced_graph_on_several_devices_is_split_first() -> None:
    placed, unplaced = og.parse(COLLECTIVES), og.parse(ONE_MEMBER.replace(" {group = [0]}", ""))
    assert device_pipeline(placed, "default", 2) == "default"
    assert device_pipeline(unplaced, "default", 1) == "default"
    assert device_pipeline(unplaced, "fuse", 2) == "tensor-parallel{ways=2},fuse"
    split = "pipeline-parallel{stages=2},default"
    assert device_pipeline(unplaced, split, 2) == split


def test_timing_binds_device_arrays_and_replays_on_every_rank(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from optgraph.runtime.multi.gpus import MultiGpuProgram

    graph = og.parse(COLLECTIVES)
    with fake_cupy(monkeypatch) as fake:
        fake.device_count = 2
        with MultiGpuProgram(lower_ranks(graph), {}, launcher="thread") as program:
            times = program.time(random_inputs(graph, seed=1), warmup=2, reps=5)
    assert times.rank_ms == (0.25, 0.25)  # the fake's elapsed time per replay, from each rank
    assert times.step_ms == 0.25
    assert fake.instantiations == 2 and fake.graph_launches == 2 * (2 + 5)


def test_a_split_llama_runs_and_times_with_its_caches_bound_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from gen_llama import generate_llama

    from optgraph.reference.interpreter import random_weights

    source = og.parse(generate_llama(layers=1, hidden=64, heads=4, kv_heads=2, ffn=128))
    inputs, weights = random_inputs(source, seed=1), random_weights(source, seed=1)
    with fake_cupy(monkeypatch) as fake:
        fake.device_count = 2
        program = og.compile(source, "default", target="cuda", devices=2)
        runner = program._cuda_runner()
        runner.launcher = "thread"
        try:
            outputs = program.run(inputs, weights)
            times = runner.time(inputs, weights, warmup=1, reps=2)
        finally:
            program.close()
    assert list(outputs) == list(source.output_names())
    types = source.value_types()
    assert all(outputs[n].shape == types[n].shape for n in outputs)  # split caches joined
    assert times.rank_ms == (0.25, 0.25)
    # Each rank: the run's capture, then the in-place variant's (the caches bound in place).
    assert fake.instantiations == 4
    # Each rank holds and writes its own KV head of each cache, bound in place.
    for rank, lowered in enumerate(runner.ranks.ranks):
        caches = {i.name: i.type.shape for i in lowered.graph.inputs if "cache" in i.name}
        assert caches == {f"l0.{kv}_cache.d{rank}": (1, 1, 32, 16) for kv in "kv"}
        assert dict(lowered.in_place) == {f"l0.{kv}_cache_new.d{rank}": f"l0.{kv}_cache.d{rank}"
                                          for kv in "kv"}  # fmt: skip


def test_the_gpu_tests_helpers_hand_each_rank_its_cache_pieces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """What tests/gpu/test_multi_gpu.py's `run_ranks` and `check_ranks_alone` do with a split
    Llama, on the fake: each rank runs on its own cache pieces (the fake's kernels compute
    nothing, so only names and shapes are checked), the joined outputs have the source's types."""
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from gen_llama import generate_llama

    from optgraph.api.program_devices import parallel_inputs, parallel_weights, whole_outputs
    from optgraph.reference.interpreter import random_weights
    from optgraph.runtime.multi.gpus import MultiGpuProgram, run_rank_alone

    source = og.parse(generate_llama(layers=1, hidden=64, heads=4, kv_heads=2, ffn=128))
    graph = og.compile(source, "tensor-parallel{ways=2},default", "cpu").graph
    inputs, weights = random_inputs(source, seed=3), random_weights(source, seed=3)
    sliced = parallel_weights(source, graph, weights)
    pieces = parallel_inputs(source, graph, inputs)
    assert pieces["l0.k_cache.d1"].shape == (1, 1, 32, 16)
    ranks = lower_ranks(graph)
    with fake_cupy(monkeypatch) as fake:
        fake.device_count = 2
        with MultiGpuProgram(ranks, sliced, launcher="thread") as program:
            outputs = whole_outputs(source, graph, program.run(pieces))
        alone = [run_rank_alone(ranks, r, pieces, sliced) for r in range(2)]
    types = source.value_types()
    assert {n: o.shape for n, o in outputs.items()} == {
        n: types[n].shape for n in source.output_names()
    }
    assert set(alone[1].outputs) == {"l0.k_cache_new.d1", "l0.v_cache_new.d1"}
    assert set(alone[0].outputs) == {"logits", "l0.k_cache_new.d0", "l0.v_cache_new.d0"}


def test_no_cupy_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    from optgraph.runtime.multi.gpus import MultiGpuProgram

    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    with pytest.raises(OptGraphError, match="runs on 2 GPUs but none is usable"):
        MultiGpuProgram(lower_ranks(og.parse(COLLECTIVES)), {}, launcher="thread")


def test_a_step_takes_the_slowest_rank_of_each_replay() -> None:
    from optgraph.runtime.multi.gpus import StepTimes

    # rank 1 (a pipeline's last stage) is the slower one in replays 0 and 2, rank 0 in replay 1
    times = StepTimes.of([[1.0, 5.0, 2.0], [3.0, 1.0, 2.5]])
    assert times.step_ms == 3.0  # median of 3.0, 5.0, 2.5
    assert times.rank_ms == (2.0, 2.5)
