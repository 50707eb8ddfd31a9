"""The tokenizer a GGUF file describes in its `tokenizer.ggml.*` metadata, as a `tokenizers`
library `Tokenizer`.

    built = gguf_tokenizer(open_gguf("model.gguf"))
    built.tokenizer.encode("Hello world").ids, built.eos_ids, built.chat_template

Two vocabularies (`tokenizer.ggml.model`):

- `gpt2`: byte-level BPE (GPT-2, Llama 3, Qwen 2, gpt-oss): `tokens` already spelled in the byte-to-
  character alphabet, `merges` as "left right" lines; the text is split first by the pattern of
  `tokenizer.ggml.pre` (`PRE_SPLITS`: gpt2's own, llama-bpe, qwen2, gpt-4o, ...), then byte-level
  encoded;
- `llama`: SentencePiece-style BPE (Llama 1/2, Mistral, Gemma): `tokens` with "▁" for spaces,
  `scores` (a higher score merges first) and `token_type` (6: `<0xNN>` byte tokens, the
  fallback for characters outside the vocabulary); no merges in the file, so they are derived:
  every split of a token into two tokens of the vocabulary, ranked by the token's score. Spaces
  become "▁", with one prepended to the text (not after special tokens in it) unless
  `tokenizer.ggml.add_space_prefix` is false, as transformers' Llama tokenizer does.

Tokens of type 3 (control: `<s>`, `<|eot_id|>`) are special tokens (matched whole, skipped when
decoding with `skip_special_tokens`); type 4 (user-defined) are matched whole too. The BOS token
is prepended when `tokenizer.ggml.add_bos_token` says so (default: yes for `llama`, no for
`gpt2`), EOS appended with `add_eos_token`. End-of-sequence ids: `eos_token_id` and
`eot_token_id`. The chat template: `tokenizer.chat_template`.

Not handled (refused by name): other vocabularies (`bert`, `t5`, `rwkv`, ...), `gpt2` files
whose `pre` is not in `PRE_SPLITS`, Unigram SentencePiece models with a precompiled charsmap.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from optgraph.errors import InputError
from optgraph.reference.gguf_file import GGUFFile

CONTROL, USER_DEFINED, BYTE = 3, 4, 6
GPT2_SPLIT = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"
LLAMA3_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
QWEN2_SPLIT = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
    r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# o200k (gpt-4o, gpt-oss): words as an upper-case run then a lower-case one (or the reverse),
# each with an optional contraction; digits in threes; punctuation runs keep a trailing / or EOL
GPT4O_SPLIT = (
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*"
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
    r"|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# tokenizer.ggml.pre -> the pattern that splits text before byte-level BPE
PRE_SPLITS = {
    "default": GPT2_SPLIT,
    "gpt2": GPT2_SPLIT,
    "gpt-2": GPT2_SPLIT,
    "llama-bpe": LLAMA3_SPLIT,
    "llama3": LLAMA3_SPLIT,
    "llama-v3": LLAMA3_SPLIT,
    "smollm": LLAMA3_SPLIT,
    "qwen2": QWEN2_SPLIT,
    "gpt-4o": GPT4O_SPLIT,
}
SPACE = "\u2581"


@dataclass
class GGUFTokenizer:
    """A built tokenizer and what generation needs of the file's tokenizer metadata."""

    tokenizer: Any  # tokenizers.Tokenizer
    special_tokens: dict[str, str] = field(default_factory=dict)  # bos_token -> "<s>", ...
    eos_ids: tuple[int, ...] = ()
    chat_template: str | None = None


def gguf_tokenizer(gguf: GGUFFile) -> GGUFTokenizer:
    """The tokenizer of `gguf`'s metadata (module docstring); an `InputError` naming the file for
    a vocabulary it cannot build."""
    kind = gguf.metadata("tokenizer.ggml.model")
    tokens = gguf.metadata("tokenizer.ggml.tokens")
    if kind is None or tokens is None:
        raise gguf.error("no tokenizer in its metadata (tokenizer.ggml.model, .tokens)")
    if not isinstance(tokens, list) or not all(isinstance(t, str) for t in tokens):
        raise gguf.error("tokenizer.ggml.tokens is not a list of strings")
    types = _numbers(gguf, "tokenizer.ggml.token_type", True) or [1] * len(tokens)
    if len(types) != len(tokens):
        raise gguf.error(f"{len(types)} token types for {len(tokens)} tokens")
    if kind not in ("gpt2", "llama"):
        raise gguf.error(
            f"tokenizer model {kind!r} is not supported (gpt2: byte-level BPE, llama: "
            "SentencePiece BPE)"
        )
    try:
        if kind == "gpt2":
            tokenizer = _byte_level(gguf, tokens)
        else:
            tokenizer = _sentencepiece(gguf, tokens, types)
    except InputError:
        raise
    except Exception as err:  # noqa: BLE001 - the tokenizers library raises its own kinds
        raise gguf.error(f"its {kind} vocabulary cannot be built ({err})") from None
    _add_special(tokenizer, tokens, types)
    special = _special_names(gguf, tokens)
    _add_bos_eos(gguf, tokenizer, special, default_bos=kind == "llama")
    eos = []
    for key in ("tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"):
        value = gguf.metadata(key)
        if isinstance(value, int) and 0 <= value < len(tokens) and value not in eos:
            eos.append(value)
    template = gguf.metadata("tokenizer.chat_template")
    return GGUFTokenizer(
        tokenizer, special, tuple(eos), template if isinstance(template, str) else None
    )


def _numbers(gguf: GGUFFile, key: str, integers: bool) -> list[Any] | None:
    """The array `key` of integers (or of any numbers); None when absent."""
    value = gguf.metadata(key)
    if value is None:
        return None
    kinds = (int,) if integers else (int, float)
    if not isinstance(value, list) or not all(
        isinstance(v, kinds) and not isinstance(v, bool) for v in value
    ):
        raise gguf.error(f"{key} is not a list of {'integers' if integers else 'numbers'}")
    return value


def _library() -> Any:
    try:
        import tokenizers
    except ImportError:
        raise InputError("a GGUF file's tokenizer needs the tokenizers package") from None
    return tokenizers


def _byte_level(gguf: GGUFFile, tokens: list[str]) -> Any:
    tk = _library()
    merges = gguf.metadata("tokenizer.ggml.merges")
    if not isinstance(merges, list):
        raise gguf.error("a gpt2 tokenizer without tokenizer.ggml.merges")
    pairs = []
    for line in merges:
        parts = line.split(" ") if isinstance(line, str) else []
        if len(parts) != 2:
            raise gguf.error(f"tokenizer.ggml.merges has the line {line!r}, not 'left right'")
        pairs.append((parts[0], parts[1]))
    pre = gguf.metadata("tokenizer.ggml.pre", "default")
    split = PRE_SPLITS.get(pre) if isinstance(pre, str) else None
    if split is None:
        raise gguf.error(
            f"tokenizer.ggml.pre {pre!r} is not supported; supported: {', '.join(PRE_SPLITS)}"
        )
    vocab = {token: index for index, token in enumerate(tokens)}
    # Llama 3's tokenizer takes a piece that is a token whole, before any merge
    model = tk.models.BPE(vocab=vocab, merges=pairs, ignore_merges=split == LLAMA3_SPLIT)
    tokenizer = tk.Tokenizer(model)
    tokenizer.pre_tokenizer = tk.pre_tokenizers.Sequence(
        [
            tk.pre_tokenizers.Split(tk.Regex(split), behavior="isolated", invert=False),
            tk.pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    tokenizer.decoder = tk.decoders.ByteLevel()
    return tokenizer


def sentencepiece_merges(
    tokens: list[str], scores: list[float], types: list[int]
) -> list[tuple[str, str]]:
    """The merges a SentencePiece BPE vocabulary implies: each normal token split into two
    tokens of the vocabulary, the token with the higher score merged first (then the lower id,
    then the shorter left part)."""
    vocab = {t: i for i, t in enumerate(tokens) if types[i] not in (CONTROL, BYTE)}
    # Only cuts into two lengths the vocabulary has are looked up: a token of a million
    # characters (a damaged file) costs a few lookups, not a million slices of it.
    lengths = sorted({len(t) for t in vocab})
    ranked = []
    for token, index in vocab.items():
        for cut in lengths:
            if cut >= len(token):
                break
            left, right = token[:cut], token[cut:]
            if left in vocab and right in vocab:
                ranked.append((-scores[index], index, cut, left, right))
    ranked.sort()
    return [(left, right) for *_, left, right in ranked]


def _sentencepiece(gguf: GGUFFile, tokens: list[str], types: list[int]) -> Any:
    tk = _library()
    scores = _numbers(gguf, "tokenizer.ggml.scores", False)
    if scores is None or len(scores) != len(tokens):
        raise gguf.error("a llama tokenizer needs tokenizer.ggml.scores, one per token")
    unk = gguf.metadata("tokenizer.ggml.unknown_token_id", 0)
    unk_token = tokens[unk] if isinstance(unk, int) and 0 <= unk < len(tokens) else None
    vocab = {token: index for index, token in enumerate(tokens)}
    merges = sentencepiece_merges(tokens, [float(s) for s in scores], types)
    model = tk.models.BPE(
        vocab=vocab, merges=merges, unk_token=unk_token, fuse_unk=True, byte_fallback=True
    )
    tokenizer = tk.Tokenizer(model)
    prefix = bool(gguf.metadata("tokenizer.ggml.add_space_prefix", True))
    tokenizer.pre_tokenizer = tk.pre_tokenizers.Metaspace(
        replacement=SPACE, prepend_scheme="first" if prefix else "never", split=False
    )
    decoders = [
        tk.decoders.Replace(SPACE, " "),
        tk.decoders.ByteFallback(),
        tk.decoders.Fuse(),
    ]
    if prefix:
        decoders.append(tk.decoders.Strip(content=" ", left=1, right=0))
    tokenizer.decoder = tk.decoders.Sequence(decoders)
    return tokenizer


def _add_special(tokenizer: Any, tokens: list[str], types: list[int]) -> None:
    tk = _library()
    control = [
        tk.AddedToken(t, normalized=False, special=True)
        for t, kind in zip(tokens, types)
        if kind == CONTROL
    ]
    user = [
        tk.AddedToken(t, normalized=False, special=False)
        for t, kind in zip(tokens, types)
        if kind == USER_DEFINED
    ]
    if control:
        tokenizer.add_special_tokens(control)
    if user:
        tokenizer.add_tokens(user)


def _special_names(gguf: GGUFFile, tokens: list[str]) -> dict[str, str]:
    names = {}
    for name, key in (
        ("bos_token", "bos_token_id"),
        ("eos_token", "eos_token_id"),
        ("unk_token", "unknown_token_id"),
        ("pad_token", "padding_token_id"),
    ):
        value = gguf.metadata(f"tokenizer.ggml.{key}")
        if isinstance(value, int) and 0 <= value < len(tokens):
            names[name] = tokens[value]
    return names


def _add_bos_eos(
    gguf: GGUFFile, tokenizer: Any, special: dict[str, str], default_bos: bool
) -> None:
    tk = _library()
    add_bos = bool(gguf.metadata("tokenizer.ggml.add_bos_token", default_bos))
    add_eos = bool(gguf.metadata("tokenizer.ggml.add_eos_token", False))
    parts, used = [], []
    if add_bos and "bos_token" in special:
        parts.append(special["bos_token"])
        used.append(special["bos_token"])
    parts.append("$A")
    if add_eos and "eos_token" in special:
        parts.append(special["eos_token"])
        used.append(special["eos_token"])
    if used:
        ids = [(t, tokenizer.token_to_id(t)) for t in dict.fromkeys(used)]
        tokenizer.post_processor = tk.processors.TemplateProcessing(
            single=" ".join(parts), special_tokens=ids
        )
