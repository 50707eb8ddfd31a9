"""A quantized MoE GGUF file (Qwen3-MoE, llama.cpp's Q4_K_M mix: q4_k gate and up experts, q6_k
down) with some experts of every layer on the CPU: `split-experts` cuts the stored blocks by
expert, `split-backends` runs the host part on the CPU (its products on the CPU kernels), and the
decode step equals the reference of the imported step within the kernels' f32 round-off;
`optgraph run --weights FILE.gguf -p ... --check` runs it from the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.cli.main import main
from optgraph.frontends.gguf import from_gguf
from optgraph.reference.interpreter import random_inputs, run_reference
from tests.frontends import gguf_moe

pytest.importorskip("gguf")
pytest.importorskip("transformers")

PIPELINE = (
    "verify,dce,cse,split-experts{cpu-experts=3},transpose-weights,fuse,"
    "assign-streams{max-streams=2},split-backends,insert-sync,analyze-lifetimes,plan-memory,"
    "check-races"
)
BOUND = 1e-4  # the CPU kernels' products against the reference (tests/frontends/test_gguf_moe.py)


def _file(tmp_path: Path) -> Path:
    model = gguf_moe.hf_moe_model("qwen3moe", **gguf_moe.K_QUANT_SIZES)
    return gguf_moe.write_moe_gguf(model, tmp_path / "qwen3moe.gguf", "qwen3moe", "Q4_K_M")


def test_quantized_experts_on_the_cpu_from_a_gguf_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path)
    graph, weights = from_gguf(path, cache_len=16)
    program = og.compile(graph, PIPELINE, target="cpu")
    host = {w.name: w.type for w in program.graph.weights if w.placement == "host"}
    assert host["blk.0.ffn_gate_exps.weight.e5_8"].dtype == "q4_k"
    assert host["blk.1.ffn_down_exps.weight.e5_8"].dtype == "q6_k"
    assert all(t.shape[0] == 3 for t in host.values()) and len(host) == 6
    parts = [n.ann.backend for n in program.graph.nodes if n.op == "moe"]
    assert parts == ["cuda", "cpu", "cuda", "cpu"]
    inputs = random_inputs(graph, seed=1)
    want = run_reference(graph, inputs, weights)
    for seed in (None, 1):
        got = program.run(inputs, weights, seed=seed)
        for name, value in want.items():
            scale = max(1.0, float(np.abs(value).max()))
            assert np.abs(np.asarray(got[name]) - value).max() <= BOUND * scale, name
    ir = tmp_path / "model.ir"
    ir.write_text(og.print_graph(graph))
    argv = ["run", str(ir), "--weights", str(path), "-p", PIPELINE, "--device", "cpu", "--check"]
    assert main([*argv, "-q"]) == 0
    assert "Traceback" not in capsys.readouterr().err
