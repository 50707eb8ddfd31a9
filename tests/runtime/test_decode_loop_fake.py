"""runtime/cuda/decode_loop.py on the fake CuPy (tests/support/fake_cupy.py): the host side of the
GPU generation loop. The decode step is bound once (captured at set-up), a prompt's tokens come
from one sampling launch each, after one graph launch each, and are read back through the
history copies and events, never with a stream synchronization per token. The fake runs no
kernels but the sampling one, which this test computes in Python from its arguments (by the
NumPy definition), so the tokens read back show the step counter and the seed flowing through;
the decode step's logits stay zeros on the fake."""

from __future__ import annotations

import ctypes
import sys
from typing import Any

import numpy as np
import pytest

import optgraph as og
from optgraph.api.generation import CompiledStep, compile_step, step_inputs
from optgraph.api.sampling import Sampling, sample
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.frontends.llama_config import LlamaConfig, LlamaStep, LlamaWeights
from optgraph.frontends.llama_ir import llama_ir
from optgraph.frontends.step_graphs import llama_ir_step
from optgraph.reference.interpreter import random_weights
from tests.support.fake_cupy import fake_cupy


def _array(pointer: int, dtype: Any, count: int) -> np.ndarray:
    buffer = (ctypes.c_byte * (count * np.dtype(dtype).itemsize)).from_address(pointer)
    return np.frombuffer(buffer, dtype, count)


def _sampling_kernel(fake: Any, types: dict[str, Any]) -> None:
    """The fake's launches of `og_sample_*` compute the choice (module docstring)."""
    plain = fake.kernel

    def kernel(name: str) -> Any:
        if not name.startswith("og_sample_"):
            return plain(name)

        def launch(grid: Any, block: Any, args: tuple[int, ...], *rest: Any) -> None:
            def run() -> None:
                fake.launches.append(name)
                logits, iconf, fconf, state, token, position, kv_len, history = args
                offset, vocab, top_k, seed, capacity = _array(iconf, np.int64, 5)
                temperature, top_p = _array(fconf, np.float32, 2)
                row = _array(logits, types["logits"], int(offset + vocab))[offset:]
                step = int(_array(state, np.int64, 1)[0])
                settings = Sampling(float(temperature), int(top_k), float(top_p), int(seed))
                chosen = sample(row, settings, step)
                _array(token, types["token"], 1)[0] = chosen
                _array(history, np.int32, int(capacity))[step % capacity] = chosen
                _array(state, np.int64, 1)[0] = step + 1
                _array(position, np.int32, 1)[0] += 1
                _array(kv_len, np.int32, 1)[0] += 1

            fake.issue(f"KERNEL {name}", run)

        return launch

    fake.kernel = kernel


def _step(seq: int) -> tuple[CompiledStep, dict[str, np.ndarray]]:
    """llama_ir's decode form (2 layers, cache 32) taking `seq` tokens a run, lowered for cuda."""
    text = llama_ir(LlamaConfig(), LlamaStep(seq=seq, cache_len=32), LlamaWeights())
    step = llama_ir_step(og.parse(text))
    compiled = compile_step(step.graph, "default", "cuda", LoweringOptions())
    return CompiledStep(step, compiled), random_weights(step.graph, seed=0)


@pytest.fixture
def decode() -> tuple[CompiledStep, dict[str, np.ndarray]]:
    return _step(1)


def test_tokens_come_from_one_launch_each_without_a_synchronization_per_token(
    monkeypatch: pytest.MonkeyPatch, decode: tuple[CompiledStep, dict[str, np.ndarray]]
) -> None:
    compiled, weights = decode
    with fake_cupy(monkeypatch) as fake:
        from tests.support import fake_cupy as fakes

        _sampling_kernel(fake, {"logits": np.float32, "token": np.int32})
        syncs = {"stream": 0, "event": 0}

        def counted(kind: str) -> Any:
            def synchronize(self: Any) -> None:
                syncs[kind] += 1

            return synchronize

        monkeypatch.setattr(fakes.Stream, "synchronize", counted("stream"))
        monkeypatch.setattr(fakes.Event, "synchronize", counted("event"))
        from optgraph.runtime.cuda.decode_loop import LAG, DeviceDecodeLoop

        loop = DeviceDecodeLoop(compiled, weights, threads=64)
        setup_launches = fake.graph_launches  # the capture's eager run launches no graph
        prompt = [5, 9, 3]
        feeds = [step_inputs(compiled.step, [t], i) for i, t in enumerate(prompt)]
        settings = Sampling(temperature=1.0, top_k=20, seed=3)
        new = 20
        syncs.update(stream=0, event=0)
        tokens = list(loop.tokens(len(prompt), new, settings, set(), None, None, feeds))
        zeros = np.zeros(compiled.step.vocab, np.float32)  # the fake computes no logits
        assert tokens == [sample(zeros, settings, i) for i in range(new)]
        assert len(set(tokens)) > 3  # the step counter and the seed reached the kernel
        samplers = [n for n in fake.launches if n.startswith("og_sample_")]
        assert len(samplers) == new
        # every prompt token and every token after the first: one replay of the decode graph
        assert fake.graph_launches - setup_launches == len(prompt) + new - 1
        # one drain before the prompt and one a fed prompt token; one event wait a token
        assert syncs == {"stream": 1 + len(prompt), "event": new}
        assert LAG >= 2
        position = loop.decode.inputs["pos"].get()
        assert int(position[0]) == len(prompt) + new - 1  # the last token's position, advanced


def test_an_end_of_sequence_token_ends_the_loop(
    monkeypatch: pytest.MonkeyPatch, decode: tuple[CompiledStep, dict[str, np.ndarray]]
) -> None:
    compiled, weights = decode
    with fake_cupy(monkeypatch) as fake:
        _sampling_kernel(fake, {"logits": np.float32, "token": np.int32})
        from optgraph.runtime.cuda.decode_loop import DeviceDecodeLoop

        loop = DeviceDecodeLoop(compiled, weights, threads=64)
        settings = Sampling(temperature=1.0, seed=8)
        zeros = np.zeros(compiled.step.vocab, np.float32)
        expected = [sample(zeros, settings, i) for i in range(20)]
        stop = {expected[5]}
        feeds = [step_inputs(compiled.step, [1], 0)]
        tokens = list(loop.tokens(1, 20, settings, stop, None, None, feeds))
        assert tokens == expected[: expected.index(expected[5]) + 1]


def test_the_first_choice_waits_for_the_prefill_stream_and_reads_its_last_real_row(
    monkeypatch: pytest.MonkeyPatch, decode: tuple[CompiledStep, dict[str, np.ndarray]]
) -> None:
    compiled, weights = decode
    prefill, prefill_weights = _step(8)
    with fake_cupy(monkeypatch) as fake:
        _sampling_kernel(fake, {"logits": np.float32, "token": np.int32})
        waits: list[tuple[int, int]] = []
        runtime = sys.modules["cupy"].cuda.runtime
        record, wait = runtime.eventRecord, runtime.streamWaitEvent
        recorded: dict[int, int] = {}

        def record_event(event: int, stream: int) -> None:
            recorded[event] = stream
            record(event, stream)

        def wait_event(stream: int, event: int, flags: int) -> None:
            waits.append((stream, recorded[event]))
            wait(stream, event, flags)

        monkeypatch.setattr(runtime, "eventRecord", record_event)
        monkeypatch.setattr(runtime, "streamWaitEvent", wait_event)
        from optgraph.runtime.cuda.decode_loop import DeviceDecodeLoop

        loop = DeviceDecodeLoop(compiled, weights, threads=64)
        bound = loop.prepare(prefill, prefill_weights)
        prompt = [3, 1, 4, 1, 5]
        feeds = [step_inputs(prefill.step, prompt, 0)]
        waits.clear()
        settings = Sampling(temperature=1.0, seed=2)
        tokens = list(loop.tokens(len(prompt), 6, settings, set(), prefill, prefill_weights, feeds))
        zeros = np.zeros(compiled.step.vocab, np.float32)
        assert tokens == [sample(zeros, settings, i) for i in range(6)]
        assert (loop.stream.ptr, bound.stream.ptr) in waits  # the decode stream on the prefill's
        assert bound.stream.ptr != loop.stream.ptr
        assert bound.inputs["tokens"].get().tolist() == [3, 1, 4, 1, 5, 0, 0, 0]  # padded
        assert int(loop.prefill_iconf.get()[0]) == (len(prompt) - 1) * compiled.step.vocab
        assert int(loop.decode.inputs["pos"].get()[0]) == len(prompt) + 5  # after the 6th choice
