"""`optgraph import`: a model file in, the IR (and its weights) out, all or nothing.

A `.gguf` file's weights stay in it: `optgraph run MODEL.ir --weights MODEL.gguf` reads them by
tensor name (`--weights-out` still writes a copy).

The model is imported completely in memory first; then the weights and the IR are written to
temporary files beside their targets and renamed, so a failure leaves no partial output.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from optgraph.errors import InputError, OptGraphError, Span
from optgraph.ir.graph import Graph
from optgraph.ir.printer import print_graph
from optgraph.output_files import commit, temporary_beside
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
    from optgraph.frontends.torch_export import from_torch, load_exported_program

    return from_torch(load_exported_program(path))


def import_model_file(
    path: str,
    output: str,
    weights_out: str | None,
    gguf_options: Mapping[str, Any] | None = None,
) -> tuple[Graph, dict[str, np.ndarray]]:
    """Import `path` and write the IR to `output` (and the weights to `weights_out`)."""
    graph, weights = import_model(path, gguf_options)
    staged: list[tuple[Path, Path]] = []
    try:
        if weights_out is not None:
            target = Path(weights_out)
            if target.suffix not in (".safetensors", ".npz"):
                raise InputError(f"weights file '{target}': expected .safetensors or .npz")
            temporary = temporary_beside(target)
            staged.append((temporary, target))
            save_weights(temporary, weights)
        target = Path(output)
        temporary = temporary_beside(target)
        staged.append((temporary, target))
        temporary.write_text(print_graph(graph), encoding="utf-8")
        for temporary, target in staged:
            commit(temporary, target)
    finally:
        for temporary, _ in staged:
            temporary.unlink(missing_ok=True)
    return graph, weights
