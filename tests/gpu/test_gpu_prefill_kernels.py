"""The prefill's bandwidth kernels on the GPU, each setting on and off: the emulator's graphs
(tests/codegen/test_prefill_kernels_emulated.py: elementwise regions and product epilogues with
broadcast operands and a misaligned view, widened transposes and slices, rope with several heads
a thread, the warp-per-row softmax, residual adds after products) unplanned and memory-planned,
and a 2-layer Llama prefill of realistic width (the whole-model bound of `optgraph run --check`), each eager then replayed, within the bounds and bit-identical across the two."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from tests.codegen.test_prefill_kernels_emulated import (
    ELEMENTWISE,
    FUSED,
    MOVEMENT,
    PREFILL,
    RESIDUAL,
)
from tests.support.gpu_support import assert_close, reference, require_gpu, same_bits

pytestmark = pytest.mark.gpu
require_gpu()

from optgraph.api.programs import cuda_program
from optgraph.codegen.kernels import data_movement, elementwise, rope
from optgraph.codegen.kernels.attention import prefill_gemm, variants
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import nmse
from optgraph.runtime.cuda.runner import CHECK_BOUNDS

ROOT = Path(__file__).resolve().parents[2]
OFF = {
    (elementwise, "VECTOR_LOADS"): False,
    (data_movement, "VECTOR_COPIES"): False,
    (rope, "HEADS_PER_THREAD"): 1,
    (prefill_gemm, "WARP_ROWS"): 0,
}


@pytest.fixture(params=["on", "off"])
def settings(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The settings as they are, or all off."""
    monkeypatch.setattr(variants, "GEMM_PREFILL_MIN_ROWS", 4)
    if request.param == "off":
        for (module, name), value in OFF.items():
            monkeypatch.setattr(module, name, value)
    return str(request.param)


def _run_twice(graph: og.Graph, source: og.Graph, bound: float | None = None) -> None:
    """Eager then replayed, bit-identical; within the per-dtype bounds, or NMSE `bound` (a
    whole model: `optgraph run --check`'s)."""
    inputs, weights, want = reference(graph)
    program = cuda_program(source, weights=weights)
    first = program.run(inputs)  # eager, then capture
    second = program.run(inputs)  # replay
    program.close()
    assert same_bits(first, second)
    if bound is None:
        assert_close(graph, first, want)
        return
    for name in graph.output_names():
        err = nmse(np.asarray(first[name], np.float64), np.asarray(want[name], np.float64))
        assert err <= bound, f"%{name}: nmse {err:.3e} > {bound:g}"


@pytest.mark.usefixtures("settings")
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize(
    "text", [ELEMENTWISE, MOVEMENT, PREFILL, RESIDUAL], ids=["elem", "move", "attn", "residual"]
)
def test_prefill_kernels_match_reference(text: str, dtype: str) -> None:
    graph = og.parse(text.replace("{T}", dtype))
    _run_twice(graph, graph)
    _run_twice(graph, run_pipeline(graph, FUSED))


@pytest.mark.usefixtures("settings")
def test_two_layer_llama_prefill_matches_reference() -> None:
    sys.path.insert(0, str(ROOT / "examples"))
    from gen_llama import generate_llama

    text = generate_llama(
        layers=2, hidden=1024, heads=8, kv_heads=2, ffn=2816, vocab=512, dtype="f16",
        batch=1, seq=128, cache_len=128, mode="prefill",
    )  # fmt: skip
    graph = og.parse(text)
    _run_twice(graph, run_pipeline(graph, FUSED), CHECK_BOUNDS["f16"])
