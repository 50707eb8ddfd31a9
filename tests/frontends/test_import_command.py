"""`optgraph import`: files in, IR and weights out, all or nothing; bad files exit 1."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.cli.main import main
from optgraph.reference.interpreter import load_weights, run_reference

onnx = pytest.importorskip("onnx", reason="the import command tests need onnx")

from tests.frontends import onnx_models


def test_onnx_file_to_ir_and_safetensors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = onnx_models.cnn()
    source = tmp_path / "cnn.onnx"
    onnx.save(model, str(source))
    out, weights_out = tmp_path / "cnn.ir", tmp_path / "cnn.safetensors"
    assert main(["import", str(source), "-o", str(out), "--weights-out", str(weights_out)]) == 0
    assert "cnn.ir" in capsys.readouterr().out
    graph = og.parse_file(str(out))
    weights = load_weights(weights_out, graph)
    image = np.random.default_rng(0).normal(size=(2, 3, 16, 16)).astype(np.float32)
    from onnx.reference import ReferenceEvaluator

    expected = ReferenceEvaluator(model).run(None, {"image": image})[0]
    got = run_reference(graph, {"image": image}, weights)[graph.output_names()[0]]
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cnn.ir", "cnn.onnx", "cnn.safetensors"]


@pytest.mark.parametrize("name", ["model.onnx", "model.pt2"])
def test_a_file_of_the_wrong_kind_exits_1_and_writes_nothing(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], name: str
) -> None:
    if name.endswith(".pt2"):
        pytest.importorskip("torch", reason=".pt2 files need PyTorch")
    source = tmp_path / name
    source.write_bytes(b"graph g { }\n")
    out = tmp_path / "model.ir"
    assert (
        main(["import", str(source), "-o", str(out), "--weights-out", str(tmp_path / "w.npz")]) == 1
    )
    err = capsys.readouterr().err
    assert f"{source}:1:1: error: import:" in err and "Traceback" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == [name]


def test_unknown_suffix_and_missing_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["import", str(tmp_path / "model.h5"), "-o", str(tmp_path / "m.ir")]) == 1
    assert "expected a .onnx, .pt2 (torch.export.save) or .gguf" in capsys.readouterr().err
    assert main(["import", str(tmp_path / "absent.onnx"), "-o", str(tmp_path / "m.ir")]) == 1
    assert "no such file" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", [".safetensors", ".npz"])
def test_written_files_get_the_usual_mode_not_the_temporary_files(
    tmp_path: Path, suffix: str
) -> None:
    """The IR and the weights went through mkstemp's 0600 files and kept that mode; they get
    0666 less the umask, as any new file (and as every other output of optgraph)."""
    import os

    source = tmp_path / "cnn.onnx"
    onnx.save(onnx_models.cnn(), str(source))
    out, weights_out = tmp_path / "cnn.ir", tmp_path / f"cnn{suffix}"
    old = os.umask(0o022)
    try:
        assert main(["import", str(source), "-o", str(out), "--weights-out", str(weights_out)]) == 0
    finally:
        os.umask(old)
    assert (out.stat().st_mode & 0o777, weights_out.stat().st_mode & 0o777) == (0o644, 0o644)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["cnn.ir", "cnn.onnx", f"cnn{suffix}"]
    )


def test_a_directory_as_the_output_exits_1_and_writes_nothing(tmp_path: Path) -> None:
    source = tmp_path / "cnn.onnx"
    onnx.save(onnx_models.cnn(), str(source))
    (tmp_path / "cnn.ir").mkdir()
    assert main(["import", str(source), "-o", str(tmp_path / "cnn.ir")]) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cnn.ir", "cnn.onnx"]
