"""Attention with sinks (a logit per query head, gpt-oss) in every attention kernel, run in the
CPU emulator against the reference: the wide decode kernel with one key chunk and several (the
sink joins once, at the merge), the earlier decode kernel (one chunk and several), the tiled
prefill kernel, the row kernel of large heads, and the tensor-core path's two softmax row
kernels, and the wide kernel reading its cache before the PDL wait. Each case checks which
kernel its node takes, so a change of the variant rules cannot leave a kernel untested, and that
the sinks change the result (a kernel that dropped them would fail). Skipped where g++ (C++20)
is missing."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.cuda_source import Launch
from optgraph.codegen.kernels.attention import (
    decode,
    decode_wide_layout,
    prefill_gemm,
    variants,
)
from optgraph.codegen.kernels.attention.head_rows import attention_shape
from optgraph.codegen.lower_cuda import KernelStep, lower_cuda
from optgraph.codegen.plan.in_place_outputs import in_place_candidates
from optgraph.reference.interpreter import nmse, random_inputs, run_reference
from tests.support import cuda_emulator

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
BOUNDS = {"f32": 1e-7, "f16": 1e-6, "bf16": 1e-4}


def _graph(dtype: str, q: str, kv: str, attrs: str, sinks: str = "f32", mask: str = "") -> og.Graph:
    """attention(q, k, v, len, s[, m]) with sinks of dtype `sinks`."""
    heads = q.split(",")[1]
    mask_input = f"  input %m : {mask}\n" if mask else ""
    text = f"""graph sinks {{
  input %q : {dtype}[{q}]
  input %k : {dtype}[{kv}]
  input %v : {dtype}[{kv}]
  input %len : i32[1]
  input %s : {sinks}[{heads}]
{mask_input}  %o = attention(%q, %k, %v, %len, %s{", %m" if mask else ""}) {{{attrs}}} : {dtype}[{q}]
  output %o
}}
"""
    return og.parse(text)


def _launches(graph: og.Graph) -> list[str]:
    """The names of the kernels the attention node lowers to."""
    types = graph.value_types()
    node = next(n for n in graph.nodes if n.op == "attention")
    steps = variants.emit(node, tuple(types[o] for o in node.operands))
    return [s.kernel.name for s in steps if isinstance(s, Launch)]


def _inputs(graph: og.Graph, length: int, seed: int) -> dict[str, np.ndarray]:
    inputs = random_inputs(graph, seed)
    inputs["len"] = np.array([length], np.int32)
    heads = inputs["s"].shape[0]
    rng = np.random.default_rng(seed)
    sinks = rng.normal(1.0, 2.0, heads)
    sinks[0] = 6.0  # a sink above most scores: most of head 0's weight
    inputs["s"] = sinks.astype(inputs["s"].dtype)
    return inputs


def _check(graph: og.Graph, inputs: dict[str, np.ndarray], lowered: bool = False) -> None:
    """`lowered`: through `lower_cuda` (cuBLAS steps emulated) rather than kernels alone."""
    want = run_reference(graph, inputs, {})["o"]
    if lowered:
        got = cuda_emulator.run_plan(lower_cuda(graph), inputs, {})["o"]
    else:
        got = cuda_emulator.run_graph(graph, inputs, {})["o"]
    dtype = graph.value_types()["o"].dtype
    err = nmse(np.asarray(got, np.float64), np.asarray(want, np.float64))
    assert err <= BOUNDS[dtype], f"nmse {err:.3e} > {BOUNDS[dtype]:g}"
    no_sinks = {**inputs, "s": np.full_like(inputs["s"], -np.inf)}
    plain = run_reference(graph, no_sinks, {})["o"]
    assert nmse(np.asarray(got, np.float64), np.asarray(plain, np.float64)) > 1e-3


@pytest.mark.parametrize(("dtype", "keys", "chunks"), [("f16", 100, 1), ("f32", 1100, 2)])
def test_wide_decode_adds_the_sink_once(
    dtype: str, keys: int, chunks: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(decode_wide_layout, "MAX_CHUNKS", 2)
    graph = _graph(dtype, "1,8,1,64", f"1,2,{keys},64", "sinks = true", sinks=dtype)
    types = graph.value_types()
    node = graph.nodes[-1]
    shape = attention_shape(node, tuple(types[o] for o in node.operands))
    assert decode_wide_layout.wide_layout(shape).chunks == chunks
    assert _launches(graph)[0].startswith("og_attention_decode_wide_")
    _check(graph, _inputs(graph, keys - 23, 1))


@pytest.mark.parametrize("max_chunks", [1, 16])
def test_earlier_decode_kernel(max_chunks: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(variants, "WIDE_DECODE", False)
    monkeypatch.setattr(decode, "MAX_CHUNKS", max_chunks)
    graph = _graph("bf16", "1,4,2,32", "1,2,300,32", "causal = true, sinks = true")
    types = graph.value_types()
    node = graph.nodes[-1]
    shape = attention_shape(node, tuple(types[o] for o in node.operands))
    assert (decode._layout(shape)[3] > 1) == (max_chunks > 1)
    name = _launches(graph)[0]
    assert name.startswith("og_attention_decode_") and "wide" not in name
    _check(graph, _inputs(graph, 261, 2))


@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_tiled_prefill_with_window_and_mask(dtype: str) -> None:
    graph = _graph(
        dtype, "1,4,40,64", "1,2,40,64", "causal = true, window = 9, masked = true, sinks = true",
        mask="bool[1,1,40,40]",
    )  # fmt: skip
    assert _launches(graph)[0].startswith("og_attention_tiled_")
    inputs = _inputs(graph, 40, 3)
    inputs["m"] = np.random.default_rng(3).random((1, 1, 40, 40)) < 0.85
    _check(graph, inputs)


def test_row_kernel_of_large_heads() -> None:
    graph = _graph("f32", "1,2,3,288", "1,1,20,288", "causal = true, sinks = true")
    assert _launches(graph)[0].startswith("og_attention_") and all(
        kind not in _launches(graph)[0] for kind in ("decode", "tiled")
    )
    _check(graph, _inputs(graph, 17, 4))


@pytest.mark.parametrize("warp_rows", [0, 4])
def test_tensor_core_softmax_rows(warp_rows: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(variants, "GEMM_PREFILL_MIN_ROWS", 4)
    monkeypatch.setattr(prefill_gemm, "WARP_ROWS", warp_rows)
    graph = _graph("f16", "1,4,24,32", "1,2,24,32", "causal = true, sinks = true")
    names = _launches(graph)
    assert len(names) == 1 and names[0].startswith("og_attention_softmax_")
    _check(graph, _inputs(graph, 24, 5), lowered=True)


def test_a_row_that_sees_no_key_yields_zeros_despite_its_sink() -> None:
    graph = _graph("f16", "1,8,1,64", "1,2,100,64", "sinks = true", sinks="f16")
    inputs = _inputs(graph, 0, 6)
    got = cuda_emulator.run_graph(graph, inputs, {})["o"]
    assert not np.any(np.asarray(got, np.float64))


IN_PLACE_DECODE = """graph decode {
  input %q : f16[1,4,1,64]
  input %k_new : f16[1,2,1,64]
  input %v_new : f16[1,2,1,64]
  input %k_cache : f16[1,2,96,64]
  input %v_cache : f16[1,2,96,64]
  input %pos : i32[1]
  input %kv_len : i32[1]
  input %s : f16[4]
  %kc = kv_cache_write(%k_cache, %k_new, %pos) : f16[1,2,96,64]
  %vc = kv_cache_write(%v_cache, %v_new, %pos) : f16[1,2,96,64]
  %o = attention(%q, %kc, %vc, %kv_len, %s) {causal = true, sinks = true} : f16[1,4,1,64]
  output %o, %kc, %vc
}
"""


def test_decode_with_early_cache_reads_keeps_the_sinks() -> None:
    """The wide kernel with the step's cache rows read after the PDL wait (its position one more
    parameter after the sinks): lowered with the caches in place, against the reference."""
    graph = og.parse(IN_PLACE_DECODE)
    plan = lower_cuda(graph, in_place=in_place_candidates(graph))
    (step,) = [s for s in plan.steps if isinstance(s, KernelStep) and s.node == "o"]
    kernel = plan.kernels[step.kernel]
    assert kernel.self_wait and kernel.name.startswith("og_attention_decode_wide_")
    assert "in4[" in (kernel.body or "") and "in5[0]" in (kernel.body or "")  # sinks, position
    inputs = _inputs(graph, 41, 7)
    inputs["kv_len"], inputs["pos"] = inputs.pop("len"), np.array([40], np.int32)
    want = run_reference(graph, inputs, {})
    got = cuda_emulator.run_plan(plan, inputs, {})
    for name in ("o", "kc", "vc"):
        err = nmse(np.asarray(got[name], np.float64), np.asarray(want[name], np.float64))
        assert err <= BOUNDS["f16"], f"%{name}: nmse {err:.3e}"
