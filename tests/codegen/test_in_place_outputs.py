"""Outputs computed in place in an input's buffer (codegen/plan/in_place_outputs.py): which pairs are
legal, what the plan does with them, and the plan's results in the CPU emulator."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.lower_cuda import CodegenError, KernelStep, lower_cuda
from optgraph.codegen.plan.in_place_outputs import in_place_candidates
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from tests.support import cuda_emulator

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from gen_llama import generate_llama

CACHES = """graph caches {
  input %k_cache : f16[1,2,16,8]
  input %v_cache : f16[1,2,16,8]
  input %o_cache : f16[1,2,16,8]
  input %new : f16[1,2,1,8]
  input %pos : i32[1]
  %k = kv_cache_write(%k_cache, %new, %pos) : f16[1,2,16,8]
  %v = kv_cache_write(%v_cache, %new, %pos) : f16[1,2,16,8]
  %o = kv_cache_write(%o_cache, %new, %pos) : f16[1,2,16,8]
  %old = neg(%v_cache) : f16[1,2,16,8]
  output %k, %v, %old
}
"""


def test_candidates_are_cache_writes_of_inputs_nothing_else_reads() -> None:
    graph = og.parse(CACHES)
    # %v's cache is also read by %old; %o is no output
    assert in_place_candidates(graph) == {"k": "k_cache"}


def test_plan_writes_rows_into_the_input_and_rejects_illegal_pairs() -> None:
    graph = run_pipeline(og.parse(CACHES), DEFAULT_PIPELINE)
    plain = lower_cuda(graph, merge_launches=False)
    placed = lower_cuda(graph, merge_launches=False, in_place={"k": "k_cache"})
    assert placed.locations["k"] == placed.locations["k_cache"]
    assert plain.locations["k"].space == "arena"
    # the write takes the in-place kernel (new rows only) and writes into the caller's array
    k_plain = next(s for s in plain.steps if isinstance(s, KernelStep) and s.node == "k")
    k_placed = next(s for s in placed.steps if isinstance(s, KernelStep) and s.node == "k")
    assert k_placed.kernel != k_plain.kernel
    assert k_plain.args[0].space == "arena"
    assert k_placed.args[0] == k_placed.args[1] == placed.locations["k_cache"]
    with pytest.raises(CodegenError, match="in place"):
        lower_cuda(graph, in_place={"v": "v_cache"})


@pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
@pytest.mark.parametrize(
    ("merge", "prefetch"),  # the default run: merged with prefetch; `pytest -m slow`: the others
    [
        pytest.param(False, False, marks=pytest.mark.slow),
        pytest.param(True, False, marks=pytest.mark.slow),
        (True, True),
    ],
)
def test_llama_decode_with_caches_in_place_matches_reference(
    merge: bool, prefetch: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In the emulator, also with the products' early L2 prefetch (alone and in merged kernels;
    it replaces the weight loads before the wait, `EARLY_WEIGHTS`)."""
    from optgraph.codegen.kernels.one_row import product_kernel

    monkeypatch.setattr(product_kernel, "PREFETCH", prefetch)
    monkeypatch.setattr(product_kernel, "EARLY_WEIGHTS", not prefetch)
    graph = og.parse(generate_llama(layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=64))
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    pairs = in_place_candidates(planned)
    assert len(pairs) == 4  # k and v caches of both layers
    plan = lower_cuda(planned, merge_launches=merge, in_place=pairs)
    assert ("_early(" in plan.source()) == (prefetch and merge)
    inputs, weights = random_inputs(graph, 3), random_weights(graph, 3)
    inputs["pos"] = np.array([5], np.int32)
    inputs["kv_len"] = np.array([6], np.int32)
    want = run_reference(graph, inputs, weights)
    got = cuda_emulator.run_plan(plan, inputs, weights)
    for name in graph.output_names():
        np.testing.assert_allclose(
            np.asarray(got[name], np.float64), np.asarray(want[name], np.float64), atol=2e-3
        )
