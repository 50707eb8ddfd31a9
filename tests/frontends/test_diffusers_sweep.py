"""tools/diffusers_sweep.py: a row a model, imported with its NMSE against PyTorch, through
torch.export and ONNX; a model's batch norms get random statistics."""

from __future__ import annotations

from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch")
pytest.importorskip("diffusers", reason="needs diffusers")
pytest.importorskip("transformers", reason="needs transformers")

from tools import diffusers_sweep as sweep


@pytest.mark.parametrize("onnx", [False, True])
def test_a_row_a_model_imported_with_its_nmse(tmp_path: Path, onnx: bool) -> None:
    if onnx:
        pytest.importorskip("onnxscript", reason="torch.onnx.export(dynamo=True) needs onnxscript")
    out = tmp_path / "table.md"
    names = ["vae_decoder", "mobilenet_v3"]
    assert sweep.main([*names, "--markdown", str(out), *(["--onnx"] if onnx else [])]) == 0
    lines = [line for line in out.read_text().splitlines() if line.startswith("| ")]
    rows = {
        cells[0]: cells[1:]
        for cells in ([c.strip() for c in line.strip("|").split("|")] for line in lines[1:])
    }
    assert list(rows) == names
    for name in names:
        status, graph, *errors = rows[name]
        assert status == "imported" and graph.endswith(" s") and len(errors) == 2
        assert all(float(e) <= 1e-10 for e in errors)


def test_batch_norm_statistics_are_made_random() -> None:
    norm = torch.nn.BatchNorm2d(8)
    sweep.random_batch_norms(torch.nn.Sequential(norm))
    assert not torch.equal(norm.running_var, torch.ones(8))
    assert not torch.equal(norm.running_mean, torch.zeros(8))


def test_an_unknown_model_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_:
        sweep.main(["not_a_model"])
    assert exit_.value.code == 2
    assert "unknown model 'not_a_model'" in capsys.readouterr().err
