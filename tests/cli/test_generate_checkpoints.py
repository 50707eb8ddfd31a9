"""`optgraph generate CHECKPOINT-DIR` against transformers: for every architecture generate
supports, a random-weight checkpoint written by `save_pretrained` (with a locally trained BPE
tokenizer) generates the same 32 greedy tokens as `generate(do_sample=False)` on transformers'
own loading of the same directory, and the same decoded text, on the CPU in float32."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs PyTorch")
pytest.importorskip("transformers", reason="needs transformers")
pytest.importorskip("accelerate", reason="needs accelerate")

from optgraph.cli.main import main
from tests.support import hf_checkpoints as hf

PROMPT = "the quick brown fox"  # 5 tokens with <s>: the 16-token prefill bucket
NEW = 32


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return hf.train_tokenizer()


@pytest.fixture(scope="module", params=sorted(hf.ARCHITECTURES))
def checkpoint(
    request: pytest.FixtureRequest, tokenizer: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, list[int], str]:
    """(architecture, directory, transformers' 32 greedy tokens, their decoded text)."""
    arch = request.param
    directory = tmp_path_factory.mktemp("checkpoints") / arch

    def build() -> tuple[list[int], str]:
        from transformers import AutoTokenizer

        hf.write_checkpoint(directory, arch, tokenizer)
        text_tokenizer = AutoTokenizer.from_pretrained(str(directory))
        prompt = text_tokenizer(PROMPT)["input_ids"]
        tokens = hf.reference_tokens(hf.load_reference(directory), prompt, NEW)
        return tokens, text_tokenizer.decode(tokens, skip_special_tokens=True)

    tokens, text = hf.quietly(build)
    return arch, directory, tokens, text


def test_greedy_tokens_and_text_equal_transformers(
    checkpoint: tuple[str, Path, list[int], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    arch, directory, expected, text = checkpoint
    out = tmp_path / "out.json"
    argv = ["generate", str(directory), "--prompt", PROMPT, "--max-new-tokens", str(NEW)]
    argv += ["--device", "cpu", "--ignore-eos", "--json", str(out), "--no-cache"]
    assert hf.quietly(lambda: main(argv)) == 0
    result = json.loads(out.read_text())["results"][0]
    assert result["tokens"] == expected, arch
    assert len(set(expected)) >= 8  # a real sequence, not one token repeated
    assert result["text"] == text
    stdout, stderr = capsys.readouterr()
    assert stdout == text + "\n"  # streamed piece by piece, the same text
    assert f"{len(result['prompt_ids'])} prompt tokens, {NEW} new" in stderr
    assert result["ttft_s"] > 0 and result["decode_tokens_per_s"] > 0
