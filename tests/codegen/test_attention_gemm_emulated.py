"""The tensor-core prefill attention (codegen/kernels/attention/prefill_gemm.py: two cuBLAS products around
a softmax row kernel) run in the CPU emulator against the reference, with
`variants.GEMM_PREFILL_MIN_ROWS` switched on: f32/f16/bf16, grouped-query heads, causal
bottom-right and top-left, kv_len (one and per batch), windows, softcap, bool and float masks;
unplanned (scratch in a value buffer) and memory-planned (scratch past the arena) plans."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.api.programs import plan_graph
from optgraph.codegen.kernels.attention import prefill_gemm, variants
from optgraph.codegen.kernels.attention.head_rows import attention_shape
from optgraph.codegen.lower_cuda import GemmStep, KernelStep, lower_cuda
from optgraph.ir.graph import DTYPE_BYTES
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.codegen.test_cuda_emulated import BOUNDS
from tests.support import cuda_emulator

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")

PREFILL = """graph prefill {
  input %q : {T}[2,4,5,16]
  input %k : {T}[2,2,9,16]
  input %v : {T}[2,2,9,16]
  input %len : i32[1]
  input %blen : i32[2]
  input %m : bool[2,1,5,9]
  input %fm : {T}[1,4,5,9]
  %c = attention(%q, %k, %v) {causal = true} : {T}[2,4,5,16]
  %t = attention(%q, %k, %v) {causal = true, causal_align = "top_left", softcap = 2.0} : {T}[2,4,5,16]
  %l = attention(%q, %k, %v, %len) {causal = true, window = 3} : {T}[2,4,5,16]
  %b = attention(%q, %k, %v, %blen, %m) {causal = true, masked = true} : {T}[2,4,5,16]
  %f = attention(%q, %k, %v, %fm) {masked = true, scale = 0.5} : {T}[2,4,5,16]
  %s = attention(%q, %q, %q) {causal = true} : {T}[2,4,5,16]
  %o = add(%c, %t) : {T}[2,4,5,16]
  output %o, %l, %b, %f, %s
}
"""


@pytest.fixture
def gemm_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(variants, "GEMM_PREFILL_MIN_ROWS", 4)


def _inputs(graph: og.Graph) -> dict[str, np.ndarray]:
    inputs = random_inputs(graph, 3)
    lengths = {"len": np.array([7], np.int32), "blen": np.array([9, 4], np.int32)}
    return inputs | {k: v for k, v in lengths.items() if k in inputs}


def _check(graph: og.Graph, plan_source: og.Graph) -> None:
    inputs, weights = _inputs(graph), random_weights(graph, 3)
    want = run_reference(graph, inputs, weights)
    plan = lower_cuda(plan_source)
    attention = {n.name for n in graph.nodes if n.op == "attention"}
    gemms = [s for s in plan.steps if isinstance(s, GemmStep)]
    assert {s.node for s in gemms} == attention
    types = graph.value_types()
    chunks = {
        n.name: len(prefill_gemm.chunks(attention_shape(n, tuple(types[o] for o in n.operands))))
        for n in graph.nodes
        if n.op == "attention"
    }
    assert len(gemms) == 2 * sum(chunks.values())
    softmax = [s for s in plan.steps if isinstance(s, KernelStep) and "softmax" in s.kernel]
    assert len(softmax) == sum(chunks.values())
    for step in gemms[1::2]:  # p·v reads the probabilities where each row's f32 scores were
        key_count = step.gemm.k
        assert step.gemm.ldb * DTYPE_BYTES[step.gemm.dtype] == key_count * 4
    got = cuda_emulator.run_plan(plan, inputs, weights)
    for name in graph.output_names():
        err = nmse(np.asarray(got[name], np.float64), np.asarray(want[name], np.float64))
        bound = BOUNDS[types[name].dtype]
        assert err <= bound, f"%{name} ({types[name]}): nmse {err:.3e} > {bound:g}"


@pytest.mark.usefixtures("gemm_attention")
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_gemm_attention_unplanned_matches_reference(dtype: str) -> None:
    graph = og.parse(PREFILL.replace("{T}", dtype))
    _check(graph, graph)


@pytest.mark.usefixtures("gemm_attention")
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_gemm_attention_planned_matches_reference(dtype: str) -> None:
    graph = og.parse(PREFILL.replace("{T}", dtype))
    planned = plan_graph(graph, "default")
    plan = lower_cuda(planned)
    top = max(n.ann.offset + n.ann.size for n in planned.nodes if n.ann.offset is not None)
    scratch = {s.c.offset for s in plan.steps if isinstance(s, GemmStep) and s.gemm.c == "scratch"}
    assert scratch and min(scratch) >= top  # past every planned buffer
    assert plan.arena_bytes >= max(scratch) + 2 * 4 * 5 * 9 * 4
    _check(graph, planned)


def test_gemm_attention_is_off_below_the_default_threshold() -> None:
    graph = og.parse(PREFILL.replace("{T}", "f16"))  # fewer query rows than the threshold
    plan = lower_cuda(graph)
    assert variants.GEMM_PREFILL_MIN_ROWS == 64
    assert not any(isinstance(s, GemmStep) for s in plan.steps)
    assert not any(k.endswith("#scratch") for k in plan.value_bytes)


def test_a_long_prompt_runs_in_chunks_of_kv_heads_within_the_scratch_cap() -> None:
    graph = og.parse("""graph long {
  input %q : f16[1,32,4096,128]
  input %k : f16[1,8,4096,128]
  %d = attention(%q, %k, %k) {causal = true} : f16[1,32,4096,128]
  output %d
}
""")
    plan = lower_cuda(graph)  # 32 x 4096 x 4096 f32 scores: 2 GiB, 8 x the cap
    gemms = [s for s in plan.steps if isinstance(s, GemmStep)]
    assert len(gemms) == 2 * 8 and all(s.gemm.batch == 1 for s in gemms)
    assert plan.value_bytes["d#scratch"] == prefill_gemm.MAX_SCRATCH_BYTES
    graph = og.parse("""graph too_long {
  input %q : f16[1,32,8192,128]
  input %k : f16[1,8,8192,128]
  %d = attention(%q, %k, %k) {causal = true} : f16[1,32,8192,128]
  output %d
}
""")  # one kv head's 4 x 8192 x 8192 scores alone exceed the cap: the tiled kernel
    assert not any(isinstance(s, GemmStep) for s in lower_cuda(graph).steps)
    graph = og.parse("""graph prompt {
  input %q : f16[1,32,512,128]
  input %k : f16[1,8,512,128]
  %d = attention(%q, %k, %k) {causal = true} : f16[1,32,512,128]
  output %d
}
""")
    assert sum(isinstance(s, GemmStep) for s in lower_cuda(graph).steps) == 2  # on by default


@pytest.mark.usefixtures("gemm_attention")
@pytest.mark.parametrize("dtype", ["f32", "f16"])
@pytest.mark.parametrize("planned", [False, True])
def test_chunked_gemm_attention_matches_reference(
    dtype: str, planned: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cap that fits 2 of the 4 kv heads' scores (B·Hkv = 4 -> chunks of 2), 1 of them
    (chunks of 1), and 3 (chunks of 2 and 2): every chunk reads and writes its own heads."""
    graph = og.parse(PREFILL.replace("{T}", dtype))
    head = 2 * 5 * 9 * 4  # one kv head: 2 query heads x 5 rows x 9 keys of f32
    for fit, sizes in ((2, [2, 2]), (1, [1, 1, 1, 1]), (3, [2, 2])):
        monkeypatch.setattr(prefill_gemm, "MAX_SCRATCH_BYTES", fit * head)
        plan = lower_cuda(plan_graph(graph, "default") if planned else graph)
        node = next(n.name for n in graph.nodes if n.op == "attention")
        batches = [s.gemm.batch for s in plan.steps if isinstance(s, GemmStep) and s.node == node]
        assert batches == [n for n in sizes for _ in (0, 1)]
        _check(graph, plan_graph(graph, "default") if planned else graph)


@pytest.mark.usefixtures("gemm_attention")
def test_gemm_attention_threshold_keeps_decode_rows_on_the_kernels() -> None:
    graph = og.parse("""graph decode {
  input %q : f16[1,4,1,16]
  input %k : f16[1,2,9,16]
  %d = attention(%q, %k, %k) {causal = true} : f16[1,4,1,16]
  output %d
}
""")
    plan = lower_cuda(graph)
    assert not any(isinstance(s, GemmStep) for s in plan.steps)
    assert not plan.value_bytes.keys() - {"d"}


TWO_BRANCHES = """graph two_branches {
  input %q : f16[1,4,6,16]
  input %k : f16[1,2,6,16]
  input %v : f16[1,2,6,16]
  input %q2 : f16[1,4,6,16]
  %a = attention(%q, %k, %v) {causal = true} : f16[1,4,6,16]
  %b = attention(%q2, %k, %v) {causal = true} : f16[1,4,6,16]
  %o = add(%a, %b) : f16[1,4,6,16]
  output %o
}
"""
STREAMS = (
    "verify,assign-streams{max-streams=2,min-branch-us=0},insert-sync,analyze-lifetimes,plan-memory"
)


@pytest.mark.usefixtures("gemm_attention")
def test_gemm_attention_scratch_per_stream_does_not_overlap() -> None:
    graph = og.parse(TWO_BRANCHES)
    planned = run_pipeline(graph, STREAMS)
    streams = {n.name: n.stream for n in planned.nodes if n.op == "attention"}
    assert streams["a"] != streams["b"]  # the branches run concurrently
    plan = lower_cuda(planned)
    where = {s.node: s.c for s in plan.steps if isinstance(s, GemmStep) and s.gemm.c == "scratch"}
    size = 4 * 6 * 6 * 4
    low, high = sorted(loc.offset for loc in where.values())
    assert high >= low + size and plan.arena_bytes >= high + size
    _check(graph, planned)


@pytest.mark.usefixtures("gemm_attention")
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("vector", [True, False])
def test_block_softmax_rows_with_vector_reads_match_reference(
    dtype: str, vector: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """12 keys (a multiple of 4) and the block-per-row softmax (WARP_ROWS = 0, as beyond
    WARP_MAX_KEYS keys): float4 reads and 4-wide stores of every variant's rows, or the scalar
    ones, both against the reference, chunked too."""
    monkeypatch.setattr(prefill_gemm, "WARP_ROWS", 0)
    monkeypatch.setattr(prefill_gemm, "VECTOR_ROWS", vector)
    monkeypatch.setattr(prefill_gemm, "MAX_SCRATCH_BYTES", 2 * 2 * 5 * 12 * 4)
    graph = og.parse(PREFILL.replace("{T}", dtype).replace(",9,", ",12,").replace(",9]", ",12]"))
    plan = lower_cuda(graph)
    softmax = {s.kernel for s in plan.steps if isinstance(s, KernelStep) and "softmax" in s.kernel}
    sources = "\n".join(k.source for k in plan.kernels.values() if k.name in softmax)
    assert ("float4" in sources) == vector
    _check(graph, graph)


def test_the_chunks_of_a_plain_attention_share_one_softmax_kernel() -> None:
    """Without per-batch lengths, sinks or masks no row reads its head: one kernel text for all
    four chunks of SD-1.5's 4096-token self-attention; with a mask, one per chunk."""
    plain = og.parse("""graph a {
  input %q : f16[2,8,4096,40]
  %d = attention(%q, %q, %q) : f16[2,8,4096,40]
  output %d
}
""")
    plan = lower_cuda(plain)
    softmax = [s.kernel for s in plan.steps if isinstance(s, KernelStep) and "softmax" in s.kernel]
    assert len(softmax) == 4 and len(set(softmax)) == 1
    masked = og.parse("""graph m {
  input %q : f16[2,8,4096,40]
  input %m : bool[2,1,4096,4096]
  %d = attention(%q, %q, %q, %m) {masked = true} : f16[2,8,4096,40]
  output %d
}
""")
    plan = lower_cuda(masked)
    softmax = [s.kernel for s in plan.steps if isinstance(s, KernelStep) and "softmax" in s.kernel]
    assert len(softmax) == 4 and len(set(softmax)) == 4
