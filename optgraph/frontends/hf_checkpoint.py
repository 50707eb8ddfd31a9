"""A Hugging Face checkpoint directory: its config and its tensors by name, memory-mapped.

    checkpoint = open_checkpoint("llama-dir")     # config.json + *.safetensors (+ index)
    checkpoint.config["model_type"]               # "llama"
    checkpoint.tensors["model.norm.weight"]       # TensorEntry(file, dtype "f32", shape, ...)
    array = checkpoint.array("model.norm.weight") # a read-only view of the mapped file

The directory holds `config.json` and either `model.safetensors` or shards listed by
`model.safetensors.index.json` (its `weight_map`: tensor name -> shard file); without either,
every `*.safetensors` file in it. Each file's header is read and checked against the file's
size (`reference/safetensors_file.py`: a truncated file, overlapping or out-of-range offsets, a
shape that disagrees with its byte count, an unknown dtype is one `InputError` naming the file),
and so is the index (a shard the directory lacks, a shard name that leaves the directory, a
tensor in two shards or not in the shard it names). Arrays are views of one read-only
`np.memmap` per file: nothing is read until used, and no second copy is made.

`fingerprint()` is what a compiled program depends on: the config text and every tensor's name,
dtype and shape (not the values: the weights are read at run time, never compiled in).

Not handled: `.bin` (pickle) checkpoints, and the float8 dtypes (both refused by name).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from optgraph.errors import InputError
from optgraph.reference.safetensors_file import SafetensorsFile, TensorEntry

INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"
# config.json keys that give a size of some tensor, and those that count layers (each of which
# has tensors of its own): what `_check_sizes` bounds by the checkpoint's tensors
SIZE_KEYS = (
    "hidden_size", "intermediate_size", "vocab_size", "num_attention_heads", "num_key_value_heads",
    "head_dim", "moe_intermediate_size", "shared_expert_intermediate_size", "num_experts",
    "num_local_experts", "num_experts_per_tok", "n_embd", "n_head", "n_inner",
)  # fmt: skip
LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers")


@dataclass
class Checkpoint:
    """A checkpoint directory (module docstring)."""

    directory: Path
    config: dict[str, Any]
    config_text: str
    tensors: dict[str, TensorEntry]
    files: dict[Path, SafetensorsFile]

    def array(self, name: str) -> np.ndarray:
        entry = self.tensors[name]
        return self.files[entry.path].array(entry)

    def fingerprint(self) -> str:
        """A hash of what compiled programs depend on: the config and each tensor's name, dtype
        and shape."""
        digest = hashlib.sha256(self.config_text.encode())
        for name in sorted(self.tensors):
            entry = self.tensors[name]
            digest.update(f"\n{name}:{entry.dtype}:{list(entry.shape)}".encode())
        return digest.hexdigest()

    def error(self, message: str) -> InputError:
        return InputError(f"checkpoint '{self.directory}': {message}")


def is_checkpoint_directory(path: str | Path) -> bool:
    return Path(path).is_dir() and (Path(path) / "config.json").is_file()


def open_checkpoint(directory: str | Path) -> Checkpoint:
    """The checkpoint in `directory`, its config and every tensor header checked."""
    root = Path(directory)
    if not root.is_dir():
        raise InputError(f"checkpoint '{root}': not a directory")
    config_path = root / "config.json"
    if not config_path.is_file():
        raise InputError(f"checkpoint '{root}': no config.json")
    config_text, config = read_json(root, "config.json")
    if not isinstance(config, dict):
        raise InputError(f"checkpoint '{root}': config.json is not a JSON object")
    paths = _weight_files(root)
    files = {p: SafetensorsFile(p, "checkpoint file") for p in paths}
    tensors: dict[str, TensorEntry] = {}
    for file in files.values():
        for name, entry in file.entries.items():
            if name in tensors:
                raise InputError(
                    f"checkpoint '{root}': tensor '{name}' is in both "
                    f"{tensors[name].path.name} and {entry.path.name}"
                )
            tensors[name] = entry
    _check_index(root, tensors)
    _check_sizes(root, config, tensors)
    return Checkpoint(root, config, config_text, tensors, files)


def read_json(root: Path, name: str) -> tuple[str, Any]:
    """(text, value) of the JSON file `name` in the checkpoint `root`; an `InputError` naming it
    for a file that is unreadable, not UTF-8, not JSON, or nested past the parser's depth."""
    try:
        text = (root / name).read_text(encoding="utf-8")
        return text, json.loads(text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"checkpoint '{root}': {name} cannot be read ({err})") from None
    except RecursionError:
        raise InputError(f"checkpoint '{root}': {name} is nested too deeply") from None


def _check_sizes(root: Path, config: Mapping[str, Any], tensors: Mapping[str, TensorEntry]) -> None:
    """The config's sizes (`SIZE_KEYS`, `LAYER_KEYS`, in it or its `text_config`) are counts, and
    no larger than the checkpoint's tensors could hold: transformers builds a model of them
    before any tensor is compared, so a hidden_size of 10**12 must not reach it."""
    values = sum(math.prod(entry.shape) for entry in tensors.values())
    for part in (config, config.get("text_config")):
        if not isinstance(part, dict):
            continue
        for key in (*SIZE_KEYS, *LAYER_KEYS):
            value = part.get(key)
            if value is None:
                continue
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise InputError(
                    f"checkpoint '{root}': config.json: {key} is {value!r}, not a size"
                )
            bound, what = (len(tensors), "tensors") if key in LAYER_KEYS else (values, "values")
            if value > bound:
                raise InputError(
                    f"checkpoint '{root}': config.json: {key} {value} is more than the "
                    f"checkpoint's {bound} {what} could hold"
                )


def _weight_files(root: Path) -> list[Path]:
    index = root / INDEX
    if index.is_file():
        shards = sorted(set(_index_map(root).values()))
        missing = [s for s in shards if not (root / s).is_file()]
        if missing:
            raise InputError(
                f"checkpoint '{root}': {INDEX} lists shard(s) the directory lacks: "
                + ", ".join(missing)
            )
        return [root / s for s in shards]
    if (root / SINGLE).is_file():
        return [root / SINGLE]
    found = sorted(root.glob("*.safetensors"))
    if not found:
        pickled = sorted(p.name for p in root.glob("*.bin"))
        hint = f" ({', '.join(pickled)}: PyTorch pickles, not read)" if pickled else ""
        raise InputError(f"checkpoint '{root}': no .safetensors weights{hint}")
    return found


def _index_map(root: Path) -> Mapping[str, str]:
    weight_map = read_json(root, INDEX)[1]
    weight_map = weight_map.get("weight_map") if isinstance(weight_map, dict) else None
    if not isinstance(weight_map, dict):
        raise InputError(f"checkpoint '{root}': {INDEX} has no weight_map object")
    for name, shard in weight_map.items():
        if not _is_file_name(shard):
            raise InputError(
                f"checkpoint '{root}': {INDEX} puts tensor '{name}' in {shard!r}, which is not "
                "a file name in the directory"
            )
    return weight_map


def _is_file_name(shard: Any) -> bool:
    """A plain name of a file in the directory: no separator, no parent, nothing NUL."""
    return (
        isinstance(shard, str)
        and not {"/", "\\", "\0"} & set(shard)
        and shard not in ("", ".", "..")
    )


def _check_index(root: Path, tensors: Mapping[str, TensorEntry]) -> None:
    """Every tensor the index names is in the shard it names."""
    if not (root / INDEX).is_file():
        return
    for name, shard in _index_map(root).items():
        entry = tensors.get(name)
        if entry is None or entry.path.name != shard:
            raise InputError(
                f"checkpoint '{root}': {INDEX} puts tensor '{name}' in {shard}, which lacks it"
            )
