"""A GGUF file's header, walked and bounded field by field: what `gguf_file.open_gguf` reads.

`read_header(path, view, block_sizes)` follows the format (magic, version, the two counts, each
key-value pair, each tensor's info, the alignment padding) and checks every claimed length,
count and offset against the bytes the file really holds before it is believed:

- a string's or an array's claimed size is compared with the bytes left before it is skipped, so
  a length of 2**63 is "damaged", not a loop or an allocation;
- value types are known (0..12); arrays nest at most `MAX_NESTING` deep; keys and tensor names
  are UTF-8 and unique;
- `general.alignment` is a UINT32 power of two; each tensor has 1 to 4 dimensions, each at least
  1, a known ggml type whose block divides its first dimension, an aligned offset, and its bytes
  (counted in Python integers: no wrap-around) inside the file and apart from every other
  tensor's.

The walk keeps only where each value starts (`Header.fields`) and each tensor's place
(`Header.tensors`); `Header.value(view, key)` decodes one value when it is asked for (an array
of numbers as one NumPy view of the file, then a list), so metadata nobody reads costs nothing,
however large. (The `gguf` package's reader, which this replaces, kept a NumPy view of every
array element: about 700 bytes for each byte of a UINT8 array.)

Every failure is one `InputError` naming the file and the field. The layout is the GGUF
specification's (versions 2 and 3; either byte order, told by the version as llama.cpp's readers
tell it).
"""

from __future__ import annotations

import itertools
import struct
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from optgraph.errors import InputError

MAGIC = b"GGUF"
VERSIONS = (2, 3)
MAX_DIMS = 4  # ggml's GGML_MAX_DIMS
MAX_NESTING = 4  # arrays of arrays: llama.cpp writes none; a deeper nesting is damage
DEFAULT_ALIGNMENT = 32
STRING, ARRAY = 8, 9
# value type -> (struct code, bytes) of the scalar types
SCALARS = {
    0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4), 5: ("i", 4),
    6: ("f", 4), 7: ("?", 1), 10: ("Q", 8), 11: ("q", 8), 12: ("d", 8),
}  # fmt: skip
TYPE_NAMES = {
    0: "UINT8", 1: "INT8", 2: "UINT16", 3: "INT16", 4: "UINT32", 5: "INT32", 6: "FLOAT32",
    7: "BOOL", 8: "STRING", 9: "ARRAY", 10: "UINT64", 11: "INT64", 12: "FLOAT64",
}  # fmt: skip


class _Cursor:
    """Reads little- or big-endian fields of `view` from `at`, each checked against the end."""

    def __init__(self, path: Path, view: memoryview, order: str) -> None:
        self.path, self.view, self.order, self.at = path, view, order, 0

    def error(self, message: str) -> InputError:
        return InputError(f"GGUF file '{self.path}': {message}")

    @property
    def left(self) -> int:
        return len(self.view) - self.at

    def need(self, size: int, what: str) -> None:
        if size > self.left:
            raise self.error(
                f"{what} needs {size} bytes at offset {self.at}, the file has {self.left} left "
                "(truncated or damaged)"
            )

    def number(self, code: str, size: int, what: str) -> int:
        self.need(size, what)
        (value,) = struct.unpack_from(self.order + code, self.view, self.at)
        self.at += size
        return int(value)

    def string(self, what: str) -> str:
        length = self.number("Q", 8, f"{what}'s length")
        self.need(length, f"{what} ({length} bytes)")
        raw = bytes(self.view[self.at : self.at + length])
        self.at += length
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError:
            raise self.error(f"{what} is not UTF-8 ({raw[:40]!r})") from None


@dataclass(frozen=True)
class TensorPlace:
    """One tensor's info: name, dimensions innermost first (as stored), ggml type id, and its
    bytes at `offset` from the start of the data section."""

    name: str
    dims: tuple[int, ...]
    kind: int
    offset: int
    n_bytes: int


@dataclass(frozen=True)
class Header:
    """A checked header: where each metadata value starts (key -> (value type, offset)), the
    tensors, where the data section starts, and the byte order ('<' or '>')."""

    path: Path
    fields: dict[str, tuple[int, int]]
    tensors: list[TensorPlace]
    data_start: int
    order: str

    def value(self, view: memoryview, key: str) -> Any:
        """The value of `key`: a number, a bool, a string, or a list (of them, or of lists)."""
        kind, at = self.fields[key]
        cursor = _Cursor(self.path, view, self.order)
        cursor.at = at
        return _read_value(cursor, kind)

    def array_length(self, view: memoryview, key: str) -> int | None:
        """The element count of an array value, without reading its elements."""
        kind, at = self.fields[key]
        if kind != ARRAY:
            return None
        (count,) = struct.unpack_from(self.order + "Q", view, at + 4)
        return int(count)


def read_header(path: Path, view: memoryview, block_sizes: Mapping[int, tuple[int, int]]) -> Header:
    """The checked header of the GGUF file `path` whose bytes are `view` (module docstring);
    `block_sizes`: ggml type id -> (elements, bytes) of one block."""
    if bytes(view[:4]) != MAGIC:
        raise InputError(f"GGUF file '{path}': not a GGUF file (starts with {bytes(view[:4])!r})")
    if len(view) < 24:
        raise InputError(f"GGUF file '{path}': truncated header ({len(view)} bytes)")
    order = "<" if int.from_bytes(view[4:8], "little") & 0xFFFF else ">"
    cursor = _Cursor(path, view, order)
    cursor.at = 4
    version = cursor.number("I", 4, "the version")
    if version not in VERSIONS:
        raise cursor.error(f"version {version} is not supported (versions 2 and 3)")
    tensors = cursor.number("Q", 8, "the tensor count")
    pairs = cursor.number("Q", 8, "the metadata count")
    # A key-value pair takes at least 8 + 4 + 1 bytes, a tensor info 8 + 4 + 8 + 4 + 8.
    for what, count, least in (("metadata", pairs, 13), ("tensor", tensors, 32)):
        if count * least > cursor.left:
            raise cursor.error(
                f"{what} count {count} cannot fit in {len(view)} bytes (truncated or damaged)"
            )
    alignment = DEFAULT_ALIGNMENT
    fields: dict[str, tuple[int, int]] = {}
    for index in range(pairs):
        key = cursor.string(f"metadata key {index}")
        if key in fields:
            raise cursor.error(f"metadata key '{key}' appears twice")
        kind = cursor.number("I", 4, f"the type of '{key}'")
        fields[key] = (kind, cursor.at)
        if key == "general.alignment":
            if kind != 4:
                raise cursor.error(
                    f"'general.alignment' has type {TYPE_NAMES.get(kind, kind)}, not UINT32"
                )
            alignment = cursor.number("I", 4, "'general.alignment'")
            if alignment == 0 or alignment & (alignment - 1):
                raise cursor.error(f"'general.alignment' {alignment} is not a power of two")
            continue
        _skip_value(cursor, kind, f"'{key}'", 0)
    places = _tensor_infos(cursor, tensors, block_sizes)
    start = -(-cursor.at // alignment) * alignment
    _check_places(cursor, places, start, alignment)
    return Header(path, fields, places, start, order)


def _skip_value(cursor: _Cursor, kind: int, what: str, depth: int) -> None:
    """Step over one value of type `kind`, its size checked against the bytes left first."""
    if kind in SCALARS:
        cursor.need(SCALARS[kind][1], what)
        cursor.at += SCALARS[kind][1]
    elif kind == STRING:
        cursor.string(what)
    elif kind == ARRAY:
        item = cursor.number("I", 4, f"{what}'s element type")
        count = cursor.number("Q", 8, f"{what}'s length")
        if item in SCALARS:
            cursor.need(count * SCALARS[item][1], f"{what} ({count} {TYPE_NAMES[item]})")
            cursor.at += count * SCALARS[item][1]
            return
        if item not in (STRING, ARRAY):
            raise cursor.error(f"{what} has elements of unknown type {item}")
        if depth >= MAX_NESTING:
            raise cursor.error(f"{what} nests arrays more than {MAX_NESTING} deep")
        # each element takes at least 8 bytes (a string's length, an array's type and length)
        cursor.need(count * 8, f"{what} ({count} {TYPE_NAMES[item]} elements)")
        for index in range(count):
            _skip_value(cursor, item, f"{what}[{index}]", depth + 1)
    else:
        raise cursor.error(f"{what} has unknown value type {kind}")


def _read_value(cursor: _Cursor, kind: int) -> Any:
    """The value of type `kind` at the cursor (checked by `read_header` already)."""
    if kind in SCALARS:
        code, size = SCALARS[kind]
        (value,) = struct.unpack_from(cursor.order + code, cursor.view, cursor.at)
        cursor.at += size
        return value
    if kind == STRING:
        return cursor.string("a string")
    item = cursor.number("I", 4, "an array's element type")
    count = cursor.number("Q", 8, "an array's length")
    if item in SCALARS:
        code, size = SCALARS[item]
        values = np.frombuffer(cursor.view, np.dtype(cursor.order + code), count, cursor.at)
        cursor.at += count * size
        return values.tolist()
    return [_read_value(cursor, item) for _ in range(count)]


def _tensor_infos(
    cursor: _Cursor, count: int, block_sizes: Mapping[int, tuple[int, int]]
) -> list[TensorPlace]:
    places: list[TensorPlace] = []
    names: set[str] = set()
    for index in range(count):
        name = cursor.string(f"tensor {index}'s name")
        if name in names:
            raise cursor.error(f"tensor '{name}' appears twice")
        names.add(name)
        rank = cursor.number("I", 4, f"tensor '{name}''s dimension count")
        if not 1 <= rank <= MAX_DIMS:
            raise cursor.error(f"tensor '{name}' has {rank} dimensions (1 to {MAX_DIMS})")
        dims = [cursor.number("Q", 8, f"tensor '{name}''s dimensions") for _ in range(rank)]
        kind = cursor.number("I", 4, f"tensor '{name}''s type")
        offset = cursor.number("Q", 8, f"tensor '{name}''s offset")
        shape = list(reversed(dims))  # row-major, as optgraph reads it
        if min(dims) < 1:
            raise cursor.error(f"tensor '{name}' has shape {shape}")
        if kind not in block_sizes:
            raise cursor.error(f"tensor '{name}' has unknown ggml type {kind}")
        block, block_bytes = block_sizes[kind]
        if dims[0] % block:
            raise cursor.error(
                f"tensor '{name}': its rows of {dims[0]} are not whole blocks of {block} "
                f"(type {kind}, shape {shape})"
            )
        elements = 1
        for dim in dims:
            elements *= dim  # Python integers: a product of 2**64 dims stays exact
        places.append(TensorPlace(name, tuple(dims), kind, offset, elements // block * block_bytes))
    return places


def _check_places(cursor: _Cursor, places: list[TensorPlace], start: int, alignment: int) -> None:
    size = len(cursor.view)
    for place in places:
        name, offset, n_bytes = place.name, place.offset, place.n_bytes
        if offset % alignment:
            raise cursor.error(
                f"tensor '{name}': offset {offset} is not a multiple of the alignment {alignment}"
            )
        if start + offset + n_bytes > size:
            raise cursor.error(
                f"tensor '{name}' ({n_bytes} bytes at offset {offset} of the data at {start}) "
                f"lies outside the file ({size} bytes): truncated or damaged"
            )
    ordered = sorted((p.offset, p.offset + p.n_bytes, p.name) for p in places)
    for (_, end, first), (begin, _, second) in itertools.pairwise(ordered):
        if begin < end:
            raise cursor.error(f"tensors '{first}' and '{second}' overlap")
