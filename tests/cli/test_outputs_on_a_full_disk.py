"""`optgraph import` and `optgraph compile -o DIR` when a real write fails (issue 36, findings 1, 2).

The other full-disk tests patch the write to raise ENOSPC; here the commands run as their own
process under a file-size limit (RLIMIT_FSIZE), so the kernel refuses the write partway through
a file (EFBIG, "File too large") inside NumPy's, safetensors' (Rust) and optgraph's own writers,
as a full disk would. Each command reports the file in one line, exits 1, and leaves the old
outputs as they were and no temporary behind.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

resource = pytest.importorskip("resource", reason="a file-size limit needs POSIX")

ROOT = Path(__file__).resolve().parents[2]
DIAMOND = str(ROOT / "examples" / "diamond.ir")


def _optgraph(args: list[str], cwd: Path, limit: int) -> subprocess.CompletedProcess[str]:
    """`python -m optgraph ARGS` in `cwd`, no file it writes growing past `limit` bytes."""

    def limit_file_size() -> None:  # in the child, before it runs Python
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "optgraph", *args],
        check=False,
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        preexec_fn=limit_file_size,  # Python ignores SIGXFSZ: a write past it fails with EFBIG
        timeout=300,
    )


def _files(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


@pytest.mark.parametrize("weights_name", ["cnn.safetensors", "cnn.npz"])
def test_import_whose_weights_do_not_fit_leaves_the_old_outputs(
    tmp_path: Path, weights_name: str
) -> None:
    onnx = pytest.importorskip("onnx", reason="the ONNX import needs onnx")
    if weights_name.endswith(".safetensors"):
        pytest.importorskip("safetensors")
    from tests.frontends import onnx_models

    onnx.save(onnx_models.cnn(), str(tmp_path / "cnn.onnx"))
    (tmp_path / "cnn.ir").write_text("old ir\n")
    (tmp_path / weights_name).write_bytes(b"old weights")
    before = _files(tmp_path)
    # The IR (about 1.5 KB) fits under 2 KiB; the weights (over 3 KB) do not.
    args = ["import", "cnn.onnx", "-o", "cnn.ir", "--weights-out", weights_name]
    done = _optgraph(args, tmp_path, 2048)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert done.stderr.strip() == f"error: import: cannot write '{weights_name}': File too large"
    assert _files(tmp_path) == before


def test_compile_whose_kernels_do_not_fit_leaves_the_old_outputs(tmp_path: Path) -> None:
    args = ["compile", DIAMOND, "-o", "out", "--report-json", "report.json", "-q"]
    first = _optgraph(args, tmp_path, 1 << 30)
    assert first.returncode == 0, first.stderr
    for path in [*(tmp_path / "out").iterdir(), tmp_path / "report.json"]:
        path.write_bytes(b"old " + path.name.encode())
    before = _files(tmp_path)
    # kernels.cu (about 8 KB) is written after the report and model.opt.ir (under 1 KB each).
    done = _optgraph(args, tmp_path, 4096)
    assert done.returncode == 1, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert "error: cannot write 'out/kernels.cu': File too large" in done.stderr, done.stderr
    assert _files(tmp_path) == before
