"""tools/transformers_sweep.py: its rows say what imports and how close it comes, through
torch.export and through ONNX; an exporter's failure and an importer's refusal are rows, not
crashes."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("torch", reason="needs PyTorch")
pytest.importorskip("transformers", reason="needs transformers")
pytest.importorskip("onnx", reason="needs onnx")

from tools import transformers_sweep as sweep


def _rows(path: Path) -> dict[str, list[str]]:
    lines = path.read_text().splitlines()
    cells = [
        [c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| ")
    ]
    return {row[0]: row[1:] for row in cells[1:]}


@pytest.mark.parametrize("onnx", [False, True])
def test_a_row_a_model_with_its_nmse_or_its_reason(tmp_path: Path, onnx: bool) -> None:
    out = tmp_path / "table.md"
    names = ["gpt2", "mixtral"]  # mixtral's default experts: refused / not exported
    assert sweep.main([*names, "--markdown", str(out), *(["--onnx"] if onnx else [])]) == 0
    rows = _rows(out)
    assert list(rows) == names
    status, graph, *errors = rows["gpt2"]
    assert status == "imported" and graph.endswith(" s") and len(errors) == 2
    assert all(float(e) <= 1e-10 for e in errors)
    status, reason, *_ = rows["mixtral"]
    if onnx:  # torch's exporter has no ONNX function for transformers' grouped_mm fallback
        assert status == "not exported" and reason.startswith("torch.onnx.export: ")
        assert "\x1b" not in reason
    else:
        assert status == "refused" and "aten.sort.default" in reason and "aten.topk" not in reason


def test_an_unknown_model_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        sweep.main(["not_a_model"])
    assert exit_.value.code == 2
    assert "unknown model 'not_a_model'" in capsys.readouterr().err
