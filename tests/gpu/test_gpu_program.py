"""The public API on the GPU: `og.compile(..., target="cuda")`, default weights, new input shapes.

A program compiled for cuda runs with its own seeded default weights (uploaded once), matches the
reference interpreter, and a new input shape re-runs the pipeline (re-specialization) and still
matches the reference.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.reference.interpreter import random_inputs, run_reference
from tests.support.gpu_support import assert_close, require_gpu

pytestmark = pytest.mark.gpu
require_gpu()

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

DIAMOND_ROWS = """graph rows {{
  input %x : f32[{n},64]
  %a = exp(%x) : f32[{n},64]
  %b = tanh(%x) : f32[{n},64]
  %c = add(%a, %b) : f32[{n},64]
  output %c
}}"""


def test_compile_for_cuda_matches_reference_with_default_weights() -> None:
    graph = og.parse_file(EXAMPLES / "llama_decode.ir")
    program = og.compile(graph, target="cuda")
    inputs = random_inputs(graph, seed=3)
    first = program.run(inputs)
    again = program.run(inputs)
    want = run_reference(graph, inputs, program.default_weights())
    assert_close(graph, first, want)
    for name in first:
        np.testing.assert_array_equal(first[name], again[name])


def test_new_input_shape_respecializes_and_matches_reference() -> None:
    graph = og.parse(DIAMOND_ROWS.format(n=4))
    program = og.compile(graph, target="cuda")
    for rows in (4, 8, 4):
        x = np.random.default_rng(rows).standard_normal((rows, 64)).astype(np.float32)
        got = program.run({"x": x})
        want = run_reference(og.parse(DIAMOND_ROWS.format(n=rows)), {"x": x}, {})
        assert_close(og.parse(DIAMOND_ROWS.format(n=rows)), got, want)
