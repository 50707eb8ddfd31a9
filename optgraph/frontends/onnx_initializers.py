"""An ONNX model's tensors (initializers, Constant nodes' values) as arrays, their data inline or
in external files, checked first.

A large model keeps its tensors outside the `.onnx` file (`save_as_external_data`): each such
initializer names a file relative to the model's directory, an offset and a length. Before any
byte is read, `initializer_arrays` checks what a hostile or damaged model could get wrong, and
refuses with a message naming the model, the initializer and the data file:

    model.onnx:1:1: error: import: initializer 'w': its external data file 'w.bin' is missing
      (looked for /models/w.bin, next to the model)

- the data file exists (relative to the model's directory, not the working directory) and
  stays inside that directory (no absolute path, no `..`, no symbolic link);
- the bytes the tensor's dtype and shape need fit in the file at the given offset, and agree
  with the stated length, so nothing is allocated beyond what the file holds;
- inline data that does not match its shape is called corrupt, by initializer.

Complexity: O(initializers) checks plus reading the data once.
"""

from __future__ import annotations

import math
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np

from optgraph.errors import OptGraphError, Span


def initializer_arrays(onnx: Any, graph: Any, path: str) -> dict[str, np.ndarray]:
    """{name: array} of `graph`'s initializers; `path` is the model file ("<onnx>": a model
    given in memory, whose external data is looked up in the working directory)."""
    return {
        tensor.name: tensor_array(onnx, tensor, path, f"initializer '{tensor.name}'")
        for tensor in graph.initializer
    }


def tensor_array(onnx: Any, tensor: Any, path: str, what: str) -> np.ndarray:
    """The array of one TensorProto of the model at `path` (an initializer, a Constant node's
    value), its external data checked first; `what` names it in messages."""
    base = Path(path).parent if path != "<onnx>" else Path()
    external = tensor.data_location == onnx.TensorProto.EXTERNAL
    if external:
        _check_external(onnx, tensor, base, path, what)
    try:
        return np.asarray(onnx.numpy_helper.to_array(tensor, base_dir=str(base)))
    except Exception as err:  # noqa: BLE001 - onnx raises ValueError, ValidationError, ...
        where = "its external data" if external else "its data"
        raise _error(path, f"{what}: {where} is corrupt ({err})") from None


def _error(path: str, why: str) -> OptGraphError:
    return OptGraphError(f"import: {why}", Span(path, 1, 1))


def _check_external(onnx: Any, tensor: Any, base: Path, path: str, what: str) -> None:
    """Refuse an external tensor whose file is missing, outside the model's directory, or too
    short for the tensor (see the module docstring)."""
    info = {entry.key: entry.value for entry in tensor.external_data}
    location = info.get("location", "")
    if not location:
        raise _error(path, f"{what}: external data without a location")
    relative = Path(location)
    if relative.is_absolute() or ".." in relative.parts:
        raise _error(
            path,
            f"{what}: external data file '{location}' is outside the model's "
            "directory (ONNX allows only a relative path below it)",
        )
    data_file = base / relative
    try:
        found = data_file.stat()
    except (OSError, ValueError) as err:  # missing, a name too long or with a NUL byte
        why = "is missing" if isinstance(err, FileNotFoundError) else "cannot be read"
        raise _error(
            path,
            f"{what}: its external data file '{location}' {why} "
            f"(looked for {os.path.abspath(data_file)}, next to the model)",
        ) from None
    if data_file.is_symlink() or not data_file.resolve().is_relative_to(base.resolve()):
        raise _error(
            path,
            f"{what}: its external data file '{location}' is a symbolic link or lies through "
            "one (onnx reads only files inside the model's directory)",
        )
    if not stat.S_ISREG(found.st_mode):
        raise _error(path, f"{what}: its external data file '{location}' is not a regular file")
    size = found.st_size
    try:
        offset = int(info.get("offset", "0"))
        length = int(info["length"]) if "length" in info else None
    except ValueError:
        raise _error(path, f"{what}: external data offset or length is not a number")
    need = _tensor_bytes(onnx, tensor)
    if offset < 0 or (length is not None and length < 0):
        raise _error(path, f"{what}: negative external data offset or length")
    if need is not None and length is not None and length != need:
        raise _error(
            path,
            f"{what}: external data length {length} does not match its type ({need} bytes)",
        )
    end = offset + (length if length is not None else (need or 0))
    if end > size:
        raise _error(
            path,
            f"{what}: needs bytes [{offset}, {end}) of '{location}', "
            f"which holds {size} bytes (truncated?)",
        )


def _tensor_bytes(onnx: Any, tensor: Any) -> int | None:
    """Bytes of `tensor`'s data by its dtype and shape; None for a dtype without a fixed size."""
    try:
        itemsize = int(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize)
    except Exception:  # noqa: BLE001 - an unknown or variable-size element type
        return None
    packed = {getattr(onnx.TensorProto, t, -1) for t in ("INT4", "UINT4", "FLOAT4E2M1")}
    if tensor.data_type in packed or tensor.data_type == onnx.TensorProto.STRING:
        return None  # two elements a byte, or strings
    if any(d < 0 for d in tensor.dims):
        return None
    return int(math.prod(tensor.dims)) * itemsize
