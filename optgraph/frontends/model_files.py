"""`optgraph import`: a model file in, the IR (and its weights) out, all or nothing.

A `.gguf` file's weights stay in it: `optgraph run MODEL.ir --weights MODEL.gguf` reads them by
tensor name (`--weights-out` still writes a copy).

The model is imported completely in memory first; then the weights and the IR are written to
temporary files beside their targets and renamed together (`output_files.OutputSet`), so a
failure (a full disk) leaves no partial output and the old files as they were.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from optgraph.errors import InputError, OptGraphError, Span
from optgraph.ir.graph import Graph
from optgraph.ir.printer import print_graph
from optgraph.output_files import OutputSet
from optgraph.reference.interpreter import save_weights

SUFFIXES = (".onnx", ".pt2", ".gguf")


def import_model(
    path: str, gguf_options: Mapping[str, Any] | None = None
) -> tuple[Graph, dict[str, np.ndarray]]:
    """(graph, weights) of an `.onnx`, `.pt2` or `.gguf` file; `gguf_options` are `from_gguf`'s
    keyword arguments (mode, batch, seq, cache_len, dtype)."""
    suffix = Path(path).suffix
    if suffix not in SUFFIXES:
        raise OptGraphError(
            f"import: {path}: expected a .onnx, .pt2 (torch.export.save) or .gguf file",
            Span(path, 1, 1),
        )
    if not Path(path).is_file():
        raise InputError(f"import: {path}: no such file")
    if suffix == ".gguf":
        from optgraph.frontends.gguf import from_gguf

        return from_gguf(path, **(gguf_options or {}))
    if suffix == ".onnx":
        from optgraph.frontends.onnx import from_onnx

        return from_onnx(path)
    from optgraph.frontends.torch_export import from_pt2

    return from_pt2(path)


def import_model_file(
    path: str,
    output: str,
    weights_out: str | None,
    gguf_options: Mapping[str, Any] | None = None,
) -> tuple[Graph, dict[str, np.ndarray]]:
    """Import `path` and write the IR to `output` (and the weights to `weights_out`), both or
    neither (`OutputSet`); a write that fails (a full disk) is an `InputError` naming the file."""
    if weights_out is not None and Path(weights_out).suffix not in (".safetensors", ".npz"):
        raise InputError(f"weights file '{weights_out}': expected .safetensors or .npz")
    graph, weights = import_model(path, gguf_options)
    outputs = OutputSet("import: ")
    try:
        if weights_out is not None:
            outputs.write_with(weights_out, lambda temporary: _save(temporary, weights))
        outputs.write_text(output, print_graph(graph))
        outputs.commit()
    finally:
        outputs.discard()
    return graph, weights


def _save(path: Path, weights: Mapping[str, np.ndarray]) -> None:
    """`save_weights`, with safetensors' own error for a failed write (a full disk) turned into
    the `OSError` it is, which the `OutputSet` reports by the target's name."""
    if path.suffix != ".safetensors":
        save_weights(path, weights)
        return
    from safetensors import SafetensorError

    try:
        save_weights(path, weights)
    except SafetensorError as err:
        raise os_error(str(err)) from None


# How safetensors' Rust side spells the operating system's error number: "... (os error 28)"
# (0.4 and later), "IoError(Os { code: 28, ... })" (earlier).
_OS_ERROR_NUMBER = re.compile(r"\(os error (\d+)\)|\bcode: (\d+)")


def os_error(message: str) -> OSError:
    """The `OSError` a safetensors error message reports: its error number and the system's
    words for it ("No space left on device"), or the whole message when it names no number."""
    found = _OS_ERROR_NUMBER.search(message)
    if found is None:
        return OSError(message)
    number = int(found.group(1) or found.group(2))
    return OSError(number, os.strerror(number))
