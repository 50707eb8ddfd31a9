"""CPU nodes of a split program that read quantized weights, in the CUDA runtime on the fake
CuPy (runtime/cuda/offload.py): a host function's view of a quantized weight is its blocks'
bytes, which the CPU kernels read (runtime/cpu/quantized_nodes.py; no path reads blocks as
values)."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.api.programs import cuda_program
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from tests.support.fake_cupy import fake_cupy

GRAPH = """graph q {
  input %x : f32[1,64]
  input %ids : i32[3]
  weight %w : q4_k[16,256]
  weight %emb : q8_0[6,64]
  weight %w2 : f32[64,256]
  %h = matmul(%x, %w2) : f32[1,256]
  %p = matmul(%h, %w) {transpose_b = true} : f32[1,16]
  %e = get_rows(%emb, %ids) : f32[3,64]
  %s = exp(%e) : f32[3,64]
  output %p, %s
}
"""
PLAN = "insert-sync,analyze-lifetimes,plan-memory"


def test_cpu_nodes_read_quantized_weights(monkeypatch: pytest.MonkeyPatch) -> None:
    # Every node on the CPU: the fake CuPy runs no kernels, so the outputs are the host
    # functions' own (the quantized product, the gather of quantized rows and its reader).
    graph = og.parse(GRAPH)
    split = run_pipeline(graph, f"split-backends{{cpu-ops=get_rows+matmul+exp}},{PLAN}")
    assert all(n.ann.backend == "cpu" for n in split.nodes if not n.is_event)
    inputs, weights = random_inputs(graph, seed=1), random_weights(graph, seed=2)
    inputs["ids"] = np.array([5, 0, 2], np.int32)
    want = run_reference(graph, inputs, weights)
    with fake_cupy(monkeypatch):
        program = cuda_program(split, weights=weights)
        got = program.run(inputs)
        program.close()
    for name in ("p", "s"):
        np.testing.assert_allclose(np.asarray(got[name]), want[name], rtol=1e-5, atol=1e-5)
