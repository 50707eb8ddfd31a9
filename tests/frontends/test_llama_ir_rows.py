"""llama_ir's decode step with positions per row (`LlamaStep.per_row`): B sequences of different
lengths, each left-aligned in its cache, in one step give each row what that row's own batch-1
step gives (logits and updated cache rows), through the reference interpreter and the planned
CPU executor."""

from __future__ import annotations

import numpy as np
import pytest

from optgraph.api.generation import compile_step
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.frontends.llama_config import LlamaConfig, LlamaStep
from optgraph.frontends.llama_ir import llama_ir
from optgraph.ir.graph import Graph
from optgraph.ir.parser import parse
from optgraph.reference.interpreter import run_reference

# a window on the first of every two layers, q/k norms, biases: the per-row paths of each
CONFIG = LlamaConfig(
    layers=2, hidden=32, heads=4, kv_heads=2, ffn=48, vocab=40, qk_norm=True, bias=("q", "k", "v"),
    window=3, window_pattern=2,
)  # fmt: skip
CACHE = 12


def _graph(batch: int, seq: int, per_row: bool) -> Graph:
    return parse(
        llama_ir(CONFIG, LlamaStep(batch=batch, seq=seq, cache_len=CACHE, per_row=per_row))
    )


def _weights(graph: Graph) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        w.name: (rng.standard_normal(w.type.shape) * 0.3).astype(np.float32) for w in graph.weights
    }


def _caches(graph: Graph, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        i.name: rng.standard_normal(i.type.shape).astype(np.float32)
        for i in graph.inputs
        if i.name.endswith("_cache")
    }


@pytest.mark.parametrize("seq", [1, 2])
@pytest.mark.parametrize("executor", ["reference", "planned"])
def test_rows_equal_their_own_steps(seq: int, executor: str) -> None:
    starts = [4, 9, 0]  # rows of different lengths: each writes at its own position
    rows = _graph(len(starts), seq, per_row=True)
    one = _graph(1, seq, per_row=False)
    weights = _weights(one)
    rng = np.random.default_rng(1)
    caches = _caches(rows, rng)
    tokens = rng.integers(0, CONFIG.vocab, len(starts) * seq).astype(np.int32)
    pos = np.concatenate([np.arange(s, s + seq) for s in starts]).astype(np.int32)
    feed = {"tokens": tokens, "pos": pos, "kv_len": np.array(starts, np.int32) + seq, **caches}

    def run(graph: Graph, inputs: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        if executor == "reference":
            return run_reference(graph, inputs, weights)
        program = compile_step(graph, "default", "cpu", LoweringOptions())
        return {k: np.asarray(v) for k, v in program.run(inputs, weights, seed=None).items()}

    out = run(rows, feed)
    assert out["logits"].shape == (len(starts) * seq, CONFIG.vocab)
    for b, start in enumerate(starts):
        alone = {
            "tokens": tokens[b * seq : (b + 1) * seq],
            "pos": np.arange(start, start + seq, dtype=np.int32),
            "kv_len": np.array([start + seq], np.int32),
            **{name: cache[b : b + 1] for name, cache in caches.items()},
        }
        expected = run(one, alone)
        rows_out = slice(b * seq, (b + 1) * seq)
        np.testing.assert_allclose(
            out["logits"][rows_out], expected["logits"], rtol=1e-5, atol=1e-5
        )
        for name in caches:
            new = f"{name}_new"
            np.testing.assert_allclose(out[new][b : b + 1], expected[new], rtol=1e-6, atol=1e-6)
            # the row's own new rows are written, every other row of its cache is kept
            kept = np.delete(np.arange(CACHE), np.arange(start, start + seq))
            np.testing.assert_array_equal(out[new][b][:, kept], caches[name][b][:, kept])


def test_per_row_needs_decode() -> None:
    with pytest.raises(ValueError, match="per-row positions need mode decode"):
        llama_ir(CONFIG, LlamaStep(batch=2, mode="prefill", per_row=True))


def test_the_cuda_lowering_in_the_emulator_equals_the_reference() -> None:
    """The per-row step's CUDA kernels (attention with `kv_len [B]`, the rows' kv_cache_writes
    into slices, their concat), every kernel emulated on the CPU, give the reference's logits and
    caches; no cache comes out in place (the concat copies: docs/generate.md)."""
    from optgraph.codegen.lower_cuda import lower_cuda
    from optgraph.codegen.plan.in_place_outputs import in_place_candidates
    from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
    from optgraph.reference.interpreter import nmse
    from tests.support import cuda_emulator

    if not cuda_emulator.available():
        pytest.skip("needs g++")
    rows = _graph(3, 1, per_row=True)
    weights = _weights(rows)
    starts = np.array([4, 9, 0], np.int32)
    feed = {"tokens": np.array([3, 7, 11], np.int32), "pos": starts, "kv_len": starts + 1}
    feed |= _caches(rows, np.random.default_rng(1))
    want = run_reference(rows, feed, weights)
    planned = run_pipeline(rows, DEFAULT_PIPELINE)
    pairs = in_place_candidates(planned)
    assert pairs == {}
    plan = lower_cuda(planned, in_place=pairs)
    got = cuda_emulator.run_plan(plan, {k: v.copy() for k, v in feed.items()}, weights, planned)
    for name in rows.output_names():
        error = nmse(np.asarray(got[name], np.float64), np.asarray(want[name], np.float64))
        assert error <= 1e-10, f"%{name}: nmse {error:.3g}"
