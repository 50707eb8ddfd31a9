"""safetensors files damaged one part at a time (tests/support/fuzz_safetensors.py), through the
readers a user reaches: the checked header and each tensor's array (`SafetensorsFile`), a
checkpoint directory holding the file (`open_checkpoint`), `--weights X.safetensors`
(`load_weights`), and a sample through `optgraph run --weights`.

Each mutant works or gets one `InputError` naming the file; an array never holds more bytes than
the file. The default run samples `examples(60)` mutants; `HYPOTHESIS_PROFILE=fuzz` more.
"""

from __future__ import annotations

import json
import struct
import tempfile
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from hypothesis import example, given, settings

from optgraph.errors import InputError
from optgraph.frontends.hf_checkpoint import open_checkpoint
from optgraph.ir.parser import parse
from optgraph.reference.interpreter import load_weights
from optgraph.reference.safetensors_file import SafetensorsFile
from tests.support import fuzz_safetensors as fs
from tests.support.fuzz_checks import Mutant, assert_refused_cleanly, run_cli, works_or_refused
from tests.support.property_examples import examples

HEADER, DATA = fs.tiny_tensors()
GRAPH = parse(fs.IR)


def _with_entry(name: str, entry: object) -> Mutant:
    return Mutant(f"{name}: {entry!r}", fs.encode({**HEADER, name: entry}, DATA))


def _with_text(text: bytes) -> Mutant:
    return Mutant(f"header {text[:20]!r}", struct.pack("<Q", len(text)) + text + DATA)


# Each raised something else than an InputError before (a traceback through `generate` or
# `run --weights`), with what it raised:
REGRESSIONS = [
    # json's RecursionError, from the checkpoint reader and the safetensors package alike
    _with_text(b"{" * 100_000),
    # TypeError: unhashable type: 'list' (`dtype in DTYPES`)
    _with_entry("w", {"dtype": ["F32"], "shape": [2, 3], "data_offsets": [0, 24]}),
    # ValueError: maximum supported dimension for an ndarray is 64 (made by `array`)
    _with_entry("w", {"dtype": "F32", "shape": [1] * 100 + [6], "data_offsets": [0, 24]}),
    # `--weights`: the safetensors package's AttributeError (numpy has no float8_e4m3fn)
    _with_entry("w", {"dtype": "F8_E4M3", "shape": [24], "data_offsets": [0, 24]}),
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_safetensors")


def check_readers(folder: Path) -> None:
    path = folder / "model.safetensors"
    file = works_or_refused(partial(SafetensorsFile, path), path)
    if file is not None:
        for entry in file.entries.values():
            array = works_or_refused(partial(file.array, entry), path)
            assert array is not None and array.nbytes <= path.stat().st_size
    works_or_refused(partial(open_checkpoint, folder), path)
    works_or_refused(partial(load_weights, path, GRAPH), path)


def test_the_unchanged_file_works(workdir: Path) -> None:
    path = workdir / "w.safetensors"
    path.write_bytes(fs.encode(HEADER, DATA))
    weights = load_weights(path, GRAPH)
    for name, array in fs.ARRAYS.items():
        np.testing.assert_array_equal(weights[name], array)


@pytest.mark.parametrize("mutant", REGRESSIONS, ids=lambda m: m.what[:40])
def test_regressions_are_refused_by_name(mutant: Mutant, tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    path.write_bytes(mutant.data)
    with pytest.raises(InputError, match="model.safetensors"):
        SafetensorsFile(path)
    with pytest.raises(InputError, match=f"cannot read weights file '{path}'"):
        load_weights(path, GRAPH)


@settings(max_examples=examples(60))
@given(mutant=fs.safetensors_mutants())
@example(mutant=REGRESSIONS[0])
def test_safetensors_mutant_works_or_is_refused_by_name(mutant: Mutant, workdir: Path) -> None:
    with tempfile.TemporaryDirectory(dir=workdir) as name:
        folder = Path(name)
        (folder / "config.json").write_text(json.dumps({"model_type": "llama"}))
        (folder / "model.safetensors").write_bytes(mutant.data)
        check_readers(folder)


@settings(max_examples=examples(6))
@given(mutant=fs.safetensors_mutants())
def test_safetensors_mutant_through_run_weights(mutant: Mutant, workdir: Path) -> None:
    ir = workdir / "g.ir"
    ir.write_text(fs.IR)
    with tempfile.TemporaryDirectory(dir=workdir) as name:
        path = Path(name) / "w.safetensors"
        path.write_bytes(mutant.data)
        status, err = run_cli(["run", str(ir), "--weights", str(path), "--device", "cpu", "-q"])
        assert_refused_cleanly(status, err, path)
