"""The tensor-core prefill attention (codegen/kernels/attention/prefill_gemm.py) through the CUDA runtime on
the fake CuPy (tests/support/fake_cupy.py): its scratch is allocated before any capture (value
buffers unplanned, the arena planned), both cuBLAS products and the softmax kernel are issued
eagerly and by the replay, and the scores product writes float32 from f16 operands."""

from __future__ import annotations

import sys
from typing import Any

import pytest

import optgraph as og
from optgraph.api.programs import cuda_program, plan_graph
from optgraph.codegen.kernels.attention import variants
from optgraph.reference.interpreter import random_inputs
from tests.codegen.test_attention_gemm_emulated import PREFILL
from tests.support.fake_cupy import fake_cupy

CUDA_R_32F, CUDA_R_16F = 0, 2
NODES = 6  # attention nodes in PREFILL


@pytest.mark.parametrize("planned", [False, True])
def test_gemm_attention_scratch_is_allocated_before_capture(
    monkeypatch: pytest.MonkeyPatch, planned: bool
) -> None:
    monkeypatch.setattr(variants, "GEMM_PREFILL_MIN_ROWS", 4)
    graph = og.parse(PREFILL.replace("{T}", "f16"))
    source = plan_graph(graph, "default") if planned else graph
    with fake_cupy(monkeypatch) as fake:
        calls: list[tuple[Any, ...]] = []
        gemm = fake.gemm

        def record(*args: Any) -> None:
            calls.append(args)
            gemm(*args)

        def alloc(nbytes: int, alloc: Any = fake.alloc) -> Any:
            assert fake.capture is None, "allocated during capture"
            allocated.append(nbytes)
            return alloc(nbytes)

        cublas = sys.modules["cupy_backends.cuda.libs.cublas"]
        monkeypatch.setattr(cublas, "gemmStridedBatchedEx", record)
        allocated: list[int] = []
        monkeypatch.setattr(sys.modules["cupy"].cuda, "alloc", alloc)
        program = cuda_program(source)
        plan = program.lowered.main.plan
        if planned:
            assert not plan.value_bytes
        else:
            assert sum(k.endswith("#scratch") for k in plan.value_bytes) == NODES
        inputs = random_inputs(graph, 0)
        program.run(inputs)  # eager, then capture
        program.run(inputs)  # replay
        assert fake.gemms == 2 * 2 * NODES
        scratch = [n for k, n in plan.value_bytes.items() if k.endswith("#scratch")]
        needed = [plan.arena_bytes] if planned else scratch
        assert needed and all(n in allocated for n in needed)
        assert sum("attention_softmax" in k for k in fake.launches) == 2 * NODES
        out_types = {(c[8], c[17]) for c in calls}  # (A's type, C's type)
        assert out_types == {(CUDA_R_16F, CUDA_R_32F), (CUDA_R_16F, CUDA_R_16F)}
