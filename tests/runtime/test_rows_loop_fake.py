"""runtime/cuda/rows_loop.py on the fake CuPy (tests/support/fake_cupy.py): the host side of the
GPU loop for a batch of prompts. The per-row decode step is bound twice over two sets of caches
(the runtime accepts both bindings: no output shares an input's bytes), the prefill over set 0;
a batch of B rows takes one prefill, one decode replay a step (the bindings alternating), B
sampling launches a step, each pointed at its row (the prefill's last real row of each prompt,
the row's position and kv_len advanced from its own length), and one event wait a step, never a
stream synchronization per token. The fake runs no kernels but the sampling one, computed in
Python by `test_decode_loop_fake`'s emulation, so every row's tokens are the definition's draws
on zero logits."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import optgraph as og
from optgraph.api.batch_generation import rows_inputs
from optgraph.api.generation import CompiledStep, compile_step
from optgraph.api.sampling import Sampling, sample
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.frontends.llama_config import LlamaConfig, LlamaStep, LlamaWeights
from optgraph.frontends.llama_ir import llama_ir
from optgraph.frontends.step_graphs import llama_ir_step
from optgraph.reference.interpreter import random_weights
from tests.runtime import test_decode_loop_fake as single
from tests.support.fake_cupy import fake_cupy

ROWS, BUCKET, CACHE = 3, 8, 32


def _step(step: LlamaStep) -> tuple[CompiledStep, dict[str, np.ndarray]]:
    graph = og.parse(llama_ir(LlamaConfig(), step, LlamaWeights()))
    compiled = compile_step(graph, "default", "cuda", LoweringOptions())
    return CompiledStep(llama_ir_step(graph), compiled), random_weights(graph, seed=0)


@pytest.fixture(scope="module")
def steps() -> tuple[tuple[CompiledStep, dict[str, np.ndarray]], ...]:
    decode = _step(LlamaStep(batch=ROWS, seq=1, cache_len=CACHE, per_row=True))
    prefill = _step(LlamaStep(batch=ROWS, seq=BUCKET, cache_len=CACHE))
    return decode, prefill


def _run(
    monkeypatch: pytest.MonkeyPatch, steps: Any, prompts: list[list[int]], new: int,
    settings: Sampling, stop: set[int],
) -> tuple[Any, Any, list[tuple[int, int]], dict[str, int]]:  # fmt: skip
    (decode, weights), (prefill, prefill_weights) = steps
    with fake_cupy(monkeypatch) as fake:
        from tests.support import fake_cupy as fakes

        single._sampling_kernel(fake, {"logits": np.float32, "token": np.int32})
        syncs = {"stream": 0, "event": 0}

        def counted(kind: str) -> Any:
            def synchronize(self: Any) -> None:
                syncs[kind] += 1

            return synchronize

        monkeypatch.setattr(fakes.Stream, "synchronize", counted("stream"))
        monkeypatch.setattr(fakes.Event, "synchronize", counted("event"))
        from optgraph.runtime.cuda.rows_loop import DeviceRowsLoop

        loop = DeviceRowsLoop(decode, weights, threads=64)
        bound = loop.prepare(prefill, prefill_weights)
        feed = rows_inputs(prefill.step, prompts, [0] * ROWS)
        fake.launches.clear()
        graphs = fake.graph_launches
        syncs.update(stream=0, event=0)
        got = list(loop.tokens(prompts, new, settings, stop, prefill, prefill_weights, feed))
        counts = {"graphs": fake.graph_launches - graphs, **syncs}
        counts["samplers"] = sum(n.startswith("og_sample_") for n in fake.launches)
        return loop, bound, got, counts


def test_a_batch_takes_one_replay_and_a_launch_a_row_a_step(
    monkeypatch: pytest.MonkeyPatch, steps: Any
) -> None:
    prompts = [[5, 9, 3], [7], [1, 2, 3, 4, 5, 6]]
    settings = Sampling(temperature=1.0, top_k=20, seed=3)
    new = 12
    loop, bound, got, counts = _run(monkeypatch, steps, prompts, new, settings, set())
    zeros = np.zeros(loop.vocab, np.float32)  # the fake computes no logits
    expected = [sample(zeros, settings, i) for i in range(new)]
    assert len(set(expected)) > 3  # the step counter and the seed reached every row's kernel
    for b in range(ROWS):
        assert [t for r, t in got if r == b] == expected, b
    assert [r for r, _ in got[:ROWS]] == list(range(ROWS))  # a step's rows in order
    assert counts == {"graphs": new, "stream": 1, "event": new, "samplers": ROWS * new}
    lengths = np.array([len(p) for p in prompts])
    assert loop.position.get().tolist() == (lengths + new - 1).tolist()
    assert loop.kv_len.get().tolist() == (lengths + new).tolist()
    first = [(b * BUCKET + n - 1) * loop.vocab for b, n in enumerate(lengths)]
    assert loop.prefill_iconf.get()[:, 0].tolist() == first
    assert loop.iconf.get()[:, 0].tolist() == [b * loop.vocab for b in range(ROWS)]
    assert bound.inputs["tokens"].get().reshape(ROWS, BUCKET)[1].tolist() == [7] + [0] * 7
    # the two decode bindings: set 0 -> set 1 and back, the controls and logits shared
    zero, one = loop.decodes
    cache = zero.step.cache_inputs[0]
    assert (
        zero.inputs[cache] is loop.caches[0][cache] and one.inputs[cache] is loop.caches[1][cache]
    )
    assert bound.inputs[bound.step.cache_inputs[0]] is loop.caches[0][bound.step.cache_inputs[0]]
    assert zero.inputs["tokens"] is one.inputs["tokens"] and zero.logits is one.logits


def test_rows_end_at_a_stop_token(monkeypatch: pytest.MonkeyPatch, steps: Any) -> None:
    settings = Sampling(temperature=1.0, seed=8)
    zeros = np.zeros(steps[0][0].step.vocab, np.float32)
    expected = [sample(zeros, settings, i) for i in range(20)]
    stop = {expected[5]}
    ended = expected[: expected.index(expected[5]) + 1]
    _, _, got, counts = _run(monkeypatch, steps, [[1], [2, 3], [4]], 20, settings, stop)
    for b in range(ROWS):
        assert [t for r, t in got if r == b] == ended
    assert counts["event"] == len(ended)  # no read past the step where every row ended
