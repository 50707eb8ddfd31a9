"""A tiny valid Hugging Face checkpoint directory written by hand, and hypothesis strategies that
damage one of its files at a time, knowing what each holds (tests/bad_input/
test_fuzz_checkpoint_dir.py).

    files = tiny_checkpoint(sharded=True)      # file name -> bytes: config.json, shards, index, ...
    mutant = draw(checkpoint_mutants())        # a DirMutant: what was changed, the files
    mutant.write(folder)

The checkpoint: a 1-layer llama (hidden 16, 2 heads, 1 kv head) in `model.safetensors` or in two
shards listed by `model.safetensors.index.json`, a byte-level BPE `tokenizer.json` (the one
`hf_checkpoints.train_tokenizer` trains), `tokenizer_config.json`, `generation_config.json`.
A mutant changes `config.json` (its text, one key removed or of another type or size, the
model_type), the index (its text, the weight_map, a shard name that leaves the directory, a
missing shard, a tensor in two shards or in the wrong one), a shard (as `fuzz_safetensors`
damages a file), or a tokenizer file.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
from hypothesis import strategies as st

from tests.support import fuzz_safetensors as fs
from tests.support.hf_checkpoints import CHAT_TEMPLATE, train_tokenizer

HIDDEN, FFN, HEADS, KV_HEADS = 16, 32, 2, 1
INDEX = "model.safetensors.index.json"
SHARDS = ("model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors")


@dataclass(frozen=True)
class DirMutant:
    """A damaged checkpoint: what was changed (its repr) and its files (None: left out)."""

    what: str
    files: dict[str, bytes | None] = field(repr=False)

    def write(self, folder: Path) -> None:
        for name, data in self.files.items():
            if data is not None:
                (folder / name).write_bytes(data)


@cache
def _tokenizer_json() -> bytes:
    return str(train_tokenizer().to_str()).encode()


def config(vocab: int) -> dict[str, Any]:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": FFN,
        "num_hidden_layers": 1,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "vocab_size": vocab,
        "max_position_embeddings": 64,
        "rms_norm_eps": 1e-6,
        "tie_word_embeddings": False,
        "bos_token_id": 1,
        "eos_token_id": 2,
        "torch_dtype": "float32",
    }


def tensors(vocab: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    kv = KV_HEADS * HIDDEN // HEADS
    layer = "model.layers.0."
    shapes = {
        "model.embed_tokens.weight": (vocab, HIDDEN),
        layer + "self_attn.q_proj.weight": (HIDDEN, HIDDEN),
        layer + "self_attn.k_proj.weight": (kv, HIDDEN),
        layer + "self_attn.v_proj.weight": (kv, HIDDEN),
        layer + "self_attn.o_proj.weight": (HIDDEN, HIDDEN),
        layer + "mlp.gate_proj.weight": (FFN, HIDDEN),
        layer + "mlp.up_proj.weight": (FFN, HIDDEN),
        layer + "mlp.down_proj.weight": (HIDDEN, FFN),
        layer + "input_layernorm.weight": (HIDDEN,),
        layer + "post_attention_layernorm.weight": (HIDDEN,),
        "model.norm.weight": (HIDDEN,),
        "lm_head.weight": (vocab, HIDDEN),
    }
    return {name: (rng.standard_normal(s) * 0.2).astype(np.float32) for name, s in shapes.items()}


def tiny_checkpoint(sharded: bool = False) -> dict[str, bytes | None]:
    """The files of the checkpoint (module docstring): one weights file, or two shards and their
    index."""
    tokenizer = _tokenizer_json()
    vocab = len(json.loads(tokenizer)["model"]["vocab"])
    arrays = tensors(vocab)
    files: dict[str, bytes | None] = {
        "config.json": json.dumps(config(vocab)).encode(),
        "tokenizer.json": tokenizer,
        "tokenizer_config.json": json.dumps(
            {
                "bos_token": "<s>",
                "eos_token": "</s>",
                "pad_token": "<pad>",
                "chat_template": CHAT_TEMPLATE,
                "clean_up_tokenization_spaces": False,
            }
        ).encode(),
        "generation_config.json": json.dumps({"eos_token_id": 2}).encode(),
    }
    if not sharded:
        files["model.safetensors"] = fs.encode(*fs.tiny_tensors(arrays))
        return files
    names = list(arrays)
    parts = {SHARDS[0]: names[: len(names) // 2], SHARDS[1]: names[len(names) // 2 :]}
    for shard, members in parts.items():
        files[shard] = fs.encode(*fs.tiny_tensors({n: arrays[n] for n in members}))
    weight_map = {name: shard for shard, members in parts.items() for name in members}
    files[INDEX] = json.dumps({"metadata": {}, "weight_map": weight_map}).encode()
    return files


# -- mutants -----------------------------------------------------------------------------------

BAD_TEXTS = [b"", b"{", b"[]", b"1", b"null", b"\xff\xfe{}", b"{" * 100_000, b'{"a": 1}}']
WRONG_VALUES = [
    None, "64", 64.5, -1, 0, 1, 3, True, [64], {"a": 1}, 10**12, 2**63, 10**6, "llama", "",
    float("nan"),
]  # fmt: skip
CONFIG_KEYS = [
    "model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "vocab_size", "max_position_embeddings", "rms_norm_eps",
    "tie_word_embeddings", "torch_dtype", "eos_token_id", "head_dim", "rope_scaling",
    "rope_parameters", "architectures", "sliding_window", "text_config",
]  # fmt: skip
MODEL_TYPES = ["bert", "", "LLAMA", "gpt2", "mixtral", "gemma3", "qwen3_moe", 5, ["llama"]]


def _json(value: Any) -> bytes:
    return json.dumps(value, allow_nan=True).encode()


def _texts(name: str, text: bytes) -> st.SearchStrategy[tuple[str, bytes | None]]:
    """The file cut, replaced by a bad text, or left out."""
    cut = st.integers(0, max(0, len(text) - 1)).map(lambda n: (f"{name} cut at {n}", text[:n]))
    bad = st.sampled_from(BAD_TEXTS).map(lambda b: (f"{name} = {b[:20]!r}", b))
    return cut | bad | st.just((f"{name} left out", None))


@st.composite
def config_changed(draw: st.DrawFn, files: dict[str, bytes | None]) -> DirMutant:
    original = files["config.json"]
    assert original is not None
    values = json.loads(original)
    how = draw(st.sampled_from(["text", "key", "key", "key", "removed", "model_type"]))
    if how == "text":
        what, data = draw(_texts("config.json", original))
        return DirMutant(what, {**files, "config.json": data})
    key = draw(st.sampled_from(CONFIG_KEYS))
    if how == "removed":
        values.pop(key, None)
        what = f"config {key} removed"
    else:
        key = "model_type" if how == "model_type" else key
        value = draw(st.sampled_from(MODEL_TYPES if how == "model_type" else WRONG_VALUES))
        values[key] = value
        what = f"config {key} = {value!r}"
    return DirMutant(what, {**files, "config.json": _json(values)})


@st.composite
def index_changed(draw: st.DrawFn, files: dict[str, bytes | None]) -> DirMutant:
    original = files[INDEX]
    assert original is not None
    index = json.loads(original)
    weight_map: dict[str, Any] = index["weight_map"]
    how = draw(st.sampled_from(["text", "map", "shard", "shard", "missing", "twice", "wrong"]))
    if how == "text":
        what, data = draw(_texts(INDEX, original))
        return DirMutant(what, {**files, INDEX: data})
    name = draw(st.sampled_from(sorted(weight_map)))
    if how == "map":
        value = draw(st.sampled_from([None, [], "x", 1, {"a": 1}]))
        index["weight_map"] = value
        what = f"weight_map = {value!r}"
    elif how == "shard":
        shard = draw(
            st.sampled_from(
                [f"../{SHARDS[0]}", f"/tmp/{SHARDS[0]}", f"sub/{SHARDS[0]}", ".", "..", "",
                 f"{SHARDS[0]}\0", "a\\b", 5, None, ["x"], "absent.safetensors"]
            )
        )  # fmt: skip
        weight_map[name] = shard
        what = f"weight_map[{name!r}] = {shard!r}"
    elif how == "missing":
        shard = weight_map[name]
        return DirMutant(f"{shard} left out", {**files, shard: None})
    elif how == "twice":  # the tensor in both shards' headers
        source = files[weight_map[name]]
        other = SHARDS[1] if weight_map[name] == SHARDS[0] else SHARDS[0]
        assert source is not None
        extra = _with_tensor(files[other], name, source)
        return DirMutant(f"{name} in both shards", {**files, other: extra})
    else:
        other = SHARDS[1] if weight_map[name] == SHARDS[0] else SHARDS[0]
        weight_map[name] = other
        what = f"weight_map[{name!r}] = the other shard"
    return DirMutant(what, {**files, INDEX: _json(index)})


def _with_tensor(shard: bytes | None, name: str, source: bytes) -> bytes:
    """`shard` with tensor `name` of the file `source` added."""
    assert shard is not None
    header, data = _split(shard)
    source_header, source_data = _split(source)
    entry = source_header[name]
    begin, end = entry["data_offsets"]
    header[name] = {**entry, "data_offsets": [len(data), len(data) + end - begin]}
    return fs.encode(header, data + source_data[begin:end])


def _split(raw: bytes) -> tuple[dict[str, Any], bytes]:
    length = int.from_bytes(raw[:8], "little")
    return json.loads(raw[8 : 8 + length]), raw[8 + length :]


@st.composite
def tokenizer_changed(draw: st.DrawFn, files: dict[str, bytes | None]) -> DirMutant:
    name = draw(
        st.sampled_from(["tokenizer.json", "tokenizer_config.json", "generation_config.json",
                         "chat_template.jinja"])
    )  # fmt: skip
    if name == "chat_template.jinja":
        data = draw(st.sampled_from([b"\xff\xfe", b"{% for %}", b"{{ messages[0]['content'] }}"]))
        return DirMutant(f"{name} = {data!r}", {**files, name: data})
    original = files[name]
    assert original is not None
    values = json.loads(original)
    if name == "tokenizer.json" or draw(st.booleans()):
        what, data = draw(_texts(name, original) | st.just((f"{name} = {{}}", b"{}")))
        return DirMutant(what, {**files, name: data})
    key = draw(st.sampled_from(sorted(values) + ["chat_template", "eos_token_id"]))
    value = draw(
        st.sampled_from(
            [*WRONG_VALUES, [{"name": ["x"]}], [{"name": "default", "template": 5}], [1, "x"]]
        )
    )
    values[key] = value
    return DirMutant(f"{name}: {key} = {value!r}", {**files, name: _json(values)})


@st.composite
def shard_damaged(draw: st.DrawFn, files: dict[str, bytes | None]) -> DirMutant:
    """One shard damaged as `fuzz_safetensors` damages a file."""
    shard = draw(st.sampled_from(SHARDS))
    header, data = _split(files[shard] or b"")
    mutant = draw(fs.safetensors_mutants(header, data))
    return DirMutant(f"{shard}: {mutant.what}", {**files, shard: mutant.data})


def checkpoint_mutants() -> st.SearchStrategy[DirMutant]:
    """One structure-aware change to the tiny checkpoint (single-file or sharded), or none."""
    single, sharded = tiny_checkpoint(), tiny_checkpoint(sharded=True)
    return st.one_of(
        st.sampled_from([DirMutant("unchanged", single), DirMutant("unchanged, sharded", sharded)]),
        config_changed(single),
        index_changed(sharded),
        shard_damaged(sharded),
        tokenizer_changed(single),
    )
