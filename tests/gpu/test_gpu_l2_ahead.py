"""The o-projection that brings its weights into L2 during the decode attention before it
(codegen/kernels/one_row/l2_ahead.py) on the GPU, at the realistic decode step's shapes (32/8 heads x 1024 keys,
a 4096 x 4096 f16 product with a residual): the bulk prefetches compile for the device, the
results are within the reference's bounds, replays are bit-identical, and the bits are those of
the same graph with the rule off (a prefetch is only a hint)."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from tests.support.gpu_support import assert_close, require_gpu, same_bits

pytestmark = pytest.mark.gpu
require_gpu()

from optgraph.api.programs import cuda_program
from optgraph.codegen.kernels.one_row import l2_ahead
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference

PREFETCH = "og_prefetch_l2_bulk(reinterpret_cast<const char*>(in"  # a weight prefetch
O_PROJECTION = """graph attn_o {
  input %q : f16[1,32,1,128]
  input %k : f16[1,8,1024,128]
  input %v : f16[1,8,1024,128]
  input %len : i32[1]
  input %h : f16[1,4096]
  weight %wo : f16[4096,4096]
  %a = attention(%q, %k, %v, %len) : f16[1,32,1,128]
  %a2 = reshape(%a) {shape = [1, 4096]} : f16[1,4096]
  %p = matmul(%a2, %wo) : f16[1,4096]
  %o = add(%h, %p) : f16[1,4096]
  output %o
}
"""


def _runs(graph: og.Graph, inputs: dict, weights: dict) -> tuple[str, list[dict]]:
    program = cuda_program(graph, weights=weights)
    source = program.lowered.main.plan.source()
    return source, [program.run(inputs) for _ in range(3)]  # eager, capture, replay


def test_o_projection_with_weights_ahead_matches_reference_and_plain_bits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    graph = run_pipeline(og.parse(O_PROJECTION), DEFAULT_PIPELINE)
    inputs, weights = random_inputs(graph, 21), random_weights(graph, 21)
    inputs["len"] = np.array([1000], np.int32)
    want = run_reference(graph, inputs, weights)
    source, runs = _runs(graph, inputs, weights)
    assert PREFETCH in source
    for got in runs:
        assert_close(graph, got, want)
    assert same_bits(runs[1], runs[2])
    monkeypatch.setattr(l2_ahead, "L2_AHEAD", False)
    plain_source, plain = _runs(graph, inputs, weights)
    assert PREFETCH not in plain_source
    assert same_bits(runs[2], plain[2])
