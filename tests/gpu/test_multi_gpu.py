"""The several-GPU runtime on real GPUs: NCCL communicators, rank programs captured and replayed.

Runs where CuPy and a GPU are (skipped elsewhere, like the rest of tests/gpu). On one GPU:
a one-rank run with a real one-member NCCL communicator, and every rank's program of each
several-device graph run alone, its collectives fed from the reference's values and what it
sends compared with the reference (`runtime/multi_gpu.run_rank_alone`). With two (four) GPUs:
the graphs run across them through NCCL, one spawned process per GPU, outputs gathered and
compared with the single-device reference, the replay equal to the first run bit for bit.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import optgraph as og
from optgraph.codegen.rank_programs import lower_ranks
from optgraph.ir.graph import Graph
from tests.support.placed_graphs import COLLECTIVES, FOUR_DEVICES, ONE_MEMBER, TP_PP
from tests.support.gpu_support import assert_close, reference, require_gpu, same_bits

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
SPLITS = ["tensor-parallel{ways=2}", "pipeline-parallel{stages=2}"]


def llama(dtype: str = "f16") -> Graph:
    sys.path.insert(0, str(ROOT / "examples"))
    from gen_llama import generate_llama

    return og.parse(generate_llama(**{**LLAMA, "dtype": dtype}))


def planned(text: str) -> Graph:
    return og.compile(og.parse(text), "default", "cpu").graph


def run_ranks(graph: Graph, source: Graph) -> tuple[dict, dict, list]:
    from optgraph.runtime.multi_gpu import MultiGpuProgram

    inputs, weights, want = reference(source)
    with MultiGpuProgram(lower_ranks(graph), weights) as program:
        first, second = program.run(inputs), program.run(inputs)
        nvls = program.nvls
    assert_close(source, first, want)
    assert same_bits(first, second), "the replay differs from the first run"
    return first, want, nvls


def test_one_rank_with_a_one_member_nccl_communicator() -> None:
    graph = planned(ONE_MEMBER)
    _, _, nvls = run_ranks(graph, og.parse(ONE_MEMBER))
    assert nvls == ["0"]


@pytest.mark.parametrize("name", sorted(PLACED))
def test_each_rank_alone_on_one_gpu(name: str) -> None:
    from optgraph.runtime.multi_gpu import run_rank_alone
    from optgraph.runtime.reference import nmse

    source = og.parse(PLACED[name])
    ranks = lower_ranks(planned(PLACED[name]))
    inputs, weights, want = reference(source)
    for rank in range(ranks.world):
        alone = run_rank_alone(ranks, rank, inputs, weights)
        for out, value in alone.outputs.items():
            assert nmse(value, want[out]) <= 1e-7, (rank, out)
        assert set(alone.sent) == set(alone.expected_sent)
        for node, sent in alone.sent.items():
            expected = alone.expected_sent[node]
            assert nmse(sent, expected) <= 1e-7, (rank, node)


@pytest.mark.parametrize("split", SPLITS)
def test_each_llama_rank_alone_on_one_gpu(split: str) -> None:
    from optgraph.runtime.multi_gpu import run_rank_alone
    from optgraph.runtime.reference import nmse

    source = llama()
    program = og.compile(source, f"{split},default", "cpu")
    ranks = lower_ranks(program.graph)
    inputs, weights, want = reference(source)
    from optgraph.program_devices import parallel_weights

    sliced = parallel_weights(source, program.graph, weights)
    for rank in range(ranks.world):
        alone = run_rank_alone(ranks, rank, inputs, sliced)
        for out, value in alone.outputs.items():
            assert nmse(value, want[out]) <= 1e-6, (split, rank, out)
        for node, sent in alone.sent.items():
            assert nmse(sent, alone.expected_sent[node]) <= 1e-6, (split, rank, node)


@TWO_GPUS
@pytest.mark.parametrize("name", ["collectives", "tp_pp"])
def test_two_gpus_run_placed_graphs(name: str) -> None:
    _, _, nvls = run_ranks(planned(PLACED[name]), og.parse(PLACED[name]))
    assert nvls == ["0", "0"]


@FOUR_GPUS
def test_four_gpus_run_sub_groups() -> None:
    run_ranks(planned(FOUR_DEVICES), og.parse(FOUR_DEVICES))


@TWO_GPUS
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("split", SPLITS)
def test_two_gpus_run_a_split_llama(split: str, dtype: str) -> None:
    source = llama(dtype)
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
    model = tmp_path / "tp_pp.ir"
    model.write_text(TP_PP)
    done = subprocess.run(
        [sys.executable, "-m", "optgraph", "run", str(model), "--device", "cuda", "--devices", "2",
         "--check"],
        check=False, capture_output=True, text=True, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "MISMATCH" not in done.stdout and done.stdout.count(" ok") >= 2
