"""A Hugging Face checkpoint directory: its config and its tensors by name, memory-mapped.

    checkpoint = open_checkpoint("llama-dir")     # config.json + *.safetensors (+ index)
    checkpoint.config["model_type"]               # "llama"
    checkpoint.tensors["model.norm.weight"]       # TensorEntry(file, dtype "f32", shape, ...)
    array = checkpoint.array("model.norm.weight") # a read-only view of the mapped file

The directory holds `config.json` and either `model.safetensors` or shards listed by
`model.safetensors.index.json` (its `weight_map`: tensor name -> shard file); without either,
every `*.safetensors` file in it. Each file's header (8 bytes of little-endian length, then JSON:
name -> dtype, shape, data offsets) is read and checked against the file's size: a truncated
file, overlapping or out-of-range offsets, a shape that disagrees with its byte count, an unknown
dtype, or a shard the index names but the directory lacks is one `InputError` naming the file.
Arrays are views of one read-only `np.memmap` per file: nothing is read until used, and no second
copy is made (bf16 through ml_dtypes).

`fingerprint()` is what a compiled program depends on: the config text and every tensor's name,
dtype and shape (not the values: the weights are read at run time, never compiled in).

Not handled: `.bin` (pickle) checkpoints, and the float8 dtypes (both refused by name).
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from optgraph.errors import InputError

# safetensors dtype -> (IR dtype, NumPy dtype)
DTYPES: dict[str, tuple[str, np.dtype]] = {
    "F32": ("f32", np.dtype(np.float32)),
    "F16": ("f16", np.dtype(np.float16)),
    "BF16": ("bf16", np.dtype(ml_dtypes.bfloat16)),
    "F64": ("f64", np.dtype(np.float64)),
    "I64": ("i64", np.dtype(np.int64)),
    "I32": ("i32", np.dtype(np.int32)),
    "I16": ("i16", np.dtype(np.int16)),
    "I8": ("i8", np.dtype(np.int8)),
    "U8": ("u8", np.dtype(np.uint8)),
    "BOOL": ("bool", np.dtype(np.bool_)),
}
MAX_HEADER = 100 * 1024 * 1024  # safetensors' own limit on the JSON header
INDEX = "model.safetensors.index.json"
SINGLE = "model.safetensors"


@dataclass(frozen=True)
class TensorEntry:
    """One tensor of a safetensors file: where its bytes are and what they hold."""

    name: str
    path: Path
    dtype: str  # IR spelling (f32, f16, bf16, ...)
    shape: tuple[int, ...]
    begin: int  # byte offsets in the data section (after the header)
    end: int


class SafetensorsFile:
    """One `.safetensors` file: its checked header, and arrays mapped from it on demand."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.entries, self.data_start, self.header_bytes = _read_header(path)
        self._map: np.memmap | None = None

    def array(self, entry: TensorEntry) -> np.ndarray:
        if self._map is None:
            size = self.path.stat().st_size - self.data_start
            if size == 0:
                self._map = np.zeros(0, np.uint8).view(np.memmap)
            else:
                self._map = np.memmap(self.path, np.uint8, "r", offset=self.data_start, shape=size)
        numpy = DTYPES[_SAFETENSORS_NAME[entry.dtype]][1]
        raw = self._map[entry.begin : entry.end]
        return (
            np.ndarray(entry.shape, numpy, buffer=raw) if raw.size else np.zeros(entry.shape, numpy)
        )


_SAFETENSORS_NAME = {ir: st for st, (ir, _) in DTYPES.items()}


def _error(path: Path, message: str) -> InputError:
    return InputError(f"checkpoint file '{path}': {message}")


def _read_header(path: Path) -> tuple[dict[str, TensorEntry], int, bytes]:
    """(entries by name, where the data section starts, the raw header) of a checked file."""
    try:
        size = path.stat().st_size
        with path.open("rb") as handle:
            head = handle.read(8)
            if len(head) < 8:
                raise _error(path, f"{size} bytes, too short for a safetensors header")
            length = int.from_bytes(head, "little")
            if length > min(MAX_HEADER, size - 8):
                raise _error(path, f"header length {length} exceeds the file ({size} bytes)")
            raw = handle.read(length)
    except OSError as err:
        raise _error(path, f"cannot read: {err.strerror}") from None
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as err:
        raise _error(path, f"the header is not valid JSON ({err})") from None
    if not isinstance(header, dict):
        raise _error(path, "the header is not a JSON object")
    data_size = size - 8 - length
    entries: dict[str, TensorEntry] = {}
    for name, value in header.items():
        if name == "__metadata__":
            continue
        entries[name] = _entry(path, name, value, data_size)
    spans = sorted((e.begin, e.end, e.name) for e in entries.values() if e.end > e.begin)
    for (_, end, first), (begin, _, second) in itertools.pairwise(spans):
        if begin < end:
            raise _error(path, f"tensors '{first}' and '{second}' overlap")
    return entries, 8 + length, raw


def _entry(path: Path, name: str, value: Any, data_size: int) -> TensorEntry:
    if not isinstance(value, dict):
        raise _error(path, f"tensor '{name}': not an object in the header")
    kind, shape, offsets = value.get("dtype"), value.get("shape"), value.get("data_offsets")
    if kind not in DTYPES:
        known = ", ".join(DTYPES)
        raise _error(
            path, f"tensor '{name}' has dtype {kind!r}, which optgraph cannot read ({known})"
        )
    if not isinstance(shape, list) or not all(isinstance(d, int) and d >= 0 for d in shape):
        raise _error(path, f"tensor '{name}': shape {shape!r} is not a list of sizes")
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1] <= data_size
    ):
        raise _error(
            path, f"tensor '{name}': data offsets {offsets!r} outside the data ({data_size} bytes)"
        )
    ir, numpy = DTYPES[kind]
    nbytes = math.prod(shape) * numpy.itemsize
    if offsets[1] - offsets[0] != nbytes:
        raise _error(
            path,
            f"tensor '{name}': {offsets[1] - offsets[0]} bytes for {ir}{shape} ({nbytes} bytes)",
        )
    return TensorEntry(name, path, ir, tuple(shape), offsets[0], offsets[1])


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
    try:
        config_text = config_path.read_text(encoding="utf-8")
        config = json.loads(config_text)
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"checkpoint '{root}': config.json cannot be read ({err})") from None
    if not isinstance(config, dict):
        raise InputError(f"checkpoint '{root}': config.json is not a JSON object")
    paths = _weight_files(root)
    files = {p: SafetensorsFile(p) for p in paths}
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
    return Checkpoint(root, config, config_text, tensors, files)


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
    try:
        index = json.loads((root / INDEX).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise InputError(f"checkpoint '{root}': {INDEX} cannot be read ({err})") from None
    weight_map = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(weight_map, dict) or not all(
        isinstance(v, str) and "/" not in v and v not in ("", ".", "..")
        for v in weight_map.values()
    ):
        raise InputError(f"checkpoint '{root}': {INDEX} has no valid weight_map")
    return weight_map


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
