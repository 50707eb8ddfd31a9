"""benchmarks/kernel_phases.py on the CPU: the instrumentation finds its landmarks in the code
generated today for a decode loop step (it raises when they move), marks every kernel, and the
instrumented kernels compute the same bits in the CPU emulator."""

from __future__ import annotations

import numpy as np
import pytest

from benchmarks import kernel_phases
from optgraph.codegen.lower_cuda import CudaPlan, KernelStep, lower_cuda
from optgraph.codegen.plan.in_place_outputs import in_place_candidates
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights
from tests.support import cuda_emulator
from tests.support.decode_loop_graph import loop_step_graph

NEEDS_GXX = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
SIZES = {"layers": 2, "hidden": 512, "heads": 8, "kv_heads": 2, "ffn": 1376, "vocab": 256,
         "cache_len": 16}  # fmt: skip


@pytest.fixture(scope="module")
def plan() -> CudaPlan:
    graph = run_pipeline(loop_step_graph("f16", **SIZES), DEFAULT_PIPELINE)
    return lower_cuda(graph, in_place=in_place_candidates(graph))


def test_every_kernel_and_every_product_phase_is_marked(plan: CudaPlan) -> None:
    text = kernel_phases.instrument(plan.source())
    kernels = text.count('extern "C" __global__')
    assert kernels == len({s.kernel for s in plan.steps if isinstance(s, KernelStep)})
    assert text.count("OgPhaseEnd og_phase_end;") == kernels
    assert text.count("og_grid_dependency_wait() {") == 1 and "og_phase(1u);" in text
    products = text.count("__shared__ float og_red[")
    assert products >= 4  # q/k/v, o, gate/up, down (the logits' too)
    attentions = text.count("__shared__ float og_pm[2]")  # the wide decode attention's
    assert attentions >= 1
    marks = {"staged": products + attentions, "product": products + attentions}
    marks["reduced"] = products
    for mark, count in marks.items():
        assert text.count(f"og_phase({kernel_phases.MARKS.index(mark)}u);") == count, mark
    # the norms' statistics (at least two) and each attention's rows
    assert text.count(f"og_phase({kernel_phases.MARKS.index('stats')}u);") >= 2 + attentions


def test_a_module_without_the_landmarks_is_refused() -> None:
    with pytest.raises(ValueError, match="prelude"):
        kernel_phases.instrument('extern "C" __global__ void k() {}')


@NEEDS_GXX
def test_instrumented_kernels_compute_the_same_bits(
    plan: CudaPlan, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = run_pipeline(loop_step_graph("f16", **SIZES), DEFAULT_PIPELINE)
    values = random_inputs(graph, 0)
    values |= {"one": np.ones(1, np.int32), "pos": np.array([5], np.int32),
               "kv_len": np.array([6], np.int32), "tokens": np.array([3], np.int32)}  # fmt: skip
    weights = random_weights(graph, 0)
    plain = cuda_emulator.run_plan(plan, {k: v.copy() for k, v in values.items()}, weights, graph)
    prelude, source = cuda_emulator._prelude, cuda_emulator.kernels_source
    monkeypatch.setattr(
        cuda_emulator, "_prelude", lambda: kernel_phases.instrument_prelude(prelude())
    )
    monkeypatch.setattr(
        cuda_emulator, "kernels_source", lambda ks: kernel_phases.instrument_kernels(source(ks))
    )
    marked = cuda_emulator.run_plan(plan, {k: v.copy() for k, v in values.items()}, weights, graph)
    for name, value in plain.items():
        assert np.array_equal(marked[name], value), name
