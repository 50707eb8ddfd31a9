"""Text in and out of token ids for `generate`: a `tokenizers` tokenizer, its special tokens, its
chat template, read from a checkpoint directory, a `tokenizer.json`, or a GGUF file's metadata.

    tokenizer = load_tokenizer("checkpoint-dir")          # tokenizer.json + tokenizer_config.json
    ids = tokenizer.encode("Hello")                        # special tokens as the file adds them
    text = tokenizer.decode(ids)                           # special tokens skipped
    prompt = tokenizer.chat_prompt([{"role": "user", "content": "Hi"}])
    tokenizer = load_tokenizer("model.gguf")              # tokenizer.ggml.* (gguf_tokenizer.py)

Decoding follows transformers' fast tokenizers: `skip_special_tokens=True`, and the
`clean_up_tokenization_spaces` of `tokenizer_config.json` when it is true. `Detokenizer` turns a
growing list of ids into the new text of each step (holding back a partly decoded character).
End-of-sequence ids: `generation_config.json`, else `config.json`, else the tokenizer's
`eos_token`. The chat template (`chat_template.jinja`, or `tokenizer_config.json`'s
`chat_template`, or the GGUF's `tokenizer.chat_template`) renders as `apply_chat_template` does
(`chat_template.py`).

Not handled: slow (SentencePiece `.model`) tokenizers without a `tokenizer.json`.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from optgraph.errors import InputError

SPECIAL_NAMES = (
    "bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token",
)  # fmt: skip
# transformers' clean_up_tokenization: spaces before punctuation and in English contractions
_CLEANUPS = (
    (" .", "."), (" ?", "?"), (" !", "!"), (" ,", ","), (" ' ", "'"), (" n't", "n't"),
    (" 'm", "'m"), (" 's", "'s"), (" 've", "'ve"), (" 're", "'re"),
)  # fmt: skip


@dataclass
class TextTokenizer:
    """A tokenizer (`tokenizers.Tokenizer`) and what generation needs around it."""

    backend: Any
    special_tokens: dict[str, str] = field(default_factory=dict)  # bos_token -> "<s>", ...
    eos_ids: tuple[int, ...] = ()
    chat_template: str | None = None
    clean_up_spaces: bool = False
    source: str = ""

    def encode(self, text: str, add_special_tokens: bool = True) -> list[int]:
        ids: list[int] = self.backend.encode(text, add_special_tokens=add_special_tokens).ids
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        text: str = self.backend.decode(list(ids), skip_special_tokens=True)
        if self.clean_up_spaces:
            for before, after in _CLEANUPS:
                text = text.replace(before, after)
        return text

    def chat_prompt(self, messages: Sequence[Mapping[str, Any]]) -> str:
        """The prompt text of `messages` with the generation prompt added (apply_chat_template's
        `tokenize=False, add_generation_prompt=True`)."""
        if self.chat_template is None:
            raise InputError(f"--chat: the tokenizer of {self.source} has no chat template")
        from optgraph.api.chat_template import render_chat

        return render_chat(self.chat_template, messages, self.special_tokens)

    @property
    def vocab_size(self) -> int:
        size: int = self.backend.get_vocab_size(with_added_tokens=True)
        return size


class Detokenizer:
    """The text of a growing token list, a piece at a time: `push(id)` returns what the text
    gained (empty while the last bytes do not yet make a whole character), `flush()` what is left
    at the end. Each push decodes only the tokens since the last piece and the piece before them
    (their context: a SentencePiece space, a byte sequence cut in two), so a long generation costs
    the same a token as a short one."""

    def __init__(self, tokenizer: TextTokenizer) -> None:
        self.tokenizer = tokenizer
        self.ids: list[int] = []
        self.shown = ""
        self._prefix = 0  # the window: ids[_prefix:_read] were shown, as the last piece
        self._read = 0

    def push(self, token: int) -> str:
        self.ids.append(token)
        before = self.tokenizer.decode(self.ids[self._prefix : self._read])
        now = self.tokenizer.decode(self.ids[self._prefix :])
        if now.endswith("\ufffd") or len(now) <= len(before) or not now.startswith(before):
            return ""
        new = now[len(before) :]
        self._prefix, self._read = self._read, len(self.ids)
        self.shown += new
        return new

    def flush(self) -> str:
        """The rest of the whole list's text (held-back bytes as decoded, replacement
        characters included)."""
        text = self.tokenizer.decode(self.ids)
        new = text[len(self.shown) :] if text.startswith(self.shown) else ""
        self.shown += new
        return new


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"tokenizer: '{path}' cannot be read ({err})") from None
    except RecursionError:
        raise InputError(f"tokenizer: '{path}' is nested too deeply") from None
    return data if isinstance(data, dict) else {}


def _token_text(value: Any) -> str | None:
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and isinstance(value.get("content"), str):
        return str(value["content"])
    return None


def _ids(value: Any) -> tuple[int, ...]:
    if isinstance(value, int) and not isinstance(value, bool):
        return (value,)
    if isinstance(value, list):
        return tuple(v for v in value if isinstance(v, int) and not isinstance(v, bool))
    return ()


def _template(config: Mapping[str, Any], directory: Path) -> str | None:
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        try:
            return jinja.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as err:
            raise InputError(f"tokenizer: '{jinja}' cannot be read ({err})") from None
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: the "default" one
        named = [t for t in template if isinstance(t, dict) and t.get("name") == "default"]
        template = named[0].get("template") if named else None
    return template if isinstance(template, str) else None


def from_directory(directory: str | Path, tokenizer_json: Path | None = None) -> TextTokenizer:
    """The tokenizer of a checkpoint directory (or of `tokenizer_json` with the directory's
    configs beside it)."""
    from tokenizers import Tokenizer

    root = Path(directory)
    path = tokenizer_json or root / "tokenizer.json"
    if not path.is_file():
        raise InputError(
            f"tokenizer: no tokenizer.json in '{root}' (give --tokens, or --tokenizer FILE)"
        )
    try:
        backend = Tokenizer.from_file(str(path))
    except Exception as err:  # noqa: BLE001 - the tokenizers library raises its own kinds
        raise InputError(f"tokenizer: '{path}' cannot be read ({err})") from None
    config = _read_json(root / "tokenizer_config.json")
    special = {k: t for k in SPECIAL_NAMES if (t := _token_text(config.get(k))) is not None}
    eos = _ids(_read_json(root / "generation_config.json").get("eos_token_id"))
    eos = eos or _ids(_read_json(root / "config.json").get("eos_token_id"))
    if not eos and "eos_token" in special:
        found = backend.token_to_id(special["eos_token"])
        eos = () if found is None else (found,)
    return TextTokenizer(
        backend,
        special,
        eos,
        _template(config, root),
        bool(config.get("clean_up_tokenization_spaces", False)),
        str(path),
    )


def from_gguf_file(path: str | Path) -> TextTokenizer:
    """The tokenizer a GGUF file's `tokenizer.ggml.*` metadata describes."""
    from optgraph.frontends.gguf_tokenizer import gguf_tokenizer
    from optgraph.reference.gguf_file import open_gguf

    built = gguf_tokenizer(open_gguf(path))
    return TextTokenizer(
        built.tokenizer,
        built.special_tokens,
        built.eos_ids,
        built.chat_template,
        False,
        str(path),
    )


def load_tokenizer(path: str | Path) -> TextTokenizer:
    """The tokenizer of a checkpoint directory, a `tokenizer.json` file or a `.gguf` file."""
    target = Path(path)
    if target.is_dir():
        return from_directory(target)
    if target.suffix == ".gguf":
        return from_gguf_file(target)
    if target.is_file():
        return from_directory(target.parent, target)
    raise InputError(f"tokenizer: '{target}' not found")
