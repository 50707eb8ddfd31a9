"""`optgraph run --device cuda [--check] [--no-graph]` and `compile -o` on the GPU machine."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.gpu_support import require_gpu

pytestmark = pytest.mark.gpu
require_gpu()

ROOT = Path(__file__).resolve().parents[2]


def _optgraph(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "optgraph", *args],
        check=False,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


@pytest.mark.parametrize("extra", [(), ("--no-graph",)], ids=["graph", "eager"])
def test_run_check_prints_nmse_and_passes(extra: tuple[str, ...]) -> None:
    done = _optgraph("run", "examples/llama_decode.ir", "--device", "cuda", "--check", *extra)
    assert done.returncode == 0, done.stderr
    assert "nmse" in done.stdout and "MISMATCH" not in done.stdout
    assert done.stdout.count(" ok") >= 5  # logits and four caches


def test_compile_writes_kernels(tmp_path: Path) -> None:
    done = _optgraph("compile", "examples/gpt2_block.ir", "-o", str(tmp_path))
    assert done.returncode == 0, done.stderr
    source = (tmp_path / "kernels.cu").read_text()
    assert 'extern "C" __global__ void og_' in source
