"""Small Llama graphs for the split-backends and plan-prefetch tests (CPU and GPU).

`llama(...)` is `examples/gen_llama.py` at test sizes; `host_weights=(...)` marks weights `host`.
`run_planned(graph, inputs, weights, seed)` lowers a planned graph and runs it in the planned
executor with a seeded random interleaving of its streams (read checks on).
"""

from __future__ import annotations

import importlib.util
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

import numpy as np

import optgraph as og
from optgraph.codegen.plan.lower_arena import lower
from optgraph.ir.graph import Graph
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from optgraph.runtime.cpu.planned_executor import execute

_GEN = Path(__file__).resolve().parents[2] / "examples" / "gen_llama.py"
_spec = importlib.util.spec_from_file_location("gen_llama", _GEN)
assert _spec is not None and _spec.loader is not None
gen_llama = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_llama)


def llama(
    layers: int = 2,
    batch: int = 1,
    seq: int = 1,
    mode: str = "decode",
    host_weights: Iterable[str] = (),
    **sizes: int,
) -> Graph:
    text = gen_llama.generate_llama(
        layers=layers, batch=batch, seq=seq, mode=mode, cache_len=max(8, seq), **sizes
    )
    for name in host_weights:
        text, count = re.subn(rf"(weight %{re.escape(name)} : \S+)", r"\1 host", text)
        assert count == 1, name
    return og.parse(text)


def run_planned(
    graph: Graph,
    inputs: Mapping[str, np.ndarray],
    weights: Mapping[str, np.ndarray],
    seed: int | None,
) -> dict[str, np.ndarray]:
    return execute(lower(graph), inputs, weights, seed=seed).outputs


def assert_runs_equal_reference(planned: Graph, source: Graph, interleavings: int) -> None:
    """`planned` run by the planned executor in `interleavings` random stream interleavings (at
    its planned offsets) gives exactly the reference interpreter's outputs of `source`."""
    inputs, weights = random_inputs(source), random_weights(source)
    expected = run_reference(source, inputs, weights)
    for seed in range(interleavings):
        got = run_planned(planned, inputs, weights, seed)
        for name, value in expected.items():
            assert np.array_equal(got[name], value), (seed, name)
