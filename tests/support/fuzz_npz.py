"""A tiny valid `.npz` file and hypothesis strategies that damage one part of it at a time,
knowing both formats (tests/bad_input/test_fuzz_npz.py).

    raw = npz_bytes(members(), compressed=True)   # x: f32[2,4], w: f32[4,4] Fortran order, ...
    mutant = draw(npz_mutants())                  # a Mutant: what was changed, the file's bytes

An `.npz` is a zip archive of `.npy` members. An `.npy` member is the magic `\\x93NUMPY`, a
version (1.0: a 2-byte header length, 2.0 and 3.0: 4 bytes), a Python dict literal
`{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }` padded to 64 bytes, then the data.
A zip member has a local header before its data and an entry in the central directory at the end
(flags, compression method, CRC, compressed and uncompressed sizes, the local header's offset).

A mutant changes one member's `.npy` magic, version, header length, dict text, dtype, shape,
order or data length; one field of a zip header (local or central); the members (a text file, a
name without `.npy`, a directory, the same name twice, a deflate bomb); or the archive's bytes
(cut short, one byte changed).
"""

from __future__ import annotations

import functools
import io
import struct
import zipfile

import numpy as np
from hypothesis import strategies as st

from tests.support.fuzz_checks import Mutant

ARRAYS = {
    "x": np.arange(8, dtype=np.float32).reshape(2, 4),
    "w": np.asfortranarray(np.linspace(-1, 1, 16, dtype=np.float32).reshape(4, 4)),
    "i": np.array([3, -3], dtype=np.int64),
    "h": np.array([0.5, 2.0, -1.0], dtype=np.float16),
}


def graph_reading(kind: str) -> str:
    """A graph whose `kind`s ("input", "weight") are the arrays of `ARRAYS`, as IR text."""
    return f"""graph g {{
  {kind} %x : f32[2,4]
  {kind} %w : f32[4,4]
  {kind} %i : i64[2]
  {kind} %h : f16[3]
  %y = matmul(%x, %w) : f32[2,4]
  output %y
}}
"""


def npy_header(descr: str, fortran: bool, shape: object, version: int = 1) -> bytes:
    """The `.npy` magic, version and header of `np.save` for these fields (written as given)."""
    text = f"{{'descr': {descr!r}, 'fortran_order': {fortran!r}, 'shape': {shape!r}, }}"
    return header_bytes(text, version)


def header_bytes(text: str, version: int = 1) -> bytes:
    """`text` as an `.npy` header of `version` (1: 2-byte length, 2 and 3: 4 bytes), padded."""
    size = 2 if version == 1 else 4
    text += " " * (63 - (8 + size + len(text)) % 64) + "\n"
    length = len(text).to_bytes(size, "little")
    return b"\x93NUMPY" + bytes([version, 0]) + length + text.encode("latin1")


def npy(array: np.ndarray) -> bytes:
    fortran = array.flags.f_contiguous and not array.flags.c_contiguous
    data = (array.T if fortran else array).tobytes()
    return npy_header(array.dtype.str, fortran, array.shape) + data


def members() -> dict[str, bytes]:
    return {f"{name}.npy": npy(array) for name, array in ARRAYS.items()}


def npz_bytes(files: dict[str, bytes], compressed: bool = False) -> bytes:
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", compression=method) as archive:
        for name, data in files.items():
            archive.writestr(name, data)
    return buffer.getvalue()


DESCRS = ["<f4", "|O", "O", "<U5", "|S3", "|V8", "<c8", "<M8[s]", "<m8", "xyz", "", "<f3",
          "<f16", ">f4", "|b1", "<i16", "[('a', '<f4')]", "V0", "<f4\x00"]  # fmt: skip
SHAPES = ["(2, 4)", "(8,)", "()", "(-1, 8)", "(2, -4)", f"({2**62}, {2**62})", f"({2**40},)",
          "(2.0, 4)", "('2', 4)", "((2,), 4)", "[2, 4]", "(0, 4)", "(1,) * 70",
          "(" + "1, " * 64 + "8)", "None", "(True, 8)", f"({2**64},)"]  # fmt: skip
BROKEN_HEADERS = [
    "", "{", "{}", "{'descr': '<f4'}", "{'descr': '<f4', 'fortran_order': False}",
    "{'descr': '<f4', 'fortran_order': 'no', 'shape': (2, 4)}",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), 'extra': 1}",
    "{'descr': __import__('os').getcwd(), 'fortran_order': False, 'shape': (2, 4)}",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4)",
    "[1, 2, 3]", "'<f4'", "{" * 200 + "}" * 200, "(" * 1000, "{'descr': '<f4', 'descr': 1}",
    "{'descr': {'names': ['a'], 'formats': ['<f4']}, 'fortran_order': False, 'shape': (2,)}",
    "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 4), }\x00",
    "\xff\xfe{'descr': '<f4'}",
]  # fmt: skip


def _npy_changes() -> st.SearchStrategy[tuple[str, bytes]]:
    """(what, bytes) of the `x` member with one thing changed."""
    good = npy(ARRAYS["x"])
    data = ARRAYS["x"].tobytes()
    header = npy_header("<f4", False, (2, 4))
    return st.one_of(
        st.sampled_from([b"\x93NUMPZ", b"\x00" * 6, b"PK\x03\x04\x00\x00", b""]).map(
            lambda m: (f"magic {m!r}", m + good[6:])
        ),
        st.sampled_from([(1, 0), (2, 0), (3, 0), (0, 0), (4, 0), (1, 1), (255, 255)]).map(
            lambda v: (f"version {v}", good[:6] + bytes(v) + good[8:])
        ),
        st.sampled_from([0, 1, 9, 70, 0xFFFF]).map(
            lambda n: (f"header length {n}", good[:8] + n.to_bytes(2, "little") + good[10:])
        ),
        st.sampled_from(DESCRS).map(
            lambda d: (f"descr {d!r}", npy_header(d, False, (2, 4)) + data)
        ),
        st.sampled_from(SHAPES).map(lambda s: (f"shape {s[:30]}", _with_shape(s) + data)),
        st.sampled_from(BROKEN_HEADERS).map(
            lambda t: (f"header {t[:40]!r}", header_bytes(t) + data)
        ),
        st.sampled_from([2, 3]).map(
            lambda v: (f"version {v} header", npy_header("<f4", False, (2, 4), v) + data)
        ),
        st.just(("fortran order", npy_header("<f4", True, (2, 4)) + data)),
        st.sampled_from([0, 1, 4, 31, 33, 100]).map(
            lambda n: (
                f"data of {n} bytes",
                header + data[:n] if n < 32 else header + data + bytes(n - 32),
            )
        ),
        st.integers(0, len(good) - 1).map(lambda n: (f"member cut to {n} bytes", good[:n])),
    )


def _with_shape(shape: str) -> bytes:
    return header_bytes(f"{{'descr': '<f4', 'fortran_order': False, 'shape': {shape}, }}")


# Offsets of fields in a local header (after PK\3\4) and a central directory entry (PK\1\2).
LOCAL = {"flags": (6, "H"), "method": (8, "H"), "crc": (14, "I"), "compressed": (18, "I"),
         "size": (22, "I"), "name length": (26, "H"), "extra length": (28, "H")}  # fmt: skip
CENTRAL = {"flags": (8, "H"), "method": (10, "H"), "crc": (16, "I"), "compressed": (20, "I"),
           "size": (24, "I"), "name length": (28, "H"), "extra length": (30, "H"),
           "offset": (42, "I")}  # fmt: skip
FIELD_VALUES = [0, 1, 2, 8, 12, 14, 99, 0xFFFF, 0xFFFFFFFF, 2**31, 100, 1000]


def patch_field(
    raw: bytes, signature: bytes, which: int, at: int, fmt: str, value: int
) -> bytes | None:
    starts = [i for i in range(len(raw) - 3) if raw[i : i + 4] == signature]
    if which >= len(starts):
        return None
    size = struct.calcsize("<" + fmt)
    value &= (1 << (8 * size)) - 1
    start = starts[which] + at
    return raw[:start] + struct.pack("<" + fmt, value) + raw[start + size :]


def _zip_field_changes(compressed: bool) -> st.SearchStrategy[Mutant]:
    raw = npz_bytes(members(), compressed)
    kind = "deflated" if compressed else "stored"

    def change(where: str, field: str, which: int, value: int) -> Mutant:
        table, signature = (LOCAL, b"PK\x03\x04") if where == "local" else (CENTRAL, b"PK\x01\x02")
        at, fmt = table[field]
        patched = patch_field(raw, signature, which, at, fmt, value)
        what = f"{kind}: {where} header {which} {field} = {value}"
        return Mutant(what, patched if patched is not None else raw)

    def field_change(where: str, field: str, which: int, value: int) -> Mutant:
        return change(where if field in LOCAL else "central", field, which, value)

    fields = st.sampled_from(sorted(set(LOCAL) | set(CENTRAL)))
    return st.builds(
        field_change,
        st.sampled_from(["local", "central"]),
        fields,
        st.integers(0, len(ARRAYS) - 1),
        st.sampled_from(FIELD_VALUES),
    )


@functools.cache
def _bomb(claimed: tuple[int, ...]) -> Mutant:
    """A deflated `x.npy` of 16 MiB of zeros (about 16 KiB compressed: within deflate's ratio)
    whose header claims `claimed` floats."""
    data = npy_header("<f4", False, claimed) + bytes(16 << 20)
    return Mutant(f"x.npy a deflate bomb claiming f32{list(claimed)}",
                  npz_bytes({**members(), "x.npy": data}, True))  # fmt: skip


def _member_changes() -> st.SearchStrategy[Mutant]:
    good = members()

    def with_files(what: str, files: dict[str, bytes], compressed: bool = False) -> Mutant:
        return Mutant(what, npz_bytes(files, compressed))

    others = {
        "readme.txt": b"not an array",
        "x": npy(ARRAYS["x"]),
        "dir/": b"",
        "../x.npy": npy(ARRAYS["x"]),
        "/abs.npy": npy(ARRAYS["x"]),
        "\u00e9.npy": npy(ARRAYS["x"]),
    }
    return st.one_of(
        st.sampled_from(sorted(others)).map(
            lambda n: with_files(f"member {n!r} added", {**good, n: others[n]})
        ),
        st.sampled_from(sorted(good)).map(
            lambda n: with_files(f"member {n} removed", {k: v for k, v in good.items() if k != n})
        ),
        st.just(with_files("no members", {})),
        st.sampled_from([(4 << 20,), (2**40,), (1 << 20, 4)]).map(_bomb),
        st.booleans().map(lambda c: with_files(f"x.npy holds i64[2] (compressed {c})",
                                              {**good, "x.npy": npy(ARRAYS["i"])}, c)),
    )  # fmt: skip


def _duplicated(compressed: bool) -> Mutant:
    buffer = io.BytesIO()
    method = zipfile.ZIP_DEFLATED if compressed else zipfile.ZIP_STORED
    with zipfile.ZipFile(buffer, "w", compression=method) as archive:
        for name, data in members().items():
            archive.writestr(name, data)
        archive.writestr("x.npy", npy(np.zeros((3, 3), np.float32)))  # zipfile warns: allowed
    return Mutant(f"x.npy twice, the second f32[3,3] (compressed {compressed})", buffer.getvalue())


def _byte_changes(compressed: bool) -> st.SearchStrategy[Mutant]:
    raw = npz_bytes(members(), compressed)
    kind = "deflated" if compressed else "stored"
    cut = st.integers(0, len(raw) - 1).map(lambda n: Mutant(f"{kind} cut to {n} bytes", raw[:n]))
    flip = st.tuples(st.integers(0, len(raw) - 1), st.integers(0, 255)).map(
        lambda p: Mutant(
            f"{kind} byte {p[0]} = {p[1]}", raw[: p[0]] + bytes([p[1]]) + raw[p[0] + 1 :]
        )
    )
    return cut | flip


def npz_mutants() -> st.SearchStrategy[Mutant]:
    """The tiny `.npz` with one thing changed (see the module docstring)."""
    good = members()
    npy_level = st.tuples(_npy_changes(), st.booleans()).map(
        lambda p: Mutant(
            f"x.npy: {p[0][0]} (compressed {p[1]})", npz_bytes({**good, "x.npy": p[0][1]}, p[1])
        )
    )
    return st.one_of(
        npy_level,
        _zip_field_changes(False),
        _zip_field_changes(True),
        _member_changes(),
        st.booleans().map(_duplicated),
        _byte_changes(False),
        _byte_changes(True),
    )
