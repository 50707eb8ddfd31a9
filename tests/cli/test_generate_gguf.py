"""`optgraph generate MODEL.gguf` against transformers' GGUF loading: for every architecture the
GGUF importer builds (llama, Mistral written as llama, qwen2, qwen3, phi3, gemma2, gemma3), a
random-weight file with a byte-level BPE vocabulary in its `tokenizer.ggml.*` metadata generates
the same 32 greedy tokens as transformers' `generate(do_sample=False)` on the model it loads from
the file, and the same text through the tokenizer transformers builds from the same metadata."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch")
pytest.importorskip("transformers", reason="needs transformers")
pytest.importorskip("gguf", reason="needs the gguf package")

from optgraph.cli.main import main
from tests.frontends import gguf_gemma, gguf_models, gguf_phi3
from tests.support import gguf_vocab, hf_checkpoints

PROMPT = "the quick brown fox"
NEW = 32
ARCHITECTURES = ("llama", "mistral", "qwen2", "qwen3", "phi3", "gemma2", "gemma3")


def _model(arch: str, vocab: int) -> Any:
    if arch in ("gemma2", "gemma3"):
        model = gguf_gemma.gemma_model(arch, vocab_size=vocab)
        with torch.no_grad():  # rows that dominate the tied head repeat one token
            model.get_input_embeddings().weight.mul_(0.1)
        return model
    if arch == "phi3":
        return gguf_phi3.phi3_model(vocab_size=vocab)
    return gguf_models.hf_model(arch, vocab_size=vocab)


def write_file(arch: str, tokenizer: Any, path: Path) -> Path:
    """`arch`'s random model as a GGUF file with `tokenizer` as its vocabulary."""
    model = _model(arch, tokenizer.get_vocab_size())
    ids = arch not in ("phi3", "gemma2", "gemma3")  # those writers add eos and pad themselves
    with gguf_vocab.vocab_added(lambda w: gguf_vocab.add_byte_level_vocab(w, tokenizer, None, ids)):
        if arch == "phi3":
            gguf_phi3.write_phi3_gguf(model, path)
        elif arch.startswith("gemma"):
            gguf_gemma.write_gemma_gguf(model, path, arch)
        else:
            gguf_models.write_gguf(model, path, "llama" if arch == "mistral" else arch)
    return path


@pytest.fixture(scope="module", params=ARCHITECTURES)
def gguf_file(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, list[int], str]:
    """(architecture, file, transformers' 32 greedy tokens, their text)."""
    arch = request.param
    tokenizer = hf_checkpoints.train_tokenizer()
    path = tmp_path_factory.mktemp("gguf") / f"{arch}.gguf"

    def build() -> tuple[list[int], str]:
        from transformers import AutoTokenizer

        write_file(arch, tokenizer, path)
        text_tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        prompt = text_tokenizer(PROMPT)["input_ids"]
        model = gguf_models.load_with_transformers(path)
        tokens = gguf_models.greedy_reference(model, prompt, NEW)
        return tokens, text_tokenizer.decode(tokens, skip_special_tokens=True)

    tokens, text = hf_checkpoints.quietly(build)
    return arch, path, tokens, text


def test_greedy_tokens_and_text_equal_transformers_gguf_loading(
    gguf_file: tuple[str, Path, list[int], str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    arch, path, expected, text = gguf_file
    out = tmp_path / "out.json"
    argv = ["generate", str(path), "--prompt", PROMPT, "--max-new-tokens", str(NEW)]
    argv += ["--device", "cpu", "--ignore-eos", "--json", str(out), "--no-cache", "-q"]
    assert main(argv) == 0
    result = json.loads(out.read_text())["results"][0]
    assert result["tokens"] == expected, arch
    assert len(set(expected)) >= 8  # a real sequence, not one token repeated
    assert result["text"] == text
    assert capsys.readouterr().out == text + "\n"
