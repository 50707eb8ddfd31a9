"""`optgraph compile/run --vram-budget SIZE`: the report's streamed bytes and peak, the planned
executor running the streamed program on the CPU, and a budget that cannot work."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from optgraph.analysis.segments import parse_size
from optgraph.cli.main import main
from tests.support.offload_models import gen_llama


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "llama.ir"
    path.write_text(
        gen_llama.generate_llama(layers=3, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=128)
    )
    return path


def test_compile_reports_streamed_bytes_and_peak(model: Path, tmp_path: Path, capsys) -> None:
    report = tmp_path / "report.json"
    assert main(["compile", str(model), "--report-json", str(report)]) == 0
    full = json.loads(report.read_text())
    assert full["streamed_bytes"] is None
    budget = full["peak_device_bytes"] // 2
    assert (
        main(["compile", str(model), "--vram-budget", str(budget), "--report-json", str(report)])
        == 0
    )
    streamed = json.loads(report.read_text())
    assert 0 < streamed["peak_device_bytes"] <= budget
    assert streamed["streamed_bytes"] > 0
    assert "peak device bytes" in capsys.readouterr().out


def test_run_on_cpu_with_a_budget_checks_against_the_reference(model: Path, capsys) -> None:
    assert main(["run", str(model), "--device", "cpu", "--vram-budget", "200KiB", "--check"]) == 0
    out = capsys.readouterr().out
    assert "nmse" in out and "0.000e+00" in out


def test_bad_budgets_are_one_clear_error(model: Path, capsys) -> None:
    assert main(["compile", str(model), "--vram-budget", "2 parsecs"]) == 1
    assert "cannot read the size '2 parsecs'" in capsys.readouterr().err
    assert main(["compile", str(model), "--vram-budget", "1KiB"]) == 1
    assert "too small" in capsys.readouterr().err
    assert parse_size("200KiB") == 204800
