"""`.npz` files damaged one part at a time (tests/support/fuzz_npz.py), through the readers a user
reaches: `read_npz`, `--inputs F.npz` (`load_inputs`), `--weights F.npz` (`load_weights`), and a
sample through `optgraph run --inputs/--weights`.

Each mutant is read, or gets one `InputError` naming the file; no array holds more bytes than
deflate can make of the file (`MAX_DEFLATE_RATIO`), and no pickle is ever loaded. The default run
samples `examples(60)` mutants; `HYPOTHESIS_PROFILE=fuzz` many more.
"""

from __future__ import annotations

import io
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from optgraph.errors import InputError
from optgraph.ir.parser import parse
from optgraph.reference.interpreter import load_inputs, load_weights
from optgraph.reference.npz_files import MAX_DEFLATE_RATIO, read_npz
from tests.support import fuzz_npz as fn
from tests.support.fuzz_checks import Mutant, assert_refused_cleanly, run_cli, works_or_refused
from tests.support.property_examples import examples

INPUTS, WEIGHTS = parse(fn.graph_reading("input")), parse(fn.graph_reading("weight"))


def check_readers(folder: Path, mutant: Mutant) -> bool:
    """Whether `read_npz` read `mutant` (else it was refused by name); what it read fits."""
    path = folder / "f.npz"
    path.write_bytes(mutant.data)
    arrays = works_or_refused(partial(read_npz, path, "inputs"), path)
    if arrays is not None:
        held = MAX_DEFLATE_RATIO * len(mutant.data)
        assert sum(a.nbytes for a in arrays.values()) <= held
        assert not any(a.dtype.hasobject for a in arrays.values())
    _checked_by_name(partial(load_inputs, path, INPUTS), path)
    _checked_by_name(partial(load_weights, path, WEIGHTS), path)
    return arrays is not None


def _checked_by_name(load: Callable[[], object], path: Path) -> None:
    """`load()` reads the file, or refuses it by name; a file read but not matching the graph
    gets a diagnostic for each name missing or unknown (listed together), each naming the file."""
    try:
        load()
    except InputError as err:
        assert all(str(path) in d.message for d in err.diagnostics), str(err)
        assert "Traceback" not in str(err)


@pytest.mark.parametrize("compressed", [False, True])
def test_the_unchanged_file_is_read(tmp_path: Path, compressed: bool) -> None:
    path = tmp_path / "f.npz"
    path.write_bytes(fn.npz_bytes(fn.members(), compressed))
    arrays = read_npz(path, "inputs")
    for name, array in fn.ARRAYS.items():
        np.testing.assert_array_equal(arrays[name], array)
        assert arrays[name].dtype == array.dtype
    assert np.load(path)["w"].flags.f_contiguous  # the file is as np.save writes it


def _with_x(what: str, member: bytes) -> Mutant:
    return Mutant(what, fn.npz_bytes({**fn.members(), "x.npy": member}))


def _central(field: str, value: int) -> Mutant:
    at, fmt = fn.CENTRAL[field]
    raw = fn.patch_field(fn.npz_bytes(fn.members()), b"PK\x01\x02", 0, at, fmt, value)
    assert raw is not None
    return Mutant(f"central directory: {field} = {value:#x}", raw)


def _deflated_byte(at: int, value: int) -> Mutant:
    raw = fn.npz_bytes(fn.members(), compressed=True)
    return Mutant(f"deflated byte {at} = {value}", raw[:at] + bytes([value]) + raw[at + 1 :])


# Each raised something else than an InputError before, with what it raised:
REGRESSIONS = [
    # SyntaxError, tokenize.TokenError: NumPy's header parser on broken header text
    _with_x(
        "header length 1", fn.npy(fn.ARRAYS["x"])[:8] + b"\x01\x00" + fn.npy(fn.ARRAYS["x"])[10:]
    ),
    _with_x("header '('", fn.header_bytes("(" * 1000) + bytes(32)),
    # NotImplementedError: "That compression method is not supported"
    _central("method", 99),
    # RuntimeError: "File ... is encrypted, password required for extraction"
    _central("flags", 0x1),
    # NotImplementedError: "compressed patched data (flag bit 5)"
    _central("flags", 0x20),
    # IndexError in ZipInfo.is_dir: a central directory entry's name made empty
    _deflated_byte(552, 0),
]


@settings(max_examples=examples(60), deadline=None)
@given(fn.npz_mutants())
def test_a_damaged_npz_is_read_or_refused_by_name(mutant: Mutant) -> None:
    with tempfile.TemporaryDirectory() as folder:
        check_readers(Path(folder), mutant)


@pytest.mark.parametrize("mutant", REGRESSIONS, ids=lambda m: m.what)
def test_found_by_the_fuzzer(tmp_path: Path, mutant: Mutant) -> None:
    assert not check_readers(tmp_path, mutant)


@settings(max_examples=examples(8), deadline=None)
@given(fn.npz_mutants(), st.sampled_from(["input", "weight"]))
def test_optgraph_run_exits_1_without_a_traceback(mutant: Mutant, kind: str) -> None:
    with tempfile.TemporaryDirectory() as name:
        folder = Path(name)
        model, path = folder / "g.ir", folder / "f.npz"
        model.write_text(fn.graph_reading(kind))
        path.write_bytes(mutant.data)
        saved = folder / "out.npz"
        args = ["run", str(model), "--device", "cpu", "-q", f"--{kind}s", str(path)]
        status, err = run_cli([*args, "--save-outputs", str(saved)])
        assert_refused_cleanly(status, err, path)
        assert saved.exists() == (status == 0), err
        assert [p.name for p in folder.iterdir() if p.name.startswith(".")] == []  # no temporaries


def test_a_pickled_object_array_is_never_unpickled(tmp_path: Path) -> None:
    """An object array's data is a pickle; unpickling this one would create a file."""
    from tests.support.fuzz_pt2 import MakesFile

    marker = tmp_path / "ran"
    buffer = io.BytesIO()
    np.save(buffer, np.array([MakesFile(str(marker))], dtype=object), allow_pickle=True)
    path = tmp_path / "f.npz"
    path.write_bytes(fn.npz_bytes({**fn.members(), "x.npy": buffer.getvalue()}))
    for load in (partial(read_npz, path, "inputs"), partial(load_inputs, path, INPUTS)):
        with pytest.raises(InputError, match="member 'x' is corrupt: it holds Python objects"):
            load()
    assert not marker.exists()
