"""The several-GPU runtime on real GPUs: NCCL communicators, rank programs captured and replayed.

Runs where CuPy and a GPU are (skipped elsewhere, like the rest of tests/gpu). On one GPU:
a one-rank run with a real one-member NCCL communicator, and every rank's program of each
several-device graph run alone, its collectives fed from the reference's values and what it
sends compared with the reference (`runtime/multi_gpu.run_rank_alone`). With two (four) GPUs:
the graphs run across them through NCCL, one spawned process per GPU, outputs gathered and
compared with the single-device reference, the replay equal to the first run bit for bit.

Each graph runs *unplanned* (one buffer per value: the NCCL path alone) and through the default
pipeline (memory planned per device).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import optgraph as og
from optgraph.api.program_devices import parallel_inputs, parallel_weights, whole_outputs
from optgraph.codegen.rank_programs import lower_ranks
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import nmse
from tests.support.gpu_support import assert_close, reference, require_gpu, same_bits
from tests.support.placed_graphs import COLLECTIVES, FOUR_DEVICES, ONE_MEMBER, TP_PP

pytestmark = pytest.mark.gpu
cupy = require_gpu()

ROOT = Path(__file__).resolve().parents[2]
GPUS = int(cupy.cuda.runtime.getDeviceCount())
TWO_GPUS = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 GPUs ({GPUS} present)")
FOUR_GPUS = pytest.mark.skipif(GPUS < 4, reason=f"needs 4 GPUs ({GPUS} present)")
PLACED = {"collectives": COLLECTIVES, "tp_pp": TP_PP, "four": FOUR_DEVICES}
LLAMA = {
    "layers": 2, "hidden": 128, "heads": 4, "kv_heads": 2, "ffn": 256, "vocab": 256,
    "dtype": "f16", "batch": 1, "seq": 1, "cache_len": 64, "mode": "decode",
}  # fmt: skip
TP, PP = "tensor-parallel{ways=2}", "pipeline-parallel{stages=2}"


def llama(dtype: str = "f16") -> Graph:
    sys.path.insert(0, str(ROOT / "examples"))
    from gen_llama import generate_llama

    return og.parse(generate_llama(**{**LLAMA, "dtype": dtype}))


def prepared(source: Graph, split: str, planning: str) -> Graph:
    """`source` split by `split` (none: placed already), unplanned or through the default
    pipeline."""
    if planning == "unplanned":
        return run_pipeline(source, split) if split else source
    return og.compile(source, f"{split},default" if split else "default", "cpu").graph


def cases(names: list[str]) -> list[tuple[str, str]]:
    """(name, planning) for each name, unplanned and through the default pipeline."""
    return [(n, p) for n in names for p in ("unplanned", "default")]


def run_ranks(graph: Graph, source: Graph, *, peer_reduce: bool = True) -> list[str]:
    first, nvls = run_twice(graph, source, peer_reduce)
    assert_close(source, first, reference(source)[2])
    return nvls


def run_twice(graph: Graph, source: Graph, peer_reduce: bool) -> tuple[dict[str, Any], list[str]]:
    """The outputs of a run (checked equal to the replay's bit for bit) and each rank's
    NCCL_NVLS_ENABLE; with 2+ ranks and `peer_reduce`, every rank must use the peer kernel."""
    from optgraph.runtime.cuda.peer_reduce import peers_reachable
    from optgraph.runtime.multi.gpus import MultiGpuProgram

    inputs, weights, _ = reference(source)
    sliced = parallel_weights(source, graph, weights)
    pieces = parallel_inputs(source, graph, inputs)  # each rank gets its heads of a split cache
    ranks = lower_ranks(graph)
    with MultiGpuProgram(ranks, sliced, peer_reduce=peer_reduce) as program:
        first = whole_outputs(source, graph, program.run(pieces))
        second = whole_outputs(source, graph, program.run(pieces))
        nvls: list[str] = program.nvls
        reachable = ranks.world > 1 and peers_reachable(range(ranks.world))
        assert program.peer_reduce == [peer_reduce and reachable] * ranks.world
    assert same_bits(first, second), "the replay differs from the first run"
    return first, nvls


@pytest.mark.parametrize("planning", ["unplanned", "default"])
def test_one_rank_with_a_one_member_nccl_communicator(planning: str) -> None:
    source = og.parse(ONE_MEMBER)
    assert run_ranks(prepared(source, "", planning), source) == ["0"]


@pytest.mark.parametrize(("name", "planning"), cases(sorted(PLACED)))
def test_each_rank_alone_on_one_gpu(name: str, planning: str) -> None:
    check_ranks_alone(og.parse(PLACED[name]), "", planning, bound=1e-7)


@pytest.mark.parametrize(("split", "planning"), cases([TP, PP]))
def test_each_llama_rank_alone_on_one_gpu(split: str, planning: str) -> None:
    check_ranks_alone(llama(), split, planning, bound=1e-6)


def check_ranks_alone(source: Graph, split: str, planning: str, bound: float) -> None:
    from optgraph.reference.interpreter import run_reference
    from optgraph.runtime.multi.gpus import run_rank_alone

    graph = prepared(source, split, planning)
    ranks = lower_ranks(graph)
    inputs, weights, _ = reference(source)
    sliced = parallel_weights(source, graph, weights)
    inputs = parallel_inputs(source, graph, inputs)  # the split graph's names: cache pieces
    # The fed values are the split graph's reference values: compare with its outputs (a split
    # f16 graph rounds its partial sums, so its reference differs from the source's a little).
    want = run_reference(graph, inputs, sliced)
    for rank in range(ranks.world):
        alone = run_rank_alone(ranks, rank, inputs, sliced)
        for out, value in alone.outputs.items():
            assert nmse(value, want[out]) <= bound, (rank, out)
        assert set(alone.sent) == set(alone.expected_sent)
        for node, sent in alone.sent.items():
            assert nmse(sent, alone.expected_sent[node]) <= bound, (rank, node)


@TWO_GPUS
@pytest.mark.parametrize(("name", "planning"), cases(["collectives", "tp_pp"]))
def test_two_gpus_run_placed_graphs(name: str, planning: str) -> None:
    source = og.parse(PLACED[name])
    assert run_ranks(prepared(source, "", planning), source) == ["0", "0"]


@FOUR_GPUS
@pytest.mark.parametrize("planning", ["unplanned", "default"])
def test_four_gpus_run_sub_groups(planning: str) -> None:
    source = og.parse(FOUR_DEVICES)
    run_ranks(prepared(source, "", planning), source)


@TWO_GPUS
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize(("split", "planning"), cases([TP, PP]))
def test_two_gpus_run_a_split_llama(split: str, planning: str, dtype: str) -> None:
    source = llama(dtype)
    run_ranks(prepared(source, split, planning), source)


@TWO_GPUS
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_the_peer_all_reduce_equals_nccl_bit_for_bit(dtype: str) -> None:
    # two partial sums, added in f32 and rounded once: NCCL's two-rank sum rounds the same way
    source = llama(dtype)
    graph = prepared(source, TP, "default")
    peer, _ = run_twice(graph, source, peer_reduce=True)
    nccl, _ = run_twice(graph, source, peer_reduce=False)
    assert same_bits(peer, nccl)


@TWO_GPUS
@pytest.mark.parametrize("split", [TP, PP])
def test_og_compile_on_two_gpus(split: str) -> None:
    source = llama()
    inputs, weights, want = reference(source)
    program = og.compile(source, f"{split},default", target="cuda", devices=2)
    try:
        first, second = program.run(inputs, weights), program.run(inputs, weights)
    finally:
        program.close()
    assert_close(source, first, want)
    assert same_bits(first, second)


@TWO_GPUS
def test_cli_run_on_two_gpus_checks_against_the_reference(tmp_path: Path) -> None:
    model = tmp_path / "collectives.ir"
    model.write_text(COLLECTIVES)
    done = subprocess.run(
        [sys.executable, "-m", "optgraph", "run", str(model), "--device", "cuda", "--devices", "2",
         "--check"],
        check=False, capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "MISMATCH" not in done.stdout and done.stdout.count(" ok") >= 4
