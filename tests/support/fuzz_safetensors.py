"""A tiny valid safetensors file and hypothesis strategies that damage one part of it at a time,
knowing the format (tests/bad_input/test_fuzz_safetensors.py, test_fuzz_checkpoint_dir.py).

    header, data = tiny_tensors()             # four tensors: f32, f16, bf16, i64
    raw = encode(header, data)                # 8-byte length, the JSON header, the data
    mutant = draw(safetensors_mutants())      # a Mutant: what was changed, the file's bytes

The format (the safetensors specification): a little-endian uint64 N, N bytes of UTF-8 JSON
(tensor name -> {"dtype", "shape", "data_offsets": [begin, end)} from the end of the header,
and an optional "__metadata__" of strings), then the data. A mutant changes the length field,
the JSON text, one tensor's entry (its dtype, shape, offsets, a key removed, another type), the
metadata, or cuts the file.
"""

from __future__ import annotations

import json
import struct
from typing import Any

import ml_dtypes
import numpy as np
from hypothesis import strategies as st

from tests.support.fuzz_checks import HUGE, Mutant

NAMES = {np.dtype(np.float32): "F32", np.dtype(np.float16): "F16", np.dtype(np.int64): "I64"}
NAMES[np.dtype(ml_dtypes.bfloat16)] = "BF16"
ARRAYS = {
    "w": np.arange(6, dtype=np.float32).reshape(2, 3),
    "h": np.linspace(-1, 1, 4).astype(np.float16),
    "b": np.array([0.5, -2, 3], dtype=ml_dtypes.bfloat16),
    "i": np.array([7, -7], dtype=np.int64),
}
IR = """graph g {
  input %x : f32[2,3]
  weight %w : f32[2,3]
  weight %h : f16[4]
  weight %b : bf16[3]
  weight %i : i64[2]
  %y = add(%x, %w) : f32[2,3]
  output %y
}
"""  # a graph that reads the four tensors as weights (`optgraph run --weights`)


def tiny_tensors(arrays: dict[str, np.ndarray] | None = None) -> tuple[dict[str, Any], bytes]:
    """(header, data) of `arrays` (default `ARRAYS`), laid out one after another."""
    header: dict[str, Any] = {"__metadata__": {"format": "np"}}
    data = b""
    for name, array in (arrays or ARRAYS).items():
        raw = np.ascontiguousarray(array).tobytes()
        offsets = [len(data), len(data) + len(raw)]
        header[name] = {
            "dtype": NAMES[array.dtype],
            "shape": list(array.shape),
            "data_offsets": offsets,
        }
        data += raw
    return header, data


def encode(header: Any, data: bytes) -> bytes:
    text = json.dumps(header).encode()
    return struct.pack("<Q", len(text)) + text + data


WRONG_DTYPES = ["F8_E4M3", "F8_E5M2", "F4", "C64", "U64", "f32", "", 5, None, ["F32"], {"F32": 1}]
WRONG_SHAPES = [
    [-1], [-2, 3], [2**62, 2**3], [2**64], [3.0], [True, 3], ["3"], [[2, 3]], None, 6, "2,3",
    [0] * 100, [1] * 40, [], [6], [3, 2], [1, 2, 3], [2, 3, 0],
]  # fmt: skip
WRONG_VALUES = [1, "x", [], None, [1, 2], True]


def _offsets(data_size: int) -> st.SearchStrategy[Any]:
    begins = [0, 8, 24, 36, data_size, data_size + 1, 2**63, -8]
    pairs = st.tuples(st.sampled_from(begins), st.sampled_from([*begins, 2**64]))
    odd = st.sampled_from([None, [0], [0, 8, 16], [0.0, 24.0], [False, True], "0,24", {"0": 24}])
    return pairs.map(list) | odd


@st.composite
def entry_changed(draw: st.DrawFn, header: dict[str, Any], data: bytes) -> Mutant:
    """One tensor's entry: another dtype, shape, offsets, a key removed, or not an object."""
    name = draw(st.sampled_from(sorted(k for k in header if k != "__metadata__")))
    entry = dict(header[name])
    what = draw(st.sampled_from(["dtype", "shape", "data_offsets", "removed", "value"]))
    changed: Any = entry
    if what == "dtype":
        changed["dtype"] = draw(st.sampled_from(WRONG_DTYPES + list(NAMES.values())))
    elif what == "shape":
        changed["shape"] = draw(st.sampled_from(WRONG_SHAPES))
    elif what == "data_offsets":
        changed["data_offsets"] = draw(_offsets(len(data)))
    elif what == "removed":
        del changed[draw(st.sampled_from(sorted(entry)))]
    else:
        changed = draw(st.sampled_from(WRONG_VALUES))
    return Mutant(f"{name}: {changed!r}", encode({**header, name: changed}, data))


@st.composite
def length_changed(draw: st.DrawFn, raw: bytes) -> Mutant:
    (old,) = struct.unpack_from("<Q", raw)
    values = [0, 1, 2, old - 1, old + 1, len(raw) - 8, len(raw) - 7, 100 * 1024 * 1024 + 1, *HUGE]
    new = draw(st.sampled_from(values) | st.integers(0, 2**64 - 1))
    return Mutant(f"header length {new}", struct.pack("<Q", new) + raw[8:])


@st.composite
def text_changed(draw: st.DrawFn, header: dict[str, Any], data: bytes) -> Mutant:
    """The JSON text: cut, not an object, not UTF-8, nested deep, padded, with trailing bytes."""
    text = json.dumps(header).encode()
    cut = draw(st.integers(0, len(text) - 1))
    choice = draw(
        st.sampled_from(
            [
                text[:cut],
                b"[]",
                b"1",
                b'"x"',
                b"null",
                b"\xff\xfe" + text,
                b'{"a": ' + b"[" * 100_000,
                b"{" * 100_000,
                text + b"   ",  # spaces after the JSON: valid, as writers pad it
                text + b"}",
                text.replace(b'"w"', b'"h"'),  # a tensor named twice: JSON keeps the last
            ]
        )
    )
    return Mutant(f"header text {choice[:40]!r}", struct.pack("<Q", len(choice)) + choice + data)


@st.composite
def metadata_changed(draw: st.DrawFn, header: dict[str, Any], data: bytes) -> Mutant:
    value = draw(st.sampled_from([1, [], None, {"a": 1}, {"a": [1]}, "x"]))
    return Mutant(f"__metadata__ {value!r}", encode({**header, "__metadata__": value}, data))


@st.composite
def truncated(draw: st.DrawFn, raw: bytes) -> Mutant:
    header_end = 8 + struct.unpack_from("<Q", raw)[0]
    cut = draw(
        st.sampled_from([0, 7, 8, header_end - 1, header_end, len(raw) - 1])
        | st.integers(0, len(raw) - 1)
    )
    return Mutant(f"cut at {cut}", raw[:cut])


def safetensors_mutants(
    header: dict[str, Any] | None = None, data: bytes | None = None
) -> st.SearchStrategy[Mutant]:
    """One structure-aware change to the file of `header` and `data` (default
    `tiny_tensors()`), or the file unchanged."""
    if header is None or data is None:
        header, data = tiny_tensors()
    raw = encode(header, data)
    return st.one_of(
        st.just(Mutant("unchanged", raw)),
        entry_changed(header, data),
        length_changed(raw),
        text_changed(header, data),
        metadata_changed(header, data),
        truncated(raw),
    )
