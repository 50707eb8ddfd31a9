"""benchmarks/bench_imported.py --dry-run (CPU): the structure table of a transformers Llama
imported against the same model generated, decode and prefill, both attention implementations:
the imported graphs lower to as many launches as the generated ones (no timing asserted)."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch", reason="needs PyTorch")
pytest.importorskip("transformers", reason="needs transformers")

from benchmarks import bench_imported


def _launches(table: str) -> dict[str, int]:
    rows = [line.strip("|").split("|") for line in table.splitlines() if line.startswith("| ")]
    return {cells[0].strip(): int(cells[4]) for cells in rows[1:]}


@pytest.mark.parametrize("mode", ["decode", "prefill"])
@pytest.mark.parametrize("attention", ["sdpa", "eager"])
def test_the_imported_step_launches_as_often_as_the_generated_one(
    mode: str, attention: str, tmp_path: Path
) -> None:
    out = tmp_path / "table.md"
    argv = ["--dry-run", "--mode", mode, "--attention", attention, "--markdown", str(out)]
    assert bench_imported.main(argv) == 0
    launches = _launches(out.read_text())
    assert launches["imported"] == launches["generated"], launches
    assert launches["imported, no transpose-weights"] >= launches["imported"]
