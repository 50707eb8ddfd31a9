"""safetensors files read by their headers, every claim checked against the file before use.

    file = SafetensorsFile(Path("model.safetensors"))   # the header read and checked
    file.entries["w"]                                   # TensorEntry(path, dtype "f32", shape, ...)
    array = file.array(file.entries["w"])               # a read-only view of the mapped file
    arrays = read_safetensors("w.safetensors")          # every tensor by name, so

The format: 8 bytes of little-endian header length, that many bytes of JSON (tensor name ->
`dtype`, `shape`, `data_offsets` [begin, end) from the end of the header; `__metadata__` aside),
then the data. Before any byte of data is touched, each claim is checked against the file's
size: the header length (at most `MAX_HEADER` and the file), the JSON (an object, not nested past
the parser's depth), each tensor's dtype (one of `DTYPES`; float8 and the rest refused by name),
shape (at most `MAX_RANK` non-negative integers), offsets (inside the data, in order) and byte
count (shape x itemsize, in Python integers), and that no two tensors overlap. A failure is one
`InputError` naming the file (`label` says what the file is to the user). Arrays are views of
one read-only `np.memmap` per file: nothing is read until used, no copy is made (bf16 through
ml_dtypes).

The checkpoint reader (`frontends/hf_checkpoint.py`) and `--weights X.safetensors`
(`interpreter.load_weights`) both read through here.
"""

from __future__ import annotations

import itertools
import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from optgraph.errors import InputError

# safetensors dtype -> (IR dtype, NumPy dtype)
DTYPES: dict[str, tuple[str, np.dtype[Any]]] = {
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
MAX_RANK = 32  # NumPy's arrays take at most 64 dimensions; no tensor has more than a few
_SAFETENSORS_NAME = {ir: st for st, (ir, _) in DTYPES.items()}


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

    def __init__(self, path: Path, label: str = "safetensors file") -> None:
        self.path = path
        self.label = label
        self.entries, self.data_start, self.header_bytes = self._read_header()
        self._map: np.memmap[Any, np.dtype[np.uint8]] | None = None

    def error(self, message: str) -> InputError:
        return InputError(f"{self.label} '{self.path}': {message}")

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

    def _read_header(self) -> tuple[dict[str, TensorEntry], int, bytes]:
        """(entries by name, where the data section starts, the raw header)."""
        try:
            size = self.path.stat().st_size
            with self.path.open("rb") as handle:
                head = handle.read(8)
                if len(head) < 8:
                    raise self.error(f"{size} bytes, too short for a safetensors header")
                length = int.from_bytes(head, "little")
                if length > min(MAX_HEADER, size - 8):
                    raise self.error(f"header length {length} exceeds the file ({size} bytes)")
                raw = handle.read(length)
        except OSError as err:
            raise self.error(f"cannot read: {err.strerror or err}") from None
        try:
            header = json.loads(raw.decode("utf-8"))
        except (UnicodeDecodeError, json.JSONDecodeError) as err:
            raise self.error(f"the header is not valid JSON ({err})") from None
        except RecursionError:
            raise self.error("the header is not valid JSON (nested too deeply)") from None
        if not isinstance(header, dict):
            raise self.error("the header is not a JSON object")
        data_size = size - 8 - length
        entries: dict[str, TensorEntry] = {}
        for name, value in header.items():
            if name != "__metadata__":
                entries[name] = self._entry(name, value, data_size)
        spans = sorted((e.begin, e.end, e.name) for e in entries.values() if e.end > e.begin)
        for (_, end, first), (begin, _, second) in itertools.pairwise(spans):
            if begin < end:
                raise self.error(f"tensors '{first}' and '{second}' overlap")
        return entries, 8 + length, raw

    def _entry(self, name: str, value: Any, data_size: int) -> TensorEntry:
        if not isinstance(value, dict):
            raise self.error(f"tensor '{name}': not an object in the header")
        kind, shape, offsets = value.get("dtype"), value.get("shape"), value.get("data_offsets")
        if not isinstance(kind, str) or kind not in DTYPES:
            known = ", ".join(DTYPES)
            raise self.error(
                f"tensor '{name}' has dtype {kind!r}, which optgraph cannot read ({known})"
            )
        if not isinstance(shape, list) or not all(_is_size(d) for d in shape):
            raise self.error(f"tensor '{name}': shape {shape!r} is not a list of sizes")
        if len(shape) > MAX_RANK:
            raise self.error(f"tensor '{name}' has {len(shape)} dimensions (at most {MAX_RANK})")
        if (
            not isinstance(offsets, list)
            or len(offsets) != 2
            or not all(_is_size(o) for o in offsets)
            or not offsets[0] <= offsets[1] <= data_size
        ):
            raise self.error(
                f"tensor '{name}': data offsets {offsets!r} outside the data ({data_size} bytes)"
            )
        ir, numpy = DTYPES[kind]
        nbytes = math.prod(shape) * numpy.itemsize  # Python integers: no wrap-around
        if offsets[1] - offsets[0] != nbytes:
            raise self.error(
                f"tensor '{name}': {offsets[1] - offsets[0]} bytes for {ir}{shape} ({nbytes} bytes)"
            )
        return TensorEntry(name, self.path, ir, tuple(shape), offsets[0], offsets[1])


def _is_size(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def read_safetensors(path: str | Path, label: str = "safetensors file") -> dict[str, np.ndarray]:
    """Every tensor of the file by name, each a read-only view of the mapped file."""
    file = SafetensorsFile(Path(path), label)
    return {name: file.array(entry) for name, entry in file.entries.items()}
