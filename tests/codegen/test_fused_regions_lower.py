"""Every region `fuse` builds lowers to CUDA (issue 13, class 3), also with the one-row kernel
turned off for plain products (`product_kernel.ONE_ROW_MAX_M = 0`, the cuBLAS benchmark variant): a
product with a prologue (a norm recomputed inside it) has no cuBLAS form, so fusion's contract
(`fusion_rules.one_row_product`) decides, not the tuning switch."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

import optgraph as og
from optgraph.codegen.kernels.one_row import product_kernel
from optgraph.codegen.lower_cuda import GemmStep, lower_cuda
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.support import cuda_emulator

ROOT = Path(__file__).resolve().parents[2]

NORM_PRODUCT = """graph norm_product {
  input %x : f32[1,256]
  weight %g : f32[256]
  weight %w : f32[256,64]
  weight %v : f32[64,32]
  %n = rms_norm(%x, %g) : f32[1,256]
  %y = matmul(%n, %w) : f32[1,64]
  %z = matmul(%y, %v) : f32[1,32]
  output %z
}
"""


def _llama_step(dtype: str) -> og.Graph:
    spec = importlib.util.spec_from_file_location("gen_llama", ROOT / "examples" / "gen_llama.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return og.parse(module.generate_llama(layers=1, dtype=dtype))


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_llama_step_lowers_with_the_one_row_kernel_off(
    dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = run_pipeline(_llama_step(dtype), DEFAULT_PIPELINE)
    monkeypatch.setattr(product_kernel, "ONE_ROW_MAX_M", 0)
    plan = lower_cuda(graph)
    assert plan.source()
    assert any(isinstance(s, GemmStep) for s in plan.steps)  # products without prologue: cuBLAS


@pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
def test_prologue_product_runs_with_the_one_row_kernel_off(monkeypatch: pytest.MonkeyPatch) -> None:
    source = og.parse(NORM_PRODUCT)
    graph = run_pipeline(source, DEFAULT_PIPELINE)
    assert sum(n.op == "fused" for n in graph.nodes) == 1  # the norm inside the first product
    monkeypatch.setattr(product_kernel, "ONE_ROW_MAX_M", 0)
    plan = lower_cuda(graph)
    assert sum(isinstance(s, GemmStep) for s in plan.steps) == 1  # the plain product: cuBLAS
    inputs, weights = random_inputs(source), random_weights(source)
    got = cuda_emulator.run_plan(plan, inputs, weights)["z"]
    assert nmse(got, run_reference(source, inputs, weights)["z"]) < 1e-10
