"""Long runs on the GPU: nothing grows after warm-up, nothing is captured twice, Ctrl-C is harmless.

- every example, 1,000 `run()` calls back to back: device memory (the driver's figure and CuPy's
  pool), host memory (RSS) and open file handles flat after a warm-up of 20, no capture after
  the first, the last result the first's bits;
- `generate` of 10,000 tokens (a GGUF llama, f32): the same figures flat from token 1,000 to the
  end, the decode step never captured again, and the tokens those of the run in pieces: a
  shorter generation is a prefix of it, and the prompt with its first 5,000 tokens continues
  with the other 5,000;
- a `KeyboardInterrupt` in the middle of a decode loop (the consumer's, and a real SIGINT from a
  timer) leaves no stream capturing, and the next `generate` gives the same tokens.

Run on the GPU machine: `python -m pytest -q tests/gpu/test_gpu_long_runs.py`.
"""

from __future__ import annotations

import gc
import os
import signal
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import optgraph as og
from tests.support.gpu_support import require_gpu

pytestmark = pytest.mark.gpu
require_gpu()

import cupy as cp

from optgraph.reference.interpreter import random_inputs, random_weights

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.ir"))
RUNS, WARMUP = 1_000, 20
LONG = 10_000
RSS_SLACK = 32 << 20  # the allocator's arenas may still settle; a leak a run would be far more


def usage() -> dict[str, int]:
    """What a leak would grow: device memory in use (driver, CuPy's pool), RSS, open handles
    (after a collection: earlier tests' garbage may be freed at any time, making it shrink)."""
    gc.collect()
    cp.cuda.runtime.deviceSynchronize()
    free, total = cp.cuda.runtime.memGetInfo()
    pool = cp.get_default_memory_pool()
    with open("/proc/self/statm") as f:
        rss = int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return {
        "device used": total - free,
        "pool used": pool.used_bytes(),
        "pool held": pool.total_bytes(),
        "pinned free blocks": cp.get_default_pinned_memory_pool().n_free_blocks(),
        "rss": rss,
        "open handles": len(os.listdir("/proc/self/fd")),
    }


def assert_flat(before: dict[str, int], after: dict[str, int], what: str) -> None:
    """Nothing grew (RSS within `RSS_SLACK`); the pool's free blocks may be reused, not more."""
    for key, value in before.items():
        slack = RSS_SLACK if key == "rss" else 0
        if key == "pinned free blocks":
            continue  # blocks CuPy keeps for reuse: fewer or more as arrays come and go
        assert after[key] - value <= slack, (what, key, value, after[key])


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_a_thousand_runs_of_an_example_hold_memory_and_handles_flat(path: Path) -> None:
    graph = og.parse_file(path)
    program = og.compile(graph, target="cuda")
    inputs, weights = random_inputs(graph, 0), random_weights(graph, 0)
    first = program.run(inputs, weights)
    for _ in range(WARMUP):
        program.run(inputs, weights)
    counters = program._cuda.counters
    captures, before = counters.captures, usage()
    for _ in range(RUNS):
        last = program.run(inputs, weights)
    assert_flat(before, usage(), path.stem)
    assert counters.captures == captures  # replays only: no capture after the first
    assert counters.replays >= RUNS
    for name, value in first.items():
        assert np.asarray(last[name]).tobytes() == np.asarray(value).tobytes(), name
    program.close()


@pytest.fixture(scope="module")
def long_model(tmp_path_factory: pytest.TempPathFactory) -> Any:
    pytest.importorskip("gguf")
    pytest.importorskip("transformers")
    from optgraph.api.generation import load
    from tests.cli.test_generate_gguf import write_file
    from tests.support import hf_checkpoints as hf

    root = tmp_path_factory.mktemp("long")
    tokenizer = hf.train_tokenizer()
    path = hf.quietly(lambda: write_file("llama", tokenizer, root / "llama.gguf"))
    model = load(path, "cuda", dtype="f32", context=LONG + 256, cache_dir=root / "programs")
    yield model
    model.close()


PROMPT = "the quick brown fox"


def test_ten_thousand_tokens_hold_memory_flat_and_equal_the_run_in_pieces(long_model: Any) -> None:
    model = long_model
    prompt = model.prompt_tokens(PROMPT)
    model.generate(prompt, 64, stop_at_eos=False)  # compiles and captures what the loop needs
    counters = model.decode.program._cuda.counters
    tokens: list[int] = []
    before: dict[str, int] = {}
    captures = -1
    for token in model.stream(prompt, LONG, stop_at_eos=False):
        tokens.append(token)
        if len(tokens) == 1_000:
            before, captures = usage(), counters.captures
    assert len(tokens) == LONG
    assert_flat(before, usage(), "generate")
    assert counters.captures == captures
    again = model.generate(prompt, LONG, stop_at_eos=False).tokens
    assert again == tokens
    assert model.generate(prompt, 2_500, stop_at_eos=False).tokens == tokens[:2_500]
    half = LONG // 2
    rest = model.generate(prompt + tokens[:half], LONG - half, stop_at_eos=False).tokens
    assert rest == tokens[half:]


def _no_stream_capturing(model: Any) -> None:
    loop = model.device_loop()
    streams = [loop.stream, model.decode.program._cuda.stream]
    for stream in streams:
        assert cp.cuda.runtime.streamIsCapturing(stream.ptr) == 0


def test_ctrl_c_in_a_decode_loop_leaves_the_model_able_to_run_again(long_model: Any) -> None:
    model = long_model
    prompt = model.prompt_tokens(PROMPT)
    want = model.generate(prompt, 512, stop_at_eos=False).tokens
    with pytest.raises(KeyboardInterrupt):  # Ctrl-C while the consumer prints token 100
        for i, _ in enumerate(model.stream(prompt, 4_000, stop_at_eos=False)):
            if i == 100:
                raise KeyboardInterrupt
    _no_stream_capturing(model)
    assert model.generate(prompt, 512, stop_at_eos=False).tokens == want

    def interrupt(signum: int, frame: Any) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    try:
        for delay in (0.0005, 0.003, 0.02):  # wherever the host happens to be in the loop
            signal.setitimer(signal.ITIMER_REAL, delay)
            try:
                model.generate(prompt, LONG, stop_at_eos=False)
            except KeyboardInterrupt:
                pass
            finally:
                signal.setitimer(signal.ITIMER_REAL, 0)
            _no_stream_capturing(model)
            assert model.generate(prompt, 512, stop_at_eos=False).tokens == want
    finally:
        signal.signal(signal.SIGALRM, previous)
