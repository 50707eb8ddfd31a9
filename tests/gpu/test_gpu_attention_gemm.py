"""The tensor-core prefill attention (codegen/kernels/attention/prefill_gemm.py) on the GPU, switched on with
`variants.GEMM_PREFILL_MIN_ROWS`: the emulator's graph of every attention variant
(unplanned: scratch in value buffers) and a Llama-sized prefill layer memory-planned (scratch
past the arena), each eager then replayed, within the bounds and bit-identical across the two."""

from __future__ import annotations

import pytest

import optgraph as og
from tests.codegen.test_attention_gemm_emulated import PREFILL
from tests.support.gpu_support import assert_close, reference, require_gpu, same_bits

pytestmark = pytest.mark.gpu
require_gpu()

from optgraph.api.programs import cuda_program, plan_graph
from optgraph.codegen.kernels.attention import variants
from optgraph.codegen.lower_cuda import GemmStep

LAYER = """graph prefill_layer {
  input %q : f16[1,32,512,128]
  input %k : f16[1,8,512,128]
  input %v : f16[1,8,512,128]
  %o = attention(%q, %k, %v) {causal = true} : f16[1,32,512,128]
  %t = attention(%q, %k, %v) {causal = true, causal_align = "top_left", window = 128} : f16[1,32,512,128]
  output %o, %t
}
"""


@pytest.fixture(autouse=True)
def gemm_attention(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(variants, "GEMM_PREFILL_MIN_ROWS", 4)


def _run_twice(graph: og.Graph, source: og.Graph) -> None:
    inputs, weights, want = reference(graph)
    program = cuda_program(source, weights=weights)
    assert any(isinstance(s, GemmStep) for s in program.lowered.main.plan.steps)
    first = program.run(inputs)  # eager, then capture
    second = program.run(inputs)  # replay
    assert_close(graph, first, want)
    assert same_bits(first, second)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_gemm_attention_variants_match_reference(dtype: str) -> None:
    graph = og.parse(PREFILL.replace("{T}", dtype))
    _run_twice(graph, graph)


def test_gemm_attention_planned_prefill_layer_matches_reference() -> None:
    graph = og.parse(LAYER)
    _run_twice(graph, plan_graph(graph, "default"))


@pytest.mark.parametrize("planned", [False, True])
def test_chunked_gemm_attention_matches_reference(
    planned: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Llama layer with a scratch cap of 3 kv heads' scores: chunks of 3, 3 and 2 heads
    (each one's operands at its byte offsets, one scratch reused) against the reference."""
    from optgraph.codegen.kernels.attention import prefill_gemm

    monkeypatch.setattr(prefill_gemm, "MAX_SCRATCH_BYTES", 3 * 4 * 512 * 512 * 4)
    graph = og.parse(LAYER)
    source = plan_graph(graph, "default") if planned else graph
    program = cuda_program(source)
    gemms = [s for s in program.lowered.main.plan.steps if isinstance(s, GemmStep)]
    assert [s.gemm.batch for s in gemms if s.node == "o"] == [3, 3, 3, 3, 2, 2]
    program.close()
    _run_twice(graph, source)


@pytest.mark.parametrize("vector", [True, False])
def test_block_softmax_rows_match_reference(vector: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """The block-per-row softmax (as beyond WARP_MAX_KEYS keys), float4 reads or scalar ones,
    on the emulator's variants with 12 keys and on the Llama layer."""
    from optgraph.codegen.kernels.attention import prefill_gemm

    monkeypatch.setattr(prefill_gemm, "WARP_ROWS", 0)
    monkeypatch.setattr(prefill_gemm, "VECTOR_ROWS", vector)
    text = PREFILL.replace("{T}", "f16").replace(",9,", ",12,").replace(",9]", ",12]")
    graph = og.parse(text)
    _run_twice(graph, graph)
    graph = og.parse(LAYER)
    _run_twice(graph, plan_graph(graph, "default"))
