"""tools/transformers_sweep.py: its rows say what imports and how close it comes, through
torch.export and through ONNX; an exporter's failure and an importer's refusal are rows, not
crashes."""

from __future__ import annotations

import types
from pathlib import Path
from typing import Any

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


def _unmapped() -> Any:
    """A model with an op optgraph does not map (a Bessel function), built by the sweep like a
    transformers model (a `config`, the output first)."""
    import torch

    class Model(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.config = types.SimpleNamespace()
            self.embed = torch.nn.Embedding(64, 8)

        def forward(self, ids: Any) -> Any:
            return (torch.special.bessel_j0(self.embed(ids)),)

    return Model()


@pytest.mark.parametrize("onnx", [False, True])
def test_a_row_a_model_with_its_nmse_or_its_reason(
    tmp_path: Path, onnx: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    out = tmp_path / "table.md"
    built = sweep.models
    monkeypatch.setattr(sweep, "models", lambda: {**built(), "unmapped": _unmapped})
    # mixtral's default experts: imported (one moe a layer) / not exported (torch's exporter
    # has no ONNX function for transformers' grouped_mm fallback); "unmapped": refused by name
    names = ["gpt2", "mixtral", "unmapped"]
    assert sweep.main([*names, "--markdown", str(out), *(["--onnx"] if onnx else [])]) == 0
    rows = _rows(out)
    assert list(rows) == names
    for name in ("gpt2",) if onnx else ("gpt2", "mixtral"):
        status, graph, *errors = rows[name]
        assert status == "imported" and graph.endswith(" s") and len(errors) == 2
        assert all(float(e) <= 1e-10 for e in errors)
    if onnx:
        status, reason, *_ = rows["mixtral"]
        assert status == "not exported" and reason.startswith("torch.onnx.export: ")
        assert "\x1b" not in reason
    else:
        status, reason, *_ = rows["unmapped"]
        assert status == "refused" and "aten.special_bessel_j0" in reason


def test_an_unknown_model_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        sweep.main(["not_a_model"])
    assert exit_.value.code == 2
    assert "unknown model 'not_a_model'" in capsys.readouterr().err


def test_transformers_onnx_table_takes_the_default_experts_to_the_importer(
    tmp_path: Path,
) -> None:
    """Given transformers' own ONNX functions, Mixtral's default experts export; each expert's
    rows are a Range between run-time offsets (a shape the routing decides): refused, naming it
    (not a product downstream of it)."""
    pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")
    out = tmp_path / "table.md"
    argv = ["mixtral", "--onnx", "--transformers-onnx-table", "--markdown", str(out)]
    assert sweep.main(argv) == 0
    assert "(transformers' ONNX table)" in out.read_text().splitlines()[0]
    status, reason, *_ = _rows(out)["mixtral"]
    assert status == "refused" and "cannot map" in reason and "Range ×" in reason
    assert "matmul" not in reason
