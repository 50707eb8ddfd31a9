"""`optgraph run --inputs/--weights FILE.npz`: a corrupt file is called corrupt, by file and member
(issue 36, finding 4), and a key written as in the IR (`%x`) is the value it names (finding 5).

A member whose header claimed 4 TiB used to reach NumPy's allocation and be reported as "not
enough memory" without naming the file; a key `%x` got "unknown input '%x' (did you mean '%x'?)".
"""

from __future__ import annotations

import struct
import zipfile
import zlib
from pathlib import Path

import numpy as np
import pytest

from optgraph.cli.main import main

GRAPH = """graph g {
  input %x : f32[2,4]
  weight %w : f32[4,4]
  %y = matmul(%x, %w) : f32[2,4]
  output %y
}
"""
TIB = 1 << 40


def _npy_header(shape: tuple[int, ...], descr: str = "<f4") -> bytes:
    """A version 1.0 `.npy` header for `shape` (what `np.save` writes before the data)."""
    text = f"{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape!r}, }}"
    text += " " * (63 - (10 + len(text)) % 64) + "\n"
    return b"\x93NUMPY\x01\x00" + len(text).to_bytes(2, "little") + text.encode("latin1")


def _run(tmp_path: Path, *extra: str) -> int:
    model = tmp_path / "g.ir"
    model.write_text(GRAPH)
    return main(["run", str(model), "--device", "cpu", "-q", *extra])


@pytest.mark.parametrize("compress", [zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED])
def test_a_member_claiming_4_tib_is_corrupt_by_file_and_member(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], compress: int
) -> None:
    bad = tmp_path / "bad.npz"
    with zipfile.ZipFile(bad, "w", compression=compress) as archive:
        archive.writestr("x.npy", _npy_header((TIB,)) + bytes(128))  # f32: 4 TiB
    assert _run(tmp_path, "--inputs", str(bad)) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "not enough memory" not in err, err
    assert f"cannot read inputs file '{bad}': member 'x' is corrupt" in err, err
    assert "its header claims" in err and "(4 TiB)" in err and "holds 128 bytes" in err, err


def test_a_compressed_member_claiming_more_than_deflate_can_make_is_corrupt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The zip directory's sizes are the file's word too: 4 TiB from a few compressed bytes is
    more than deflate's 1032:1, refused before any byte is inflated."""
    bad = tmp_path / "w.npz"
    with zipfile.ZipFile(bad, "w", compression=zipfile.ZIP_DEFLATED) as archive:
        archive.writestr("w.npy", _npy_header((4, 4)) + bytes(64))
    data = bytearray(bad.read_bytes())
    info = zipfile.ZipFile(bad).infolist()[0]
    claimed = (TIB - 1).to_bytes(8, "little")[:4]  # the 32-bit uncompressed size, as large
    for signature, offset in ((b"PK\x03\x04", 22), (b"PK\x01\x02", 24)):
        at = data.find(signature)
        data[at + offset : at + offset + 4] = claimed
    bad.write_bytes(bytes(data))
    assert info.compress_size < 100
    assert _run(tmp_path, "--weights", str(bad)) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "not enough memory" not in err, err
    assert f"cannot read weights file '{bad}': member 'w' is corrupt" in err, err


def _stored_zip(name: bytes, data: bytes, claimed: int) -> bytes:
    """A zip of one stored (uncompressed) member `data` whose directory claims `claimed` bytes
    for it, compressed and not (zip64 sizes, as a writer of a member that large puts them)."""
    crc = zlib.crc32(data)
    local = struct.pack(
        "<4sHHHHHIIIHH", b"PK\x03\x04", 45, 0, 0, 0, 0, crc, len(data), len(data), len(name), 0
    )
    zip64 = struct.pack("<HHQQ", 1, 16, claimed, claimed)
    central = struct.pack(
        "<4sHHHHHHIIIHHHHHII",
        b"PK\x01\x02", 45, 45, 0, 0, 0, 0, crc, 0xFFFFFFFF, 0xFFFFFFFF,
        len(name), len(zip64), 0, 0, 0, 0, 0,
    )  # fmt: skip
    directory = central + name + zip64
    offset = len(local) + len(name) + len(data)
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(directory), offset, 0)
    return local + name + data + directory + end


def test_a_stored_member_whose_directory_claims_4_tib_too_is_corrupt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The header and the zip directory agree on 4 TiB; the file holds a few hundred bytes."""
    header = _npy_header((TIB,))
    bad = tmp_path / "bad.npz"
    bad.write_bytes(_stored_zip(b"x.npy", header + bytes(128), len(header) + 4 * TIB))
    assert zipfile.ZipFile(bad).getinfo("x.npy").file_size == len(header) + 4 * TIB
    assert _run(tmp_path, "--inputs", str(bad)) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err and "not enough memory" not in err, err
    assert f"cannot read inputs file '{bad}': member 'x' is corrupt" in err, err
    assert f"but the file holds {bad.stat().st_size} bytes" in err, err


def test_a_stored_member_claiming_more_than_it_takes_is_corrupt(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = tmp_path / "w.npz"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("w.npy", _npy_header((4, 4)) + bytes(64))
    data = bytearray(bad.read_bytes())
    at = data.find(b"PK\x01\x02") + 24  # the central directory's uncompressed size
    data[at : at + 4] = (1 << 31).to_bytes(4, "little")
    bad.write_bytes(bytes(data))
    assert _run(tmp_path, "--weights", str(bad)) == 1
    err = capsys.readouterr().err
    assert f"'{bad}': member 'w' is corrupt: stored uncompressed, it claims 2147483648" in err, err


def test_a_truncated_member_is_corrupt(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "short.npz"
    with zipfile.ZipFile(bad, "w") as archive:
        archive.writestr("x.npy", _npy_header((2, 4)) + bytes(20))
    assert _run(tmp_path, "--inputs", str(bad)) == 1
    err = capsys.readouterr().err
    assert f"'{bad}': member 'x' is corrupt" in err and "holds 20 bytes" in err, err


def test_npz_arrays_read_as_numpy_writes_them(tmp_path: Path) -> None:
    """Stored and compressed, C and Fortran order, big-endian, 0-d, empty and bf16 records."""
    import ml_dtypes

    from optgraph.reference.npz_files import read_npz

    rng = np.random.default_rng(0)
    arrays = {
        "c": rng.normal(size=(3, 5)).astype(np.float32),
        "f": np.asfortranarray(rng.normal(size=(4, 2))),
        "big": np.arange(6, dtype=">i4"),
        "scalar": np.float16(1.5),
        "empty": np.zeros((0, 3), np.int64),
        "bf16": rng.normal(size=(2, 3)).astype(ml_dtypes.bfloat16),
    }
    for save in (np.savez, np.savez_compressed):
        path = tmp_path / f"{save.__name__}.npz"
        save(path, **arrays)
        got = read_npz(path, "inputs")
        with np.load(path) as want:
            assert sorted(got) == sorted(want.files)
            for name in want.files:
                assert got[name].dtype == want[name].dtype and got[name].shape == want[name].shape
                assert got[name].tobytes(order="A") == want[name].tobytes(order="A"), name


def test_keys_written_as_in_the_ir_name_their_values(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rng = np.random.default_rng(1)
    x, w = rng.normal(size=(2, 4)).astype(np.float32), rng.normal(size=(4, 4)).astype(np.float32)
    np.savez(tmp_path / "in.npz", **{"%x": x})
    np.savez(tmp_path / "w.npz", **{"%w": w})
    out = tmp_path / "out.npz"
    argv = ["--inputs", str(tmp_path / "in.npz"), "--weights", str(tmp_path / "w.npz")]
    assert _run(tmp_path, *argv, "--check", "--save-outputs", str(out)) == 0
    with np.load(out) as saved:
        np.testing.assert_array_equal(saved["y"], x @ w)


def test_a_value_given_under_both_spellings_is_reported(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    x = np.zeros((2, 4), np.float32)
    np.savez(tmp_path / "in.npz", **{"%x": x, "x": x})
    assert _run(tmp_path, "--inputs", str(tmp_path / "in.npz")) == 1
    err = capsys.readouterr().err
    assert "input '%x' given twice" in err and "did you mean" not in err, err


def test_a_misspelled_key_is_told_the_name_as_the_ir_spells_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The key is compared without its `%`: `%xx` is close to `x` as `xx` is."""
    x = np.zeros((2, 4), np.float32)
    for key in ("%xx", "xx"):
        np.savez(tmp_path / "in.npz", **{key: x})
        assert _run(tmp_path, "--inputs", str(tmp_path / "in.npz")) == 1
        err = capsys.readouterr().err
        assert f"unknown input '{key}'" in err and "(did you mean '%x'?)" in err, err


@pytest.mark.parametrize("typed", ["x", "%x"])
def test_a_suggestion_is_never_what_was_typed(typed: str) -> None:
    """Whatever a caller calls unknown, the hint never repeats it ("unknown input '%x' (did you
    mean '%x'?)"): with the sigil or without, the typed word is no suggestion."""
    from optgraph.errors import did_you_mean

    assert did_you_mean(typed, ["x"], sigil="%") == ""
    assert did_you_mean(typed, ["x", "xy"], sigil="%") == " (did you mean '%xy'?)"
    assert did_you_mean("axis", ["axis", "axes"]) == " (did you mean 'axes'?)"
