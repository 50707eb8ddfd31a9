"""benchmarks/bench_multi_gpu.py without GPUs: the plan-only run and the table's verdicts."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SMALL = ["--layers", "1", "--hidden", "128", "--heads", "4", "--kv-heads", "2", "--ffn", "256",
         "--vocab", "256", "--cache-len", "32"]  # fmt: skip


def test_the_dry_run_prints_the_bytes_per_gpu_of_each_case() -> None:
    done = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "bench_multi_gpu.py"), "--dry-run", *SMALL],
        capture_output=True, text=True, check=False, cwd=ROOT,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert "tp: one GPU `default`; two GPUs `tensor-parallel{ways=2},default`" in done.stdout
    assert "pp: one GPU" in done.stdout and "one GPU's budget" in done.stdout


def test_the_table_says_which_targets_and_bounds_are_missed() -> None:
    from benchmarks.bench_multi_gpu import table

    row = {"case": "tp", "ms 1": 0.943, "ms 2": 0.700, "ms 2 nccl": 0.807, "budget": None,
           "weights per device": [1 << 30, 1 << 30], "nmse 1": 5.3e-6, "nmse 2": 7e-7,
           "plan 2": "per-device arenas"}  # fmt: skip
    text = table([row], "GPU", "f16")
    line = next(x for x in text.splitlines() if x.startswith("| tp "))
    assert "| 1.35x | >= 1.7x (NOT met) |" in line
    assert "| 5.3e-06 (above) | 7.0e-07 |" in line
    assert line.endswith("| 0.807 |")
    faster = table([{**row, "case": "pp", "ms 1": 29.6, "ms 2": 0.94}], "GPU", "f16")
    assert "(met)" in faster
