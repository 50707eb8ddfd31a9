"""bench_offload.py: the dry run on the CPU (plans, what they order, estimated steps) and the GPU
path end to end on the fake CuPy (tests/support/fake_cupy.py), where kernels compute nothing and
every CUDA-event interval reads 10 µs, so only the plumbing and the table are checked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.benchmarks.test_gpu_benchmarks_on_fake_cupy import (  # noqa: F401 - the fixture
    INTERVAL_MS,
    benchmarks,
)

TINY = [
    "--layers", "8", "--ratio", "2", "--hidden", "256", "--heads", "4", "--kv-heads", "2", "--ffn", "512",
    "--vocab", "256", "--prefill-seq", "8", "--balanced-seq", "8", "--balanced-vocab", "64",
]  # fmt: skip


def test_dry_run_prints_plans_orders_and_estimates(
    benchmarks: Any,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = benchmarks("bench_offload")
    assert bench.main([*TINY, "--dry-run", "--show-order", "--balanced-batch", "auto"]) == 0
    out = capsys.readouterr().out
    for mode in ("decode", "prefill", "balanced (batch "):
        assert f"\n{mode}" in out
    assert "depth 2 plan order:" in out and "after ^pf" in out and "at ring +" in out
    estimates = [line for line in out.splitlines() if " estimated " in line]
    assert len(estimates) == 3 * 6  # every streamed variant of every mode


def test_balanced_batch_follows_the_bandwidth_and_rate(benchmarks: Any) -> None:  # noqa: F811
    bench = benchmarks("bench_offload")
    args = bench.build_parser().parse_args(TINY)
    slow_copy = bench.balanced_batch(args, 10e9, 700e12)
    fast_copy = bench.balanced_batch(args, 50e9, 700e12)
    assert slow_copy > fast_copy >= 1  # slower copies need more compute to balance


def test_gpu_path_on_fake_cupy(
    benchmarks: Any,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    bench = benchmarks("bench_offload")
    monkeypatch.setattr(bench, "pinned_bandwidth", lambda cp: 25e9)  # no 1 GiB on the host
    monkeypatch.setattr(bench, "gemm_rate", lambda cp, args: 700e12)
    out = tmp_path / "offload.md"
    argv = [*TINY, "--balanced-batch", "2", "--iters", "1", "--repeats", "1", "--variants"]
    argv.append("sync,depth 1,depth 2,depth 2 least-ring,depth 2 no-pdl,depth 2 eager")
    assert bench.main([*argv, "--markdown", str(out)]) == 0
    rows = [line.split("|")[1:-1] for line in out.read_text().splitlines() if "| " in line]
    head = [c.strip() for c in rows[0]]
    cells = {r[0].strip(): dict(zip(head, (c.strip() for c in r), strict=True)) for r in rows[1:]}
    assert set(cells) == {"decode", "prefill", "balanced (batch 2)"}
    for row in cells.values():
        assert row["depth 2"] == f"{INTERVAL_MS:.2f} ms"
        assert row["depth 2 / sync"] == "1.000"
        assert row["exact"] == "yes"  # the fake computes nothing, so every output is equal
