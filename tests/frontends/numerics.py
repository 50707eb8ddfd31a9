"""Shared check of the importer tests: the reference interpreter and the compiled CPU program
both reproduce the source framework's outputs."""

from __future__ import annotations

import contextlib
import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

import optgraph as og
from optgraph.reference.interpreter import nmse, run_reference

# float32 end to end; the importers change no arithmetic, so only summation order differs.
F32_NMSE = 1e-10


def assert_matches(
    graph: og.Graph,
    weights: Mapping[str, np.ndarray],
    inputs: Mapping[str, np.ndarray],
    expected: Sequence[np.ndarray],
    tolerance: float = F32_NMSE,
) -> None:
    reference = run_reference(graph, dict(inputs), dict(weights))
    compiled = og.compile(graph, target="cpu").run(dict(inputs), dict(weights))
    names = graph.output_names()
    assert len(names) == len(expected)
    for name, want in zip(names, expected):
        for label, got in (("reference", reference[name]), ("compiled cpu", compiled[name])):
            assert got.shape == want.shape, f"{label} {name}: {got.shape} vs {want.shape}"
            error = nmse(np.asarray(got, dtype=np.float64), want.astype(np.float64))
            assert error <= tolerance, f"{label} output {name}: nmse {error:.3g} > {tolerance}"


def ops_of(graph: og.Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def imported_through(exporter: str, module: Any, args: tuple[Any, ...]) -> Any:
    """(graph, weights) of `module` called on `args`: `og.from_torch` (exporter "torch"), or
    `torch.onnx.export(dynamo=True)` then `og.from_onnx` ("onnx", the exporter's chatter
    silenced; skipped where onnx or onnxscript is missing)."""
    if exporter != "onnx":
        return og.from_torch(module, args)
    import pytest
    import torch

    pytest.importorskip("onnx", reason="the ONNX import needs onnx")
    pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        program = torch.onnx.export(module, args, dynamo=True)
    return og.from_onnx(program.model_proto)
