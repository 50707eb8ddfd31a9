"""Constants: weights whose value the graph itself holds (`Weight.value`).

An importer folds what it can compute at import (an `arange`, a cache write's offset, top-k's
positions, a buffer) into arrays. The small ones are written into the graph with their values,
so that a graph run with no weights file (`optgraph run MODEL.ir`, `Program.run(inputs)`) still
computes the model, not random data in their place:

    weight %kv_offset.3 : i64[1] = [1]
    weight %positions.7 : i64[1,4] host !{device = 1} = [0, 1, 2, 3]

A constant is a weight in every other respect (passes place, stream and plan it as one; the
runtimes bind it as one). Its value, row-major, is kept as the bytes of the array in its dtype
(so graphs compare exactly; NaN is stored as the one canonical quiet NaN); `constant_array`
gives it back. Arrays given under a constant's name are used instead of its value
(`with_constants` fills in only what is not given): a weights file written by an older import
still runs.

Printed values: integers; floats as the shortest decimal that reads back to the same value in
the dtype (bf16 through f32), `inf`, `-inf`, `nan`; bools as `true` / `false`. Quantized
weights are never constants. Importers inline constants of at most `INLINE_LIMIT` elements;
larger ones (rope tables, masks) stay plain weights that the import's weights file holds.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import TYPE_CHECKING

from optgraph.ir.graph import DTYPES, Graph, TensorType, Weight

if TYPE_CHECKING:  # NumPy is imported where a constant's value is touched, not with the IR
    import numpy as np

__all__ = [
    "INLINE_LIMIT",
    "array_bytes",
    "constant_array",
    "constant_bytes",
    "format_constant",
    "is_constant",
    "with_constants",
]

INLINE_LIMIT = 4096  # elements: constants an importer writes into the graph, at most

Number = int | float | bool

_FLOATS = ("f32", "f16", "bf16")


@cache
def _numpy(dtype: str) -> np.dtype:
    """The NumPy dtype of an IR dtype (NumPy and ml_dtypes imported on the first call: printing
    or parsing a graph without constants, and the CLI's front door, never load them)."""
    import ml_dtypes
    import numpy as np

    kinds = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16, "i32": np.int32,
             "i64": np.int64, "bool": np.bool_}  # fmt: skip
    found: np.dtype = np.dtype(kinds[dtype])
    return found


def is_constant(weight: Weight) -> bool:
    return weight.value is not None


def _canonical(array: np.ndarray) -> np.ndarray:
    """Little-endian, row-major, NaNs as the dtype's canonical quiet NaN."""
    import numpy as np

    array = np.ascontiguousarray(array)
    if array.dtype.kind == "f" or array.dtype == _numpy("bf16"):
        nan = np.isnan(array.astype(np.float32))
        if nan.any():
            array = array.copy()
            array[nan] = np.array(np.nan, array.dtype)
    return array.astype(array.dtype.newbyteorder("<"), copy=False)


def array_bytes(array: np.ndarray, t: TensorType) -> bytes:
    """The value bytes of a constant of type `t` holding `array` (cast to t's dtype)."""
    import numpy as np

    if t.dtype not in DTYPES:
        raise ValueError(f"a constant cannot have dtype {t.dtype}")
    typed = np.asarray(array).astype(_numpy(t.dtype), copy=False)
    if typed.shape != t.shape:
        raise ValueError(f"a constant of type {t} holds an array of shape {typed.shape}")
    return _canonical(typed).tobytes()


def constant_bytes(t: TensorType, values: Sequence[Number]) -> bytes:
    """The value bytes of a constant of type `t` from its values as written (row-major); a
    `ValueError` saying what does not fit: the count, a float or bool for an integer dtype, a
    number for a bool, an integer out of the dtype's range."""
    import numpy as np

    if t.dtype not in DTYPES:
        raise ValueError(f"a constant cannot have dtype {t.dtype}")
    if len(values) != t.numel:
        raise ValueError(f"{len(values)} values for {t} ({t.numel} elements)")
    if t.dtype == "bool":
        if any(not isinstance(v, bool) for v in values):
            raise ValueError(f"a {t} constant takes true and false only")
    elif t.dtype in _FLOATS:
        if any(isinstance(v, bool) for v in values):
            raise ValueError(f"a {t} constant takes numbers, not true or false")
    else:
        if any(not isinstance(v, int) or isinstance(v, bool) for v in values):
            raise ValueError(f"a {t} constant takes integers only")
        info = np.iinfo(_numpy(t.dtype))
        bad = next((v for v in values if not info.min <= int(v) <= info.max), None)
        if bad is not None:
            raise ValueError(f"{bad} is out of range for {t.dtype}")
    wide = np.float32 if t.dtype == "bf16" else _numpy(t.dtype)  # decimal -> f32 -> bf16: exact
    array = np.array(values, dtype=wide).astype(_numpy(t.dtype)).reshape(t.shape)
    return _canonical(array).tobytes()


def constant_array(weight: Weight) -> np.ndarray:
    """A constant's value as a new array of its type."""
    import numpy as np

    assert weight.value is not None, f"weight '%{weight.name}' is not a constant"
    dtype = _numpy(weight.type.dtype).newbyteorder("<")
    flat = np.frombuffer(weight.value, dtype=dtype)
    return flat.astype(_numpy(weight.type.dtype)).reshape(weight.type.shape)


def _text(value: np.generic, dtype: str) -> str:
    import numpy as np

    if dtype == "bool":
        return "true" if value else "false"
    if dtype in _FLOATS:  # numpy's shortest round-trip text; nan, inf, -inf as words
        return str(value.astype(np.float32) if dtype == "bf16" else value)
    return str(value)


def format_constant(weight: Weight) -> str:
    """The value as written after `=`: `[0, 1, 2]`."""
    dtype = weight.type.dtype
    return "[" + ", ".join(_text(v, dtype) for v in constant_array(weight).reshape(-1)) + "]"


def with_constants(graph: Graph, weights: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """`weights` plus the value of every constant of `graph` not given among them."""
    out = dict(weights)
    for w in graph.weights:
        if w.value is not None and w.name not in out and f"%{w.name}" not in out:
            out[w.name] = constant_array(w)
    return out
