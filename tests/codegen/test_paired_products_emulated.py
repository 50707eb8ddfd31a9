"""SwiGLU's gate and up as one paired kernel (the default pipeline's `fuse-siblings{concat=false}`),
run end to end on the CPU: the lowered plan at its arena offsets in the emulator
(tests/support/cuda_emulator.py `run_plan`) against the reference interpreter.

The pair's weights are in the device's weight buffer, so its kernel loads their first batch of
rows before the PDL wait (`product_kernel.EARLY_WEIGHTS`); the same plan lowered with that setting off
must give the very same bits (the loads only move earlier). Two shapes: f16 with K = 2304
(split-K: a workspace and the last block's sums) and f32 with K = 512 (a single pass).
"""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.kernels.one_row import product_kernel
from optgraph.codegen.lower_cuda import CudaPlan, KernelStep, lower_cuda
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from optgraph.runtime.cuda.runner import CHECK_BOUNDS
from tests.support import cuda_emulator

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")

# The mul is wider than fuse's elementwise-prologue limit (2048), so it stays the gate product's
# epilogue and the pairs rewrite absorbs the up product into that region.
SWIGLU = """graph swiglu_pairs {
  input %x : f16[1,2304]
  input %y : f32[1,512]
  weight %wg : f16[2304,2304]
  weight %wu : f16[2304,2304]
  weight %wd : f16[2304,256]
  weight %sg : f32[512,2304]
  weight %su : f32[512,2304]
  %g = matmul(%x, %wg) : f16[1,2304]
  %u = matmul(%x, %wu) : f16[1,2304]
  %ga = silu(%g) : f16[1,2304]
  %m = mul(%ga, %u) : f16[1,2304]
  %d = matmul(%m, %wd) : f16[1,256]
  %t = matmul(%y, %sg) : f32[1,2304]
  %v = matmul(%y, %su) : f32[1,2304]
  %ta = silu(%t) : f32[1,2304]
  %n = mul(%ta, %v) : f32[1,2304]
  output %d, %n
}
"""


def _paired_kernels(plan: CudaPlan) -> list[str]:
    """The source of the plan's sibling-product kernels."""
    return [k.source for name, k in plan.kernels.items() if name.startswith("og_gemvs_")]


def test_paired_gate_up_with_early_weights_matches_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = og.parse(SWIGLU)
    graph = run_pipeline(source, "default")
    fused = [n for n in graph.nodes if n.op == "fused" and n.body is not None]
    assert all(n.body is not None for n in fused)
    pairs = [n for n in fused if sum(i.op == "matmul" for i in n.body.nodes) == 2]
    assert {n.name for n in pairs} == {"m", "n"}, "gate and up were not paired"
    assert not any(n.name in ("u", "v") for n in graph.nodes)

    inputs, weights = random_inputs(source, seed=3), random_weights(source, seed=3)
    want = run_reference(source, inputs, weights)
    early = lower_cuda(graph)
    kernels = _paired_kernels(early)
    assert len(kernels) == 2 and all("og_wv0" in k for k in kernels), "weights not loaded early"
    assert sum(1 for s in early.steps if isinstance(s, KernelStep)) == 3  # two pairs, %d
    got = cuda_emulator.run_plan(early, inputs, weights)
    for name, w in want.items():
        bound = CHECK_BOUNDS[graph.value_types()[name].dtype]
        err = nmse(got[name].astype(np.float64), w.astype(np.float64))
        assert err <= bound, f"%{name}: nmse {err:.3e} > {bound:g}"

    monkeypatch.setattr(product_kernel, "EARLY_WEIGHTS", False)
    late = lower_cuda(graph)
    assert not any("og_wv0" in k for k in _paired_kernels(late))
    got_late = cuda_emulator.run_plan(late, inputs, weights)
    for name in want:
        assert np.array_equal(got[name], got_late[name]), f"%{name}: early loads changed the bits"
