"""`optgraph import` of ONNX models that are broken, and onto a full disk (issue 36, finding 1).

Each used to end in a traceback: a node reading a tensor nothing defines (`KeyError` in
onnx_context), an external data file that is missing (onnx's `ValidationError`; data beside a
model in another directory was looked for in the working directory), a write that fails on a
full disk (`OSError`, safetensors' `SafetensorError`). Now each is one located message naming the
node and tensor, or the file, exit status 1, and nothing written: old outputs stay as they were.
A full disk is simulated by patching the write to fail with ENOSPC halfway.
"""

from __future__ import annotations

import errno
from pathlib import Path

import numpy as np
import pytest

from optgraph.cli.main import main

onnx = pytest.importorskip("onnx", reason="the ONNX import tests need onnx")
from onnx import TensorProto, helper, numpy_helper

from tests.frontends import onnx_models


def _model(nodes: list, outputs: tuple[str, ...] = ("y",), inits: tuple = ()) -> onnx.ModelProto:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    outs = [helper.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs]
    w = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "w")
    graph = helper.make_graph(nodes, "g", [x], outs, [w, *inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    return model


def _import(tmp_path: Path, model: onnx.ModelProto, capsys: pytest.CaptureFixture[str]) -> str:
    """Import `model` saved as tmp_path/m.onnx; assert exit 1, no traceback, nothing written."""
    source = tmp_path / "m.onnx"
    onnx.save(model, str(source))
    before = sorted(p.name for p in tmp_path.iterdir())
    assert main(["import", str(source), "-o", str(tmp_path / "m.ir")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{source}:1:1: error: import:" in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == before
    return err


def test_a_node_reading_an_undefined_tensor_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [helper.make_node("MatMul", ["x", "w_missing"], ["y"], name="/proj/MatMul")]
    err = _import(tmp_path, _model(nodes), capsys)
    assert "MatMul '/proj/MatMul': input 1 'w_missing' is not defined" in err


def test_an_unnamed_node_is_named_by_what_it_makes(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """ONNX nodes may have no name: the message says which one by its output, not `MatMul ''`."""
    nodes = [
        helper.make_node("Relu", ["x"], ["h"]),
        helper.make_node("MatMul", ["h", "w_missing"], ["y"]),
    ]
    err = _import(tmp_path, _model(nodes), capsys)
    assert "MatMul making 'y': input 1 'w_missing' is not defined" in err, err
    assert "''" not in err, err


def test_a_node_reading_a_later_nodes_output_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [
        helper.make_node("Relu", ["h"], ["y"], name="first"),
        helper.make_node("MatMul", ["x", "w"], ["h"], name="second"),
    ]
    err = _import(tmp_path, _model(nodes), capsys)
    assert "Relu 'first': input 0 'h' is not defined" in err


def test_an_undefined_graph_output_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    nodes = [helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")]
    err = _import(tmp_path, _model(nodes, outputs=("y", "nowhere")), capsys)
    assert "graph output 'nowhere' is not defined" in err


def _external_model(tmp_path: Path) -> Path:
    """tmp_path/model/m.onnx with its weight in model/m.data (external data)."""
    folder = tmp_path / "model"
    folder.mkdir()
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"], name="mm")])
    source = folder / "m.onnx"
    onnx.save(model, str(source), save_as_external_data=True, location="m.data", size_threshold=0)
    assert (folder / "m.data").stat().st_size == 48
    return source


def test_external_data_is_read_beside_the_model_not_in_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _external_model(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = tmp_path / "m.ir"
    weights = tmp_path / "m.npz"
    assert main(["import", str(source), "-o", str(out), "--weights-out", str(weights)]) == 0
    np.testing.assert_array_equal(np.load(weights)["w"], np.arange(12).reshape(4, 3))


@pytest.mark.parametrize("damage", ["missing", "truncated", "outside"])
def test_bad_external_data_is_called_so_by_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], damage: str
) -> None:
    source = _external_model(tmp_path)
    data = source.parent / "m.data"
    if damage == "missing":
        data.unlink()
    elif damage == "truncated":
        data.write_bytes(data.read_bytes()[:20])
    else:  # a location that climbs out of the model's directory
        model = onnx.load(str(source), load_external_data=False)
        for entry in model.graph.initializer[0].external_data:
            if entry.key == "location":
                entry.value = "../secret.bin"
        (tmp_path / "secret.bin").write_bytes(bytes(48))
        onnx.save(model, str(source))
    before = sorted(p.name for p in source.parent.iterdir())
    assert main(["import", str(source), "-o", str(source.parent / "m.ir")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and f"{source}:1:1: error: import: initializer 'w'" in err, err
    expected = {
        "missing": "external data file 'm.data' is missing",
        "truncated": "needs bytes [0, 48) of 'm.data', which holds 20 bytes",
        "outside": "'../secret.bin' is outside the model's directory",
    }[damage]
    assert expected in err, err
    assert sorted(p.name for p in source.parent.iterdir()) == before


def _external_constant_model(tmp_path: Path) -> Path:
    """tmp_path/model/c.onnx whose weight is a Constant node's value, kept in model/c.data."""
    folder = tmp_path / "model"
    folder.mkdir()
    value = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3))
    nodes = [
        helper.make_node("Constant", [], ["w"], value=value, name="const_w"),
        helper.make_node("MatMul", ["x", "w"], ["y"], name="mm"),
    ]
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    model = helper.make_model(
        helper.make_graph(nodes, "g", [x], [y]), opset_imports=[helper.make_opsetid("", 18)]
    )
    model.ir_version = 9
    source = folder / "c.onnx"
    onnx.save(
        model,
        str(source),
        save_as_external_data=True,
        location="c.data",
        size_threshold=0,
        convert_attribute=True,  # the Constant's value goes to c.data too
    )
    assert (folder / "c.data").stat().st_size == 48
    return source


def test_a_constant_nodes_external_data_is_read_beside_the_model(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = _external_constant_model(tmp_path)
    monkeypatch.chdir(tmp_path)  # not the model's directory
    assert main(["import", str(source), "-o", str(tmp_path / "c.ir")]) == 0
    assert "matmul" in (tmp_path / "c.ir").read_text()


def test_a_constant_nodes_missing_external_data_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _external_constant_model(tmp_path)
    (source.parent / "c.data").unlink()
    assert main(["import", str(source), "-o", str(source.parent / "c.ir")]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    expected = "error: import: Constant 'const_w': its value: its external data file 'c.data' is"
    assert f"{source}:1:1: {expected} missing" in err, err
    assert sorted(p.name for p in source.parent.iterdir()) == ["c.onnx"]


def _full_disk_write(path: Path, data: bytes) -> None:
    """A write that stops halfway: the disk is full."""
    with open(path, "wb") as handle:
        handle.write(data[: len(data) // 2])
    raise OSError(errno.ENOSPC, "No space left on device")


@pytest.mark.parametrize("failing", ["safetensors", "npz", "ir"])
def test_a_full_disk_leaves_the_old_outputs_and_no_temporaries(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    failing: str,
) -> None:
    pytest.importorskip("safetensors")
    source = tmp_path / "cnn.onnx"
    onnx.save(onnx_models.cnn(), str(source))
    suffix = ".npz" if failing == "npz" else ".safetensors"
    out, weights_out = tmp_path / "cnn.ir", tmp_path / f"cnn{suffix}"
    out.write_text("old ir\n")
    weights_out.write_bytes(b"old weights")
    if failing == "safetensors":
        import safetensors.numpy
        from safetensors import SafetensorError

        def save_file(*args: object, **kwargs: object) -> None:
            raise SafetensorError(
                'Error while serializing: IoError(Os { code: 28, kind: StorageFull, message: "No '
                'space left on device" })'
            )

        monkeypatch.setattr(safetensors.numpy, "save_file", save_file)
    elif failing == "npz":

        def savez(file: object, **arrays: object) -> None:
            Path(str(file)).write_bytes(b"PK\x03\x04 half")
            raise OSError(errno.ENOSPC, "No space left on device")

        monkeypatch.setattr(np, "savez", savez)
    else:  # the weights are staged, then the IR's write fails
        from optgraph import output_files

        monkeypatch.setattr(output_files, "write_file", _full_disk_write)
    argv = ["import", str(source), "-o", str(out), "--weights-out", str(weights_out)]
    assert main(argv) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "No space left on device" in err, err
    named = weights_out if failing != "ir" else out
    assert f"cannot write '{named}': No space left on device\n" in err, err
    assert out.read_text() == "old ir\n" and weights_out.read_bytes() == b"old weights"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["cnn.onnx", "cnn.ir", f"cnn{suffix}"]
    )
