"""GGUF files (llama.cpp's format): metadata and tensors by name, memory-mapped and checked.

`open_gguf(path)` maps the file and walks its header (`gguf_header.read_header`: magic,
version, every count, length and offset against the bytes the file holds, alignment, tensor
types and shapes); metadata is decoded when asked for, tensors are views of the mapping (no copy
on disk, no whole-file read). Every failure is one `InputError` naming the file; the `gguf`
package (its table of ggml types and block sizes) is imported only here, when a file is opened.

`GGUFFile.array(name)` is the array optgraph's graphs read under the tensor's GGUF name:

- F32, F16 and BF16 tensors as `[rows..., K]` float arrays (views of the mapping);
- quantized tensors (`QUANTIZED`) as their `np.uint8` blocks, one row of blocks per row;
- the rows of `llama` files' `attn_q` / `attn_k` weights and biases back in Hugging Face order:
  llama.cpp's converter interleaves each head's two rotary halves (its "normal" rope rotates
  adjacent pairs), optgraph's rope is rotate-half (NeoX), so row `(h, i, j)` of the file is row
  `(h, j, i)` of the model (`i < head_dim/2`, `j` the half), as transformers' GGUF loader reads
  it back. Rows hold whole blocks, so quantized tensors are permuted the same way. These arrays
  are copies; every other one is a view of the file.

`import_model`'s `optgraph import MODEL.gguf` and `load_weights(MODEL.gguf)` both read through
`array`, so a graph imported from a file runs with that same file as its weights.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ml_dtypes
import numpy as np

from optgraph.errors import InputError
from optgraph.ir.graph import QUANT_BLOCKS
from optgraph.reference.gguf_header import Header, TensorPlace, read_header

FLOATS = {"F32": "f32", "F16": "f16", "BF16": "bf16"}
FLOAT_CODES = {"F32": "f4", "F16": "f2"}  # NumPy's, in the file's byte order
# ggml type name -> the IR dtype of a quantized weight (docs/design.md, "Quantized weights").
QUANTIZED = {
    "Q8_0": "q8_0",
    "Q4_0": "q4_0",
    "Q4_1": "q4_1",
    "Q5_0": "q5_0",
    "Q4_K": "q4_k",
    "Q5_K": "q5_k",
    "Q6_K": "q6_k",
    "MXFP4": "mxfp4",
}
# Architectures whose converter permutes the q and k rows for ggml's adjacent-pair rope.
PERMUTED_QK = frozenset({"llama"})


def quantized_dtypes() -> frozenset[str]:
    """The quantized IR dtypes this optgraph knows (`ir.graph.QUANT_BLOCKS`)."""
    return frozenset(QUANT_BLOCKS)


@dataclass(frozen=True)
class TensorInfo:
    """One tensor: its ggml type name, IR dtype (None: a type optgraph cannot read) and logical
    row-major shape (`[N, K]` for a matrix; blocks run along K)."""

    name: str
    ggml_type: str
    dtype: str | None
    shape: tuple[int, ...]


class GGUFFile:
    """An opened GGUF file: `metadata(key)`, `tensors` (name -> `TensorInfo`), `array(name)`."""

    def __init__(
        self, path: Path, header: Header, data: np.memmap[Any, Any], type_names: dict[int, str]
    ) -> None:
        self.path = path
        self._header = header
        self._data = data  # the whole file, mapped read-only
        self._view = data.data
        self._places: dict[str, TensorPlace] = {t.name: t for t in header.tensors}
        self.tensors: dict[str, TensorInfo] = {}
        known = quantized_dtypes()
        for t in header.tensors:
            kind = type_names[t.kind]
            dtype = FLOATS.get(kind) or (QUANTIZED[kind] if QUANTIZED.get(kind) in known else None)
            self.tensors[t.name] = TensorInfo(t.name, kind, dtype, tuple(reversed(t.dims)))

    def has(self, key: str) -> bool:
        return key in self._header.fields

    def metadata(self, key: str, default: Any = None) -> Any:
        """A number, bool, string or list value; `default` when the key is absent."""
        if key not in self._header.fields:
            return default
        return self._header.value(self._view, key)

    def integer(self, key: str, default: int | None = None) -> int | None:
        """An integer value (not a bool); `default` when absent; an error naming the key for a
        value of another type."""
        value = self.metadata(key, default)
        if value is None or (isinstance(value, int) and not isinstance(value, bool)):
            return value
        raise self.error(f"metadata '{key}' is {_shown(value)}, not an integer")

    def real(self, key: str, default: float) -> float:
        """A finite number; `default` when absent; an error naming the key otherwise."""
        value = self.metadata(key, default)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value):
            return float(value)
        raise self.error(f"metadata '{key}' is {_shown(value)}, not a finite number")

    def array_length(self, key: str) -> int | None:
        """The element count of an array value (the token list), without reading it."""
        if key not in self._header.fields:
            return None
        return self._header.array_length(self._view, key)

    @property
    def architecture(self) -> str:
        arch = self.metadata("general.architecture")
        if not isinstance(arch, str):
            raise self.error("no 'general.architecture' in its metadata")
        return arch

    def error(self, message: str) -> InputError:
        return InputError(f"GGUF file '{self.path}': {message}")

    def array(self, name: str) -> np.ndarray:
        """The tensor `name` as optgraph reads it (module docstring)."""
        info = self.tensors[name]
        if info.dtype is None:
            raise self.error(
                f"tensor '{name}' has type {info.ggml_type}, which optgraph cannot "
                f"read; supported: {', '.join(supported_types())}"
            )
        place = self._places[name]
        begin = self._header.data_start + place.offset
        data: np.ndarray = self._data[begin : begin + place.n_bytes]
        if info.ggml_type in FLOAT_CODES:
            data = data.view(np.dtype(self._header.order + FLOAT_CODES[info.ggml_type]))
        elif info.ggml_type == "BF16":
            data = data.view(ml_dtypes.bfloat16)
        # floats in their logical shape; quantized tensors as rows of blocks
        data = data.reshape(info.shape if info.ggml_type in FLOATS else (*info.shape[:-1], -1))
        if self.architecture in PERMUTED_QK:
            heads = self._permuted_heads(name)
            if heads is not None:
                data = _unpermute_rows(data, heads)
        return data

    def _permuted_heads(self, name: str) -> int | None:
        """The head count of a q or k tensor whose rows the converter permuted, else None."""
        parts = name.split(".")
        if len(parts) != 4 or parts[0] != "blk" or parts[2] not in ("attn_q", "attn_k"):
            return None
        arch = self.architecture
        heads = self.integer(f"{arch}.attention.head_count")
        if parts[2] == "attn_k":
            heads = self.integer(f"{arch}.attention.head_count_kv", heads)
        if heads is None or heads < 1:
            raise self.error(f"'{arch}.attention.head_count' must be a positive integer")
        rows = self.tensors[name].shape[0]
        if rows % (2 * heads):
            raise self.error(
                f"tensor '{name}' has {rows} rows, not a multiple of 2 x {heads} heads"
            )
        return heads


def _shown(value: Any) -> str:
    """A metadata value as a message quotes it: a long array cut short."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _unpermute_rows(data: np.ndarray, heads: int) -> np.ndarray:
    """Rows `(head, i, half)` (llama.cpp's order) to `(head, half, i)`, a copy."""
    rows = data.shape[0]
    grouped = data.reshape(heads, rows // heads // 2, 2, *data.shape[1:])
    return np.ascontiguousarray(grouped.swapaxes(1, 2)).reshape(data.shape)


def supported_types() -> list[str]:
    known = quantized_dtypes()
    return [*FLOATS, *(k for k, v in QUANTIZED.items() if v in known)]


def open_gguf(path: str | Path) -> GGUFFile:
    """Open and check a GGUF file (module docstring); an `InputError` for anything wrong."""
    path = Path(path)
    if not path.is_file():
        raise InputError(f"GGUF file '{path}' not found")
    try:
        from gguf import GGML_QUANT_SIZES
    except ImportError:
        raise InputError(f"reading '{path}' needs the gguf package (pip install gguf)") from None
    blocks = {int(kind): sizes for kind, sizes in GGML_QUANT_SIZES.items()}
    names = {int(kind): kind.name for kind in GGML_QUANT_SIZES}
    try:
        if path.stat().st_size < 24:
            read_header(path, memoryview(path.read_bytes()), blocks)  # refuses it
        data = np.memmap(path, np.uint8, "r")
    except OSError as err:
        raise InputError(f"GGUF file '{path}': cannot be read ({err.strerror or err})") from None
    header = read_header(path, data.data, blocks)
    return GGUFFile(path, header, data, names)
