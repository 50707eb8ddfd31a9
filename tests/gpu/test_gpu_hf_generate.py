"""examples/hf_generate.py on the GPU: a Hugging Face Llama's prefill and static-cache decode step
compiled for cuda (the decode step bound once, its caches updated in place) generate the same 32
greedy tokens as transformers' `generate`, in float32."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from tests.support.gpu_support import require_gpu

pytestmark = pytest.mark.gpu
require_gpu()
pytest.importorskip("transformers", reason="the Hugging Face tests need transformers")

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import hf_generate


@pytest.mark.parametrize(
    "sizes",
    [
        ["--layers", "2", "--hidden", "64", "--heads", "4", "--kv-heads", "2"],
        ["--layers", "4", "--hidden", "256", "--heads", "8", "--kv-heads", "2", "--vocab", "1024"],
    ],
)
def test_generation_on_the_gpu_equals_transformers_token_for_token(sizes: list[str]) -> None:
    args = hf_generate._parse([*sizes, "--device", "cuda"])
    model = hf_generate.build_model(args)
    steps = hf_generate.import_steps(model, args.prompt_len, args.prompt_len + args.new_tokens)
    prompt = np.random.default_rng(5).integers(0, args.vocab, (1, args.prompt_len))
    tokens = hf_generate.generate_cuda(steps, prompt, args.new_tokens)
    assert tokens == hf_generate.reference_tokens(model, prompt, args.new_tokens)


def test_the_script_runs_on_the_gpu_and_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert hf_generate.main(["--device", "cuda"]) == 0
    out = capsys.readouterr().out
    assert "optgraph (cuda)" in out and "equal token for token" in out
