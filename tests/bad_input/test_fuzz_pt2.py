"""`.pt2` archives (`torch.export.save`) damaged one part at a time (tests/support/fuzz_pt2.py),
through what a user reaches: `import_model(path)` (what `optgraph import MODEL.pt2` runs) and, for
a sample, the command itself.

Each mutant imports, or gets one `OptGraphError` naming the archive; the command exits 0 or 1 with
no traceback and writes its outputs whole or not at all. An archive whose pickles would run code
is refused before torch unpickles anything. The default run samples `examples(20)` mutants
(an import runs torch's decompositions: about 0.1 s); `HYPOTHESIS_PROFILE=fuzz` many more.
"""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings

pytest.importorskip("torch", reason="the .pt2 fuzz tests need torch")

from optgraph.frontends.model_files import import_model
from tests.support import fuzz_pt2 as fp
from tests.support.fuzz_checks import (
    Mutant,
    assert_refused_cleanly,
    run_cli,
    works_or_refused,
)
from tests.support.property_examples import examples

FILES = fp.tiny_archive()


def check_import(folder: Path, mutant: Mutant) -> bool:
    """Whether `mutant` imported (else it was refused by name); its weights fit in the file."""
    path = folder / "m.pt2"
    path.write_bytes(mutant.data)
    result = works_or_refused(lambda: import_model(str(path)), path)
    if result is not None:
        assert sum(a.nbytes for a in result[1].values()) <= len(mutant.data)
    return result is not None


def test_the_unchanged_archive_imports(tmp_path: Path) -> None:
    assert check_import(tmp_path, Mutant("unchanged", fp.zipped(FILES)))


def _model_json(path: tuple[object, ...], value: object) -> Mutant:
    text = fp._json_changed(FILES[fp.MODEL], path, value, drop=False)
    return Mutant(f"model.json: {path} = {value!r}", fp.zipped({**FILES, fp.MODEL: text}))


# Each raised something else than an OptGraphError naming the archive before, with what it raised:
REGRESSIONS = [
    # TypeError from torch's run_decompositions: "object of type 'int' has no len()"
    _model_json(("graph_module", "module_call_graph", 0, "signature", "forward_arg_names"), -1),
]


def test_an_error_located_in_the_models_source_names_the_archive(tmp_path: Path) -> None:
    """An unmapped op is located at its line of the model's Python source (kept in the archive);
    the message named only that file, not the archive the user gave."""
    text = FILES[fp.MODEL].replace(b"torch.ops.aten.relu.default", b"torch.ops.aten.erfinv.default")
    path = tmp_path / "m.pt2"
    path.write_bytes(fp.zipped({**FILES, fp.MODEL: text}))
    status, err = run_cli(["import", str(path), "-o", str(tmp_path / "m.ir")])
    assert status == 1 and f"error: import: {path}: 1 op(s) optgraph cannot map" in err, err
    assert "fuzz_pt2.py:" in err and "torch.relu(self.lin(x))" in err, err


def test_torch_logs_no_traceback_for_a_damaged_archive(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """torch.export.load logged the first error with its traceback on stderr (its own handler,
    past Python's `sys.stderr`), then raised "check the warnings above"; the message now quotes
    that first error."""
    path = tmp_path / "m.pt2"
    path.write_bytes(fp.zipped({k: v for k, v in FILES.items() if not k.endswith("weight_2")}))
    status, err = run_cli(["import", str(path), "-o", str(tmp_path / "m.ir")])
    assert status == 1
    assert "data/weights/weight_2: file not found" in err, err
    printed = capfd.readouterr().err
    assert "Traceback" not in printed and "warnings above" not in err, printed


def _with_pickled_weight(marker: Path) -> dict[str, bytes]:
    config = json.loads(FILES[fp.WEIGHTS_CONFIG])
    entry = config["config"]["lin.weight"]
    entry["use_pickle"] = True
    weight = fp.WEIGHTS_CONFIG.rsplit("/", 1)[0] + "/" + entry["path_name"]
    return {
        **FILES,
        fp.WEIGHTS_CONFIG: json.dumps(config).encode(),
        weight: fp.hostile_pickle(marker),
    }


def _with_opaque_constant(marker: Path) -> dict[str, bytes]:
    folder = fp.CONSTANTS_CONFIG.rsplit("/", 1)[0]
    entry = {"path_name": "opaque_obj_0", "is_param": False, "use_pickle": False}
    config = {"config": {"obj": entry}}
    return {
        **FILES,
        fp.CONSTANTS_CONFIG: json.dumps(config).encode(),
        f"{folder}/opaque_obj_0": fp.plain_pickle(marker),
    }


@pytest.mark.parametrize("where", ["sample inputs", "pickled weight", "opaque constant"])
def test_a_pickle_that_runs_code_is_refused_before_torch_unpickles_it(
    tmp_path: Path, where: str
) -> None:
    """torch.export.load unpickles sample inputs the restricted unpickler refuses, pickled
    tensors and opaque constants with Python's full unpickler: importing such an archive ran its
    code (here: creating a file)."""
    marker = tmp_path / "ran"
    if where == "sample inputs":
        files = {**FILES, fp.SAMPLE_INPUTS: fp.hostile_pickle(marker)}
    elif where == "pickled weight":
        files = _with_pickled_weight(marker)
    else:
        files = _with_opaque_constant(marker)
    path = tmp_path / "m.pt2"
    path.write_bytes(fp.zipped(files))
    status, err = run_cli(["import", str(path), "-o", str(tmp_path / "m.ir")])
    assert not marker.exists()
    assert status == 1 and "holds pickled Python objects" in err, err
    assert not (tmp_path / "m.ir").exists()


@settings(max_examples=examples(20), deadline=None)
@given(fp.pt2_mutants(FILES))
def test_a_damaged_archive_imports_or_is_refused_by_name(mutant: Mutant) -> None:
    with tempfile.TemporaryDirectory() as folder:
        check_import(Path(folder), mutant)


@pytest.mark.parametrize("mutant", REGRESSIONS, ids=lambda m: m.what)
def test_found_by_the_fuzzer(tmp_path: Path, mutant: Mutant) -> None:
    assert not check_import(tmp_path, mutant)


@settings(max_examples=examples(4), deadline=None)
@given(fp.pt2_mutants(FILES))
def test_optgraph_import_exits_1_and_writes_nothing(mutant: Mutant) -> None:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        path = folder / "m.pt2"
        path.write_bytes(mutant.data)
        out, weights = folder / "m.ir", folder / "m.npz"
        status, err = run_cli(["import", str(path), "-o", str(out), "--weights-out", str(weights)])
        assert_refused_cleanly(status, err, path)
        assert out.exists() == weights.exists() == (status == 0), err
