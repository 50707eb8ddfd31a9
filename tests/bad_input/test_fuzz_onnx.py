"""ONNX models damaged one thing at a time (tests/support/fuzz_onnx.py), through what a user
reaches: `from_onnx(path)` and, for a sample, `optgraph import MODEL.onnx`.

Each mutant imports, or gets one `OptGraphError` naming the model file; the command exits 0 or 1
with no traceback and writes its outputs whole or not at all. The default run samples
`examples(60)` mutants; `HYPOTHESIS_PROFILE=fuzz` many more.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings

from tests.support.fuzz_checks import assert_refused_cleanly, run_cli, works_or_refused
from tests.support.property_examples import examples

onnx = pytest.importorskip("onnx", reason="the ONNX fuzz tests need onnx")

from optgraph.errors import OptGraphError
from optgraph.frontends.onnx import from_onnx
from optgraph.frontends.onnx_schema import FOLD_LIMIT
from tests.support import fuzz_onnx as fo
from tests.support.fuzz_onnx import OnnxMutant


def _write(folder: Path, mutant: OnnxMutant) -> Path:
    path = folder / "model.onnx"
    path.write_bytes(mutant.model)
    if mutant.data is not None:
        (folder / fo.DATA_FILE).write_bytes(mutant.data)
    return path


def check_import(folder: Path, mutant: OnnxMutant) -> bool:
    """Whether `mutant` imported (else it was refused by name); its weights fit in its files."""
    path = _write(folder, mutant)
    result = works_or_refused(lambda: from_onnx(str(path)), path)
    if result is not None:
        _, weights = result
        size = path.stat().st_size + len(mutant.data or b"")
        assert all(a.nbytes <= max(size, FOLD_LIMIT) for a in weights.values())  # folded ones
    return result is not None


def test_the_unchanged_model_imports(tmp_path: Path) -> None:
    path = _write(tmp_path, OnnxMutant("unchanged", fo.tiny_model().SerializeToString()))
    graph, weights = from_onnx(str(path))
    np.testing.assert_array_equal(weights["w"], fo.W)
    assert [v.name for v in graph.inputs] == ["x"]


def _edited(what: str, change: Callable[[onnx.ModelProto], object]) -> OnnxMutant:
    model = fo.tiny_model()
    change(model)
    return OnnxMutant(what, model.SerializeToString())


def _node(index: int, **fields: object) -> Callable[[onnx.ModelProto], object]:
    def change(model: onnx.ModelProto) -> None:
        node = model.graph.node[index]
        for key, value in fields.items():
            if key in ("input", "output", "attribute"):
                del getattr(node, key)[:]
                getattr(node, key).extend(value)  # type: ignore[attr-defined]
            else:
                setattr(node, key, value)

    return change


def _bytes(what: str, old: bytes, new: bytes) -> OnnxMutant:
    data = fo.tiny_model().SerializeToString()
    assert data.count(old) == 1
    return OnnxMutant(what, data.replace(old, new))


def _input_elem_type(model: onnx.ModelProto) -> None:
    model.graph.input[0].type.tensor_type.elem_type = 0


def _redefined_a(model: onnx.ModelProto) -> None:
    model.graph.node[3].output[0] = "a"
    model.graph.output[0].name = "a"


# Each raised something else than an OptGraphError naming the model before (what it raised is
# said), or imported a model that is not valid:
REGRESSIONS = [
    # an OptGraphError naming no file: "w has dtype uint4", "graph 'tiny' has no output"
    _edited("w of type UINT4", lambda m: setattr(m.graph.initializer[0], "data_type", 21)),
    _edited("no graph outputs", lambda m: m.graph.ClearField("output")),
    # KeyError from onnx.helper.tensor_dtype_to_np_dtype
    _edited("input of element type 0", _input_elem_type),
    # IndexError in the TopK converter (one output where the schema says two)
    _edited("Reshape made TopK", _node(2, op_type="TopK")),
    # the same, TopK of another domain converted as ONNX's own
    _edited("TopK of ai.onnx.ml", _node(2, op_type="TopK", domain="ai.onnx.ml")),
    # KeyError '' in the converters: a required input left empty
    _edited("MatMul's input 0 empty", _node(0, input=["", "w"])),
    # KeyError 'to': a required attribute missing
    _edited("Cast without 'to'", _node(3, op_type="Cast", attribute=[])),
    # TypeError: protobuf leaves a name that is not UTF-8 as bytes (the node's was imported)
    _bytes("external location not UTF-8", b"model.data", b"model.dat\x80"),
    _bytes("node name not UTF-8", b"relu", b"\x80elu"),
    # OSError: File name too long (stat of the external data file)
    _edited(
        "external location of 5000 bytes",
        lambda m: setattr(m.graph.initializer[0].external_data[0], "value", "a" * 5000),
    ),
    # a VerifyError of two diagnostics: a graph output listed three times
    _edited("graph output y thrice", lambda m: m.graph.output.extend([m.graph.output[0]] * 2)),
    # imported as if valid: a tensor defined twice (the later definition won), an opset onnx
    # does not know, an attribute of the wrong type
    _edited("Relu's output named 'a' (Add's)", _redefined_a),
    _edited("opset 0", lambda m: setattr(m.opset_import[0], "version", 0)),
    _edited("opset 2**40", lambda m: setattr(m.opset_import[0], "version", 2**40)),
    _edited(
        "Reshape allowzero a string",
        _node(2, attribute=[onnx.helper.make_attribute("allowzero", "yes")]),
    ),
]


@settings(max_examples=examples(60), deadline=None)
@given(fo.onnx_mutants())
def test_a_damaged_model_imports_or_is_refused_by_name(mutant: OnnxMutant) -> None:
    with tempfile.TemporaryDirectory() as folder:
        check_import(Path(folder), mutant)


@pytest.mark.parametrize("mutant", REGRESSIONS, ids=lambda m: m.what)
def test_found_by_the_fuzzer(tmp_path: Path, mutant: OnnxMutant) -> None:
    assert not check_import(tmp_path, mutant)


@settings(max_examples=examples(8), deadline=None)
@given(fo.onnx_mutants())
def test_optgraph_import_exits_1_and_writes_nothing(mutant: OnnxMutant) -> None:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        path = _write(folder, mutant)
        out, weights = folder / "m.ir", folder / "m.npz"
        status, err = run_cli(["import", str(path), "-o", str(out), "--weights-out", str(weights)])
        assert_refused_cleanly(status, err, path)
        assert out.exists() == weights.exists() == (status == 0), err


@pytest.mark.parametrize("link", ["the file", "its folder"])
def test_external_data_through_a_symbolic_link_is_refused_by_name(
    tmp_path: Path, link: str
) -> None:
    """onnx's own reader refused both, and the message called the data corrupt; it now says
    why, before onnx reads anything."""
    folder, outside = tmp_path / "model", tmp_path / "outside"
    folder.mkdir()
    outside.mkdir()
    (outside / fo.DATA_FILE).write_bytes(fo.W.tobytes())
    model = fo.tiny_model()
    if link == "the file":
        (folder / fo.DATA_FILE).symlink_to(outside / fo.DATA_FILE)
    else:
        (folder / "sub").symlink_to(outside)
        model.graph.initializer[0].external_data[0].value = f"sub/{fo.DATA_FILE}"
    path = folder / "model.onnx"
    path.write_bytes(model.SerializeToString())
    with pytest.raises(OptGraphError, match="symbolic link") as caught:
        from_onnx(str(path))
    assert str(path) in str(caught.value)
