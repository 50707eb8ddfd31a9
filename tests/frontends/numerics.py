"""Shared check of the importer tests: the reference interpreter and the compiled CPU program
both reproduce the source framework's outputs."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

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
