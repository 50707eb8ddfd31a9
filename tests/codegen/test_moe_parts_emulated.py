"""A moe cut by `split-experts` (no split-backends: both parts on the GPU) through the default
pipeline, lowered and run in the CUDA emulator on the model's whole arrays (the pieces cut by
`expert_weights`): each part's kernels read its own experts' rows, biases included (gpt-oss),
and the sum equals the reference of the whole node within the GPU op tests' bound."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.api.programs import plan_graph
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.passes.split_experts import expert_weights
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.support import cuda_emulator
from tests.support.gpu_support import BOUNDS

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")

PLAIN = """graph m {
  input %x : f16[3,256]
  input %logits : f32[3,6]
  weight %gate : q4_k[6,32,256]
  weight %up : q4_k[6,32,256]
  weight %down : q8_0[6,256,32]
  %y = moe(%x, %logits, %gate, %up, %down) {k = 2, norm_topk = true} : f16[3,256]
  output %y
}
"""
BIASED = """graph m {
  input %x : f32[3,64]
  input %logits : f32[3,4]
  weight %gate_up : f32[4,64,64]
  weight %down : q8_0[4,64,32]
  weight %gate_up_bias : f32[4,64]
  weight %down_bias : f32[4,64]
  %y = moe(%x, %logits, %gate_up, %down, %gate_up_bias, %down_bias) {act = "swiglu_oai", k = 2, routing = "topk_softmax"} : f32[3,64]
  output %y
}
"""


@pytest.mark.parametrize(("text", "cpu_experts"), [(PLAIN, 2), (PLAIN, 5), (BIASED, 1)])
def test_parts_of_a_moe_run_emulated(text: str, cpu_experts: int) -> None:
    source = og.parse(text)
    og.verify(source)
    planned = plan_graph(source, f"split-experts{{cpu-experts={cpu_experts}}},default")
    assert len([n for n in planned.nodes if n.op == "moe"]) == 2
    inputs, weights = random_inputs(source, seed=3), random_weights(source, seed=4)
    want = run_reference(source, inputs, weights)["y"]
    pieces = expert_weights(source, planned, weights)
    got = cuda_emulator.run_plan(lower_cuda(planned), inputs, pieces, planned)["y"]
    assert got.dtype == want.dtype and np.abs(want.astype(np.float32)).max() > 0.0
    dtype = str(source.value_types()["y"].dtype)
    assert nmse(got.astype(np.float32), want.astype(np.float32)) <= BOUNDS[dtype]
