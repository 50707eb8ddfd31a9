"""Tokenizer metadata in test GGUF files, as llama.cpp's converter writes it: a byte-level BPE
vocabulary (`tokenizer.ggml.model = gpt2`: tokens, merges, token types) from a `tokenizers`
tokenizer, or a SentencePiece-style one (`llama`: "▁" tokens, scores, `<0xNN>` byte tokens).

    with vocab_added(lambda w: add_byte_level_vocab(w, tokenizer)):
        write_gguf(model, path, "llama")        # tests/frontends/gguf_models.py's writer

`vocab_added` adds the keys to every `gguf.GGUFWriter` that writes its header inside the block,
so the model writers of `tests/frontends/gguf_*.py` are used as they are.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

NORMAL, UNKNOWN, CONTROL, BYTE = 1, 2, 3, 6


@contextmanager
def vocab_added(add: Callable[[Any], None]) -> Iterator[None]:
    import gguf

    original = gguf.GGUFWriter.write_header_to_file

    def write_header(self: Any, *args: Any, **kwargs: Any) -> Any:
        add(self)
        return original(self, *args, **kwargs)

    gguf.GGUFWriter.write_header_to_file = write_header  # type: ignore[method-assign]
    try:
        yield
    finally:
        gguf.GGUFWriter.write_header_to_file = original  # type: ignore[method-assign]


def add_byte_level_vocab(
    writer: Any, tokenizer: Any, chat_template: str | None = None, special_ids: bool = True
) -> None:
    """`tokenizer` (a byte-level BPE with `<pad>`, `<s>`, `</s>` at 0, 1, 2) as a gpt2 vocabulary;
    `special_ids=False` leaves the eos and pad ids to a model writer that adds them itself."""
    data = json.loads(tokenizer.to_str())
    vocab = data["model"]["vocab"]
    tokens = [t for t, _ in sorted(vocab.items(), key=lambda item: item[1])]
    merges = [m if isinstance(m, str) else " ".join(m) for m in data["model"]["merges"]]
    specials = {a["content"] for a in data["added_tokens"] if a["special"]}
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(tokens)
    writer.add_token_merges(merges)
    writer.add_token_types([CONTROL if t in specials else NORMAL for t in tokens])
    writer.add_bos_token_id(1)
    if special_ids:
        writer.add_eos_token_id(2)
        writer.add_pad_token_id(0)
    writer.add_add_bos_token(True)
    if chat_template is not None:
        writer.add_chat_template(chat_template)


def sentencepiece_vocab(
    sentences: list[str], size: int = 300
) -> tuple[list[str], list[float], list[int]]:
    """(tokens, scores, types) of a SentencePiece-style BPE vocabulary of about `size` tokens:
    `<unk>`, `<s>`, `</s>`, the 256 byte tokens, then pieces learned from `sentences` with "▁"
    for spaces, each scored by when it was learned (earlier: higher)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    learner = Tokenizer(models.BPE())
    learner.pre_tokenizer = pre_tokenizers.Metaspace(replacement="\u2581", prepend_scheme="first")
    trainer = trainers.BpeTrainer(vocab_size=size - 259, show_progress=False)
    learner.train_from_iterator(sentences, trainer)
    learned = sorted(learner.get_vocab().items(), key=lambda item: item[1])
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    scores = [0.0] * len(tokens)
    types = [UNKNOWN, CONTROL, CONTROL] + [BYTE] * 256
    for rank, (piece, _) in enumerate(learned):
        tokens.append(piece)
        scores.append(-float(rank))
        types.append(NORMAL)
    return tokens, scores, types


def add_sentencepiece_vocab(
    writer: Any, vocab: tuple[list[str], list[float], list[int]], chat_template: str | None = None
) -> None:
    tokens, scores, types = vocab
    writer.add_tokenizer_model("llama")
    writer.add_token_list(tokens)
    writer.add_token_scores(scores)
    writer.add_token_types(types)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_add_bos_token(True)
    if chat_template is not None:
        writer.add_chat_template(chat_template)
