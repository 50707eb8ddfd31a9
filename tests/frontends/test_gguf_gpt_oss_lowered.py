"""An imported gpt-oss GGUF decode step compiled as for the GPU: the default pipeline, then the
CUDA plan run in the CPU emulator (the attention kernels with sinks and windows, the moe kernels
with the experts' biases, swiglu_oai and MXFP4 stacks) against the reference interpreter; and
`split-experts` cutting the biased stacks (biases with their stacks) with the parts adding up to
the whole."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.api.programs import plan_graph
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.frontends.gguf import from_gguf
from optgraph.passes.manager import run_pipeline
from optgraph.passes.split_experts import expert_weights
from optgraph.reference.interpreter import nmse, random_inputs, run_reference
from tests.frontends import gguf_gpt_oss
from tests.support import cuda_emulator
from tests.support.gpu_support import BOUNDS

pytest.importorskip("gguf")
pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def imported(tmp_path_factory: pytest.TempPathFactory) -> tuple[og.Graph, dict[str, np.ndarray]]:
    path = tmp_path_factory.mktemp("gpt-oss") / "tiny.gguf"
    gguf_gpt_oss.write_gpt_oss_gguf(gguf_gpt_oss.hf_gpt_oss(), path, "MXFP4", "Q8_0")
    return from_gguf(path, cache_len=16, seq=2)


def _inputs(graph: og.Graph) -> dict[str, np.ndarray]:
    """Two new tokens at positions 6 and 7 after 6 cached ones (random cache rows)."""
    inputs = random_inputs(graph, seed=1)
    inputs["tokens"] = np.array([5, 9], np.int32)
    inputs["pos"] = np.array([6, 7], np.int32)
    inputs["kv_len"] = np.array([8], np.int32)
    return inputs


@pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
def test_the_cuda_plan_matches_the_reference(
    imported: tuple[og.Graph, dict[str, np.ndarray]],
) -> None:
    graph, weights = imported
    inputs = _inputs(graph)
    want = run_reference(graph, inputs, weights)
    planned = plan_graph(graph, "default")
    assert sum(n.op == "moe" for n in planned.nodes) == 2
    got = cuda_emulator.run_plan(lower_cuda(planned), inputs, weights, planned)
    for name, value in want.items():
        err = nmse(got[name].astype(np.float32), value.astype(np.float32))
        assert err <= BOUNDS["f32"], (name, err)


def test_split_experts_cuts_the_biases_with_their_stacks(
    imported: tuple[og.Graph, dict[str, np.ndarray]],
) -> None:
    graph, weights = imported
    split = run_pipeline(graph, "split-experts{cpu-experts=1}")
    parts = [n for n in split.nodes if n.op == "moe"]
    assert len(parts) == 4 and all(len(n.operands) == 8 for n in parts)
    types = split.value_types()
    cpu = next(n for n in parts if n.attrs["experts"] == (3, 4))
    assert [types[o].shape[0] for o in cpu.operands[2:]] == [1] * 6
    inputs = _inputs(graph)
    whole = run_reference(graph, inputs, weights)["logits"]
    cut = expert_weights(graph, split, weights)
    held = split.weight_names()
    pieces = run_reference(split, inputs, {n: a for n, a in cut.items() if n in held})["logits"]
    np.testing.assert_allclose(pieces, whole, rtol=1e-5, atol=1e-5)
