"""Quantized weights through compile and the planned executor: a decode step over every block
type runs as the reference does, equals the f32 graph on the dequantized weights, and its memory
figures (weights, streamed copies in the arena ring) count stored bytes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.analysis.segments import device_memory
from optgraph.cli.main import main
from optgraph.codegen.plan.lower_arena import lower
from optgraph.passes.manager import run_pipeline
from optgraph.reference.dequantize import dequantize
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from optgraph.runtime.cpu.planned_executor import execute

DECODE = Path(__file__).resolve().parents[1] / "fixtures" / "quantized_decode.ir"

# The same step in f32 over the dequantized weights: the f16 product widens its operand and
# rounds its result as the reference's quantized product does.
F32_DECODE = """graph f32_decode {
  input %ids : i32[1]
  weight %emb : f32[32,256]
  weight %norm : f32[256]
  weight %gate : f32[64,256]
  weight %up : f32[64,256]
  weight %down : f32[256,64]
  weight %out : f32[256,256]
  weight %proj : f32[256,256]
  weight %head : f32[32,256]
  %h = get_rows(%emb, %ids) : f32[1,256]
  %n = rms_norm(%h, %norm) : f32[1,256]
  %g = matmul(%n, %gate) {transpose_b = true} : f32[1,64]
  %u = matmul(%n, %up) {transpose_b = true} : f32[1,64]
  %s = silu(%g) : f32[1,64]
  %m = mul(%s, %u) : f32[1,64]
  %d = matmul(%m, %down) {transpose_b = true} : f32[1,256]
  %r = add(%h, %d) : f32[1,256]
  %rh = cast(%r) {dtype = "f16"} : f16[1,256]
  %rw = cast(%rh) {dtype = "f32"} : f32[1,256]
  %ow = matmul(%rw, %out) {transpose_b = true} : f32[1,256]
  %o = cast(%ow) {dtype = "f16"} : f16[1,256]
  %o32 = cast(%o) {dtype = "f32"} : f32[1,256]
  %p = matmul(%o32, %proj) : f32[1,256]
  %logits = matmul(%p, %head) {transpose_b = true} : f32[1,32]
  output %logits
}
"""

# Weights streamed through a ring (the budget fits the arena and a ring, not every weight).
STREAMED = "verify,dce,cse,fuse,analyze-lifetimes,plan-memory,plan-prefetch{budget=400000}"


def _data(graph: og.Graph) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    inputs = random_inputs(graph, seed=3)
    inputs["ids"] = np.array([17], np.int32)
    return inputs, random_weights(graph, seed=3)


def _dequantized(graph: og.Graph, weights: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    return {
        w.name: dequantize(weights[w.name], w.type.dtype, w.type.shape)
        if w.type.is_quantized
        else weights[w.name]
        for w in graph.weights
    }


def test_the_decode_step_equals_the_f32_graph_on_dequantized_weights() -> None:
    graph = og.parse_file(DECODE)
    inputs, weights = _data(graph)
    quantized = run_reference(graph, inputs, weights)
    plain = run_reference(og.parse(F32_DECODE), inputs, _dequantized(graph, weights))
    assert np.array_equal(quantized["logits"], plain["logits"])
    assert np.isfinite(quantized["logits"]).all()


def test_planned_execution_is_bit_identical_to_the_reference() -> None:
    graph = og.parse_file(DECODE)
    inputs, weights = _data(graph)
    expected = run_reference(graph, inputs, weights)
    compiled = og.compile(graph, "default", target="cpu")
    for seed in range(3):
        result = execute(compiled.program, inputs, weights, seed=seed)
        assert np.array_equal(result.outputs["logits"], expected["logits"]), seed


def test_streamed_quantized_weights_take_their_stored_bytes_in_the_ring() -> None:
    """plan-prefetch copies quantized weights as they are stored into the arena's ring; the
    planned executor reads the copies there."""
    graph = og.parse_file(DECODE)
    planned = run_pipeline(graph, STREAMED)
    copies = [n for n in planned.nodes if n.op == "prefetch"]
    assert sum(1 for n in copies if n.type is not None and n.type.is_quantized) == 6
    for node in copies:
        assert node.type is not None and node.ann.size is not None
        stored = node.type.nbytes
        assert stored <= node.ann.size < stored + 512, (node.name, stored, node.ann.size)
    inputs, weights = _data(graph)
    expected = run_reference(graph, inputs, weights)
    for seed in range(3):
        result = execute(lower(planned), inputs, weights, seed=seed)
        assert np.array_equal(result.outputs["logits"], expected["logits"]), seed
    memory = device_memory(planned)
    stored = {w.name: w.type.nbytes for w in planned.weights}
    streamed = sum(stored[w.name] for w in planned.weights if w.ann.segment is not None)
    assert memory.streamed_weights == streamed > 0


def test_weight_bytes_are_stored_bytes() -> None:
    graph = og.parse_file(DECODE)
    planned = og.compile(graph, "default", target="cpu").graph
    memory = device_memory(planned)
    stored = sum(w.type.nbytes for w in graph.weights)
    assert stored == 32 * 144 + 1024 + 64 * 8 * 22 + 64 * 8 * 20 + 256 * 2 * 17 + 256 * 8 * 34 + (
        256 * 176 + 32 * 210
    )
    assert stored <= memory.resident_weights < stored + 256 * len(graph.weights)


def test_run_check_on_the_example(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", str(DECODE), "--device", "cpu", "--check"]) == 0
    out = capsys.readouterr().out
    # quantized products on the cpu's compiled kernels: held to the f32 NMSE bound, not bits
    assert "%logits" in out and "1e-06" in out and "ok" in out and "MISMATCH" not in out
