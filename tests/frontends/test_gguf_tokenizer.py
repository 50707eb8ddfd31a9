"""frontends/gguf_tokenizer.py: the tokenizer a GGUF file's `tokenizer.ggml.*` metadata describes
encodes and decodes as transformers' tokenizer built from the same file does, for a byte-level BPE
(`gpt2`) and a SentencePiece-style (`llama`) vocabulary: plain text, spaces and new lines, text
outside the vocabulary (bytes, byte fallback), special tokens inside the text; the file's chat
template and end-of-sequence ids come along; other vocabularies are refused by name. And a GGUF
file with a SentencePiece vocabulary generates transformers' tokens and text."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs PyTorch")
pytest.importorskip("transformers", reason="needs transformers")
gguf = pytest.importorskip("gguf", reason="needs the gguf package")

from optgraph.api.text_tokenizer import load_tokenizer
from optgraph.errors import InputError
from optgraph.frontends.gguf_tokenizer import gguf_tokenizer
from optgraph.reference.gguf_file import open_gguf
from tests.frontends import gguf_models
from tests.support import gguf_vocab, hf_checkpoints

TEXTS = [
    "the quick brown fox",
    "Hello world, this is optgraph! ",
    "  two  spaces\nnew line\ttab ünïcödé 😀 日本",
    "<s>special</s> inside",
    "",
]


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A llama GGUF file with each kind of vocabulary (and a chat template)."""
    root = tmp_path_factory.mktemp("gguf_vocab")
    tokenizer = hf_checkpoints.train_tokenizer()
    spm = gguf_vocab.sentencepiece_vocab(hf_checkpoints.SENTENCES)
    template = hf_checkpoints.CHAT_TEMPLATE
    out = {}
    for name, vocab, add in (
        ("bpe", tokenizer.get_vocab_size(),
         lambda w: gguf_vocab.add_byte_level_vocab(w, tokenizer, template)),
        ("spm", len(spm[0]), lambda w: gguf_vocab.add_sentencepiece_vocab(w, spm, template)),
    ):  # fmt: skip
        path = root / f"{name}.gguf"

        def write(vocab: int = vocab, add: Any = add, path: Path = path) -> None:
            with gguf_vocab.vocab_added(add):
                gguf_models.write_gguf(
                    gguf_models.hf_model("llama", vocab_size=vocab), path, "llama"
                )

        hf_checkpoints.quietly(write)
        out[name] = path
    return out


@pytest.mark.parametrize("kind", ["bpe", "spm"])
def test_encodes_and_decodes_as_transformers(files: dict[str, Path], kind: str) -> None:
    from transformers import AutoTokenizer

    path = files[kind]
    reference = hf_checkpoints.quietly(
        lambda: AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    )
    ours = load_tokenizer(path)
    for text in TEXTS:
        ids = reference(text)["input_ids"]
        assert ours.encode(text) == ids, text
        assert ours.decode(ids) == reference.decode(ids, skip_special_tokens=True), text
    assert ours.encode("hi")[0] == 1  # <s> first, as add_bos_token says
    assert ours.eos_ids == (2,) and ours.chat_template == hf_checkpoints.CHAT_TEMPLATE
    messages = [{"role": "user", "content": "hi"}]
    assert ours.chat_prompt(messages) == reference.apply_chat_template(
        messages, tokenize=False, add_generation_prompt=True
    )


def test_sentencepiece_unknown_text_falls_back_to_bytes(files: dict[str, Path]) -> None:
    ours = load_tokenizer(files["spm"])
    ids = ours.encode("é", add_special_tokens=False)
    tokens = [ours.backend.id_to_token(i) for i in ids]
    assert tokens[-2:] == ["<0xC3>", "<0xA9>"] and ours.decode(ids) == "é"


def _rewritten(path: Path, target: Path, changes: dict[str, Any]) -> Path:
    """`path` with some tokenizer keys given other values (the model's tensors kept)."""
    reader = gguf.GGUFReader(str(path))
    writer = gguf.GGUFWriter(str(target), "llama")
    for field in reader.fields.values():
        name = field.name
        if name.startswith("GGUF.") or name == "general.architecture" or name in changes:
            continue
        kind = field.types[0]
        value = field.contents()
        if kind == gguf.GGUFValueType.ARRAY:
            writer.add_key_value(name, value, kind, sub_type=field.types[-1])
        else:
            writer.add_key_value(name, value, kind)
    for name, value in changes.items():
        if value is not None:
            writer.add_string(name, value)
    for tensor in reader.tensors:
        writer.add_tensor(
            tensor.name, tensor.data, raw_shape=list(reversed(tensor.shape.tolist())),
            raw_dtype=tensor.tensor_type,
        )  # fmt: skip
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return target


@pytest.mark.parametrize(
    "changes, message",
    [
        ({"tokenizer.ggml.model": "bert"}, "tokenizer model 'bert' is not supported"),
        ({"tokenizer.ggml.pre": "tekken"}, "tokenizer.ggml.pre 'tekken' is not supported"),
        ({"tokenizer.ggml.model": None}, "no tokenizer in its metadata"),
    ],
)
def test_other_vocabularies_are_refused_by_name(
    files: dict[str, Path], tmp_path: Path, changes: dict[str, Any], message: str
) -> None:
    path = _rewritten(files["bpe"], tmp_path / "other.gguf", changes)
    with pytest.raises(InputError, match=message):
        gguf_tokenizer(open_gguf(path))


def test_a_sentencepiece_gguf_generates_transformers_tokens_and_text(
    files: dict[str, Path], tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    from optgraph.cli.main import main

    path = files["spm"]
    reference = hf_checkpoints.quietly(
        lambda: AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    )
    prompt = reference("the quick brown fox")["input_ids"]
    model = hf_checkpoints.quietly(lambda: gguf_models.load_with_transformers(path))
    expected = gguf_models.greedy_reference(model, prompt, 24)
    out = tmp_path / "out.json"
    argv = ["generate", str(path), "--prompt", "the quick brown fox", "--max-new-tokens", "24"]
    assert (
        main([*argv, "--device", "cpu", "--ignore-eos", "--no-cache", "-q", "--json", str(out)])
        == 0
    )
    result = json.loads(out.read_text())["results"][0]
    assert result["prompt_ids"] == prompt and result["tokens"] == expected
    assert result["text"] == reference.decode(expected, skip_special_tokens=True)
