"""Decode attention reading its KV cache before the PDL wait (codegen/decode/early_cache_reads.py):
which attentions qualify, the step's extents, results in the CPU emulator against the reference,
and the hazard itself: the rows the step writes are stale until the wait, and must be reloaded."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.cuda_source import Kernel
from optgraph.codegen.decode import early_cache_reads
from optgraph.codegen.lower_cuda import CudaPlan, KernelStep, lower_cuda
from optgraph.codegen.plan.in_place_outputs import in_place_candidates
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from tests.support import cuda_emulator

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from gen_llama import generate_llama

NEEDS_GXX = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")

DECODE = """graph decode {{
  input %q : f16[1,4,1,64]
  input %k_new : f16[1,2,1,64]
  input %v_new : f16[1,2,1,64]
  input %k_cache : f16[1,2,{smax},64]
  input %v_cache : f16[1,2,{smax},64]
  input %pos : i32[1]
  input %kv_len : i32[1]{extra_inputs}
  %kc = kv_cache_write(%k_cache, %k_new, {kpos}) : f16[1,2,{smax},64]
  %vc = kv_cache_write(%v_cache, %v_new, %pos) : f16[1,2,{smax},64]{extra_nodes}
  %o = attention(%q, %kc, %vc, %kv_len) : f16[1,4,1,64]
  output %o, %kc, %vc
}}
"""


def _decode(smax: int = 128, kpos: str = "%pos", extra_inputs: str = "", extra_nodes: str = ""):
    text = DECODE.format(smax=smax, kpos=kpos, extra_inputs=extra_inputs, extra_nodes=extra_nodes)
    return og.parse(text)


def _attention_step(plan: CudaPlan) -> KernelStep:
    (step,) = [s for s in plan.steps if isinstance(s, KernelStep) and s.node == "o"]
    return step


def _found(graph: og.Graph, in_place: dict[str, str] | None = None) -> dict:
    """`early_cache_reads` of `graph` with its caches in place (or `in_place`)."""
    pairs = in_place_candidates(graph) if in_place is None else in_place
    return early_cache_reads.early_cache_reads(graph, pairs, graph.value_types())


def test_in_place_caches_with_one_position_qualify() -> None:
    graph = _decode()
    found = early_cache_reads.WrittenRows("pos", "i32", 1, True, ("kc", "vc"))
    assert _found(graph) == {"o": found}
    assert _found(graph, {}) == {}  # caches not in place


def test_other_positions_and_computed_positions() -> None:
    assert _found(_decode(kpos="%pos2", extra_inputs="\n  input %pos2 : i32[1]")) == {}
    computed = _decode(
        kpos="%p1",
        extra_inputs="\n  input %one : i32[1]",
        extra_nodes="\n  %p1 = add(%pos, %one) : i32[1]",
    )
    computed = og.parse(
        og.print_graph(computed).replace(
            "kv_cache_write(%v_cache, %v_new, %pos)", "kv_cache_write(%v_cache, %v_new, %p1)"
        )
    )
    found = early_cache_reads.WrittenRows("p1", "i32", 1, False, ("kc", "vc"))
    assert _found(computed) == {"o": found}


def test_switch_off(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(early_cache_reads, "EARLY_CACHE_READS", False)
    assert _found(_decode()) == {}


def test_the_step_reads_the_position_and_waits_itself() -> None:
    graph = _decode()
    plan = lower_cuda(graph, in_place=in_place_candidates(graph))
    step = _attention_step(plan)
    kernel = plan.kernels[step.kernel]
    assert kernel.self_wait
    pos = plan.locations["pos"]
    assert step.args[-1] == pos
    assert step.reads is not None and any(
        e.key == pos.key and e.space == pos.space for e in step.reads
    )
    body = kernel.body or ""
    wait = body.index("og_grid_dependency_wait")
    assert body.index("in1 + kvoff") < wait < body.index("in3[0]")  # K before, kv_len after
    assert body.index("in4[0]") < wait  # the position (a graph input) before too


@NEEDS_GXX
@pytest.mark.parametrize("dt", ["f16", "f32"])
def test_llama_decode_with_early_reads_matches_reference(dt: str) -> None:
    graph = og.parse(
        generate_llama(layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=64, dtype=dt)
    )
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    plan = lower_cuda(planned, in_place=in_place_candidates(planned))
    early = [plan.kernels[s.kernel] for s in plan.steps if isinstance(s, KernelStep)]
    assert sum("const long long wp" in (k.body or "") for k in early) >= 1
    inputs, weights = random_inputs(graph, 3), random_weights(graph, 3)
    inputs["pos"] = np.array([5], np.int32)
    inputs["kv_len"] = np.array([6], np.int32)
    want = run_reference(graph, inputs, weights)
    got = cuda_emulator.run_plan(plan, inputs, weights)
    tol = {"f32": 1e-4, "f16": 2e-3}[dt]
    for name in graph.output_names():
        np.testing.assert_allclose(
            np.asarray(got[name], np.float64), np.asarray(want[name], np.float64), atol=tol
        )


# The PDL hazard, emulated: thread 0 of every block puts the stale rows back when the block
# starts and the step's new rows in when it reaches the wait, so that loads before the wait see
# what they could see on the GPU (the preceding kernel not finished) and loads after it the new
# rows. Threads run one after another up to their first barrier, so thread 0's loads before the
# wait are the ones that see the stale rows: the tests put the new row among its keys.
HOOKS = """
static char *og_t_k, *og_t_v;
static const char *og_t_rows[4];  // stale k, stale v, new k, new v: [heads][row bytes] each
static size_t og_t_at, og_t_row, og_t_heads, og_t_head;
static void og_t_put(int which) {
  for (size_t h = 0; h < og_t_heads; ++h) {
    std::memcpy(og_t_k + h * og_t_head + og_t_at, og_t_rows[which] + h * og_t_row, og_t_row);
    std::memcpy(og_t_v + h * og_t_head + og_t_at, og_t_rows[which + 1] + h * og_t_row, og_t_row);
  }
}
static void og_t_start() { if (threadIdx.x == 0) og_t_put(0); }
static void og_t_wait() { if (threadIdx.x == 0) og_t_put(2); }
"""
SMAX, HEADS, D = 128, 2, 64


def _hazard_kernel(kernel: Kernel, reload: bool = True) -> Kernel:
    """`kernel` with the stale rows put back at its start and the new rows in at its wait;
    `reload=False`: its reload of the new rows after the wait disabled (a broken kernel)."""
    head, rest = kernel.function.split("{\n", 1)
    function = head + "{\n  og_t_start();\n" + rest
    function = function.replace("og_grid_dependency_wait();", "og_t_wait();")
    if not reload:
        function = function.replace("(long long)j >= wp &&", "false &&")
    return replace(kernel, source="".join(kernel.decls) + function)


def _run_hazard(kernel: Kernel, step: KernelStep, inputs: dict[str, np.ndarray]) -> np.ndarray:
    """The attention kernel alone, the caches holding stale rows at `pos` until its wait."""
    pos = int(inputs["pos"][0])
    stale_k = np.full((HEADS, D), 30.0, np.float16)  # a stale key would dominate the softmax
    stale_v = np.full((HEADS, D), -50.0, np.float16)
    new_k, new_v = inputs["k_new"][0, :, 0], inputs["v_new"][0, :, 0]
    kc, vc = inputs["k_cache"].copy(), inputs["v_cache"].copy()
    kc[0, :, pos], vc[0, :, pos] = stale_k, stale_v
    out = np.zeros((1, 4, 1, D), np.float16)
    buffers = [out, inputs["q"], kc, vc, inputs["kv_len"], inputs["pos"]]
    row = D * 2
    setup = [
        "og_t_k = b2; og_t_v = b3;",
        "og_t_rows[0] = x0; og_t_rows[1] = x1; og_t_rows[2] = x2; og_t_rows[3] = x3;",
        f"og_t_at = {pos * row}; og_t_row = {row}; og_t_heads = {HEADS}; og_t_head = {SMAX * row};",
    ]
    extra = [stale_k, stale_v, np.ascontiguousarray(new_k), np.ascontiguousarray(new_v)]
    got = cuda_emulator.run_kernel(kernel, step.grid, step.block, buffers, HOOKS, extra, setup)
    return got[0]


@NEEDS_GXX
@pytest.mark.parametrize("pos", [0, 32, 96])
def test_rows_written_this_step_are_loaded_after_the_wait(pos: int) -> None:
    """With stale rows until the wait, the kernel still matches the reference over the new
    rows; the same kernel without its reload does not (the emulation sees the hazard)."""
    graph = _decode()
    plan = lower_cuda(graph, in_place=in_place_candidates(graph))
    step = _attention_step(plan)
    kernel = plan.kernels[step.kernel]
    rng = np.random.default_rng(pos)
    inputs = {
        "q": rng.standard_normal((1, 4, 1, D)).astype(np.float16),
        "k_new": rng.standard_normal((1, HEADS, 1, D)).astype(np.float16),
        "v_new": rng.standard_normal((1, HEADS, 1, D)).astype(np.float16),
        "k_cache": rng.standard_normal((1, HEADS, SMAX, D)).astype(np.float16),
        "v_cache": rng.standard_normal((1, HEADS, SMAX, D)).astype(np.float16),
        "pos": np.array([pos], np.int32),
        "kv_len": np.array([pos + 1], np.int32),
    }
    want = run_reference(graph, inputs, {})["o"].astype(np.float64)
    got = _run_hazard(_hazard_kernel(kernel), step, inputs).astype(np.float64)
    np.testing.assert_allclose(got, want, atol=2e-3)
    broken = _run_hazard(_hazard_kernel(kernel, reload=False), step, inputs).astype(np.float64)
    assert np.abs(broken - want).max() > 0.02  # ten times the tolerance above
