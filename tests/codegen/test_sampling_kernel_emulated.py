"""The sampling kernel (codegen/kernels/sampling.py) in the CPU emulator against `api/sampling.py`'s
NumPy definition: greedy and seeded temperature / top-k / top-p choices equal, token for token, on
rows with ties, f32 and f16 logits, at a row offset; the choice fed back into the token input
(i64 and i32), the history, the step counter, the position and kv_len."""

from __future__ import annotations

import numpy as np
import pytest

from optgraph.api.sampling import Sampling, sample, uniform
from optgraph.codegen.kernels.sampling import sampling_kernel
from tests.support import cuda_emulator

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++")

THREADS = 64
CASES = [
    Sampling(),  # greedy
    Sampling(temperature=0.7, seed=1),
    Sampling(temperature=1.3, top_k=5, seed=2),
    Sampling(temperature=1.0, top_p=0.6, seed=3),
    Sampling(temperature=0.9, top_k=40, top_p=0.9, seed=4),
    Sampling(temperature=2.0, top_k=1, seed=5),  # top-k 1 is greedy
]


def _row(vocab: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    row = rng.standard_normal(vocab).astype(np.float32) * 3
    row[rng.integers(0, vocab, 8)] = row.max()  # ties at the top
    row[rng.integers(0, vocab, 16)] = np.float32(-0.0)
    return row


def _launch(
    logits: np.ndarray, settings: Sampling, step: int, offset: int, vocab: int,
    token: str = "i64", position: str | None = "i64", kv_len: str | None = None,
) -> list[np.ndarray]:  # fmt: skip
    kernel = sampling_kernel(
        {np.float32: "f32", np.float16: "f16"}[logits.dtype.type], token, position, kv_len,
        threads=THREADS,
    )  # fmt: skip
    ints = {"i32": np.int32, "i64": np.int64}
    iconf = np.array([offset, vocab, settings.top_k, settings.seed, 8], np.int64)
    fconf = np.array([settings.temperature, settings.top_p], np.float32)
    buffers = [
        logits, iconf, fconf, np.array([step], np.int64),
        np.array([-1], ints[token]), np.array([40], ints[position or "i64"]),
        np.array([41], ints[kv_len or "i64"]), np.full(8, -1, np.int32),
    ]  # fmt: skip
    return cuda_emulator.run_kernel(kernel, (1, 1, 1), (THREADS, 1, 1), buffers)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_choices_equal_the_numpy_definition(dtype: type) -> None:
    vocab, offset = 1000, 1000  # the second row of two
    for index, settings in enumerate(CASES):
        for step in (0, 7):
            row = _row(vocab, 10 * index + step).astype(dtype)
            logits = np.concatenate([np.zeros(vocab, dtype), row])
            out = _launch(logits, settings, step, offset, vocab)
            expected = sample(row, settings, step)
            assert int(out[4][0]) == expected, (settings, step)


def test_draws_spread_over_the_kept_tokens() -> None:
    """Many steps of one row: every token is one of the top-k (with the tokens tied with the
    k-th), and more than one is chosen."""
    vocab = 200
    row = _row(vocab, 99)
    settings = Sampling(temperature=1.5, top_k=6, seed=11)
    top = set(np.flatnonzero(row >= np.sort(row)[-6]).tolist())
    chosen = [int(_launch(row, settings, step, 0, vocab)[4][0]) for step in range(6)]
    assert chosen == [sample(row, settings, step) for step in range(6)]
    assert set(chosen) <= top and len(set(chosen)) > 1


def test_the_choice_is_fed_back() -> None:
    vocab = 100
    row = _row(vocab, 5)
    out = _launch(row, Sampling(), 10, 0, vocab, token="i32", position="i32", kv_len="i32")
    token, state, position, kv_len, history = out[4], out[3], out[5], out[6], out[7]
    assert token.dtype == np.int32 and int(token[0]) == int(np.argmax(row))
    assert int(state[0]) == 11  # the next draw's step
    assert int(position[0]) == 41 and int(kv_len[0]) == 42  # the next step's
    assert int(history[10 % 8]) == int(np.argmax(row)) and (history == -1).sum() == 7
    out = _launch(row, Sampling(), 3, 0, vocab, position=None, kv_len=None)
    assert int(out[5][0]) == 40 and int(out[6][0]) == 41  # not advanced


def test_the_draw_is_splitmix64_of_seed_and_step() -> None:
    assert uniform(0, 0) == uniform(0, 0) and uniform(0, 0) != uniform(0, 1)
    assert uniform(1, 0) != uniform(2, 0)
    draws = np.array([uniform(7, s) for s in range(2000)])
    assert 0.0 <= draws.min() and draws.max() < 1.0 and abs(draws.mean() - 0.5) < 0.03


# Macros of the host's math headers: NVRTC (CuPy's compiler on the GPU machine) has no host
# headers, so a kernel naming one fails there though nvcc and g++ accept it.
HOST_MACROS = ("INFINITY", "NAN", "HUGE_VALF", "FLT_MAX")


@pytest.mark.parametrize("logits", ["f32", "f16"])
def test_the_kernel_compiles_with_nvcc_and_names_no_host_macro(logits: str, tmp_path) -> None:
    import re
    import shutil
    import subprocess

    from optgraph.codegen.cuda_source import module_source

    kernel = sampling_kernel(logits, "i32", "i32", "i64")
    used = [m for m in HOST_MACROS if re.search(rf"\b{m}\b", kernel.source)]
    assert not used, f"host-header macros NVRTC lacks: {used}"
    if shutil.which("nvcc") is None:
        pytest.skip("needs nvcc (CUDA toolkit) for the build half")
    source = tmp_path / "sampling.cu"
    source.write_text(module_source([kernel]))
    done = subprocess.run(
        ["nvcc", "-cubin", "-arch=sm_90", "-std=c++17", "-o", str(tmp_path / "s.cubin"),
         str(source)],
        check=False, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
