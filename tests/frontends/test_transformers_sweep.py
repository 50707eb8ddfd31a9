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
    # mixtral's default experts: imported (one moe a layer) / not exported; gpt-oss's experts
    # (biases, a clamped gate): refused, naming what is left of their dispatch
    names = ["gpt2", "mixtral"] if onnx else ["gpt2", "mixtral", "gpt_oss"]
    assert sweep.main([*names, "--markdown", str(out), *(["--onnx"] if onnx else [])]) == 0
    rows = _rows(out)
    assert list(rows) == names
    for name in ("gpt2",) if onnx else ("gpt2", "mixtral"):
        status, graph, *errors = rows[name]
        assert status == "imported" and graph.endswith(" s") and len(errors) == 2
        assert all(float(e) <= 1e-10 for e in errors)
    if onnx:  # torch's exporter has no ONNX function for transformers' grouped_mm fallback
        status, reason, *_ = rows["mixtral"]
        assert status == "not exported" and reason.startswith("torch.onnx.export: ")
        assert "\x1b" not in reason
    else:
        status, reason, *_ = rows["gpt_oss"]
        assert status == "refused" and "aten.sort.default" in reason
        assert "aten.max" not in reason and "aten.topk" not in reason


def test_an_unknown_model_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        sweep.main(["not_a_model"])
    assert exit_.value.code == 2
    assert "unknown model 'not_a_model'" in capsys.readouterr().err
