"""Arrays from a `.npz` file, every member checked against the file before anything is allocated.

A `.npz` is a zip archive of `.npy` members, each a small header (dtype, shape) and the raw data.
NumPy's own reader allocates what the header claims, so a damaged or hostile member claiming
4 TiB ends in a `MemoryError` ("not enough memory") that names no file. `read_npz` reads each
member's header first and refuses, naming the file and the member, a member whose data would
not fit in the bytes the archive holds for it:

    cannot read inputs file 'x.npz': member 'x' is corrupt: its header claims f32[1099511627776]
    (4 TiB) but the member holds 128 bytes

- the zip directory's sizes are checked too: a member's compressed bytes must lie within the file,
  a stored member holds exactly its uncompressed size, and a compressed one may expand by at most
  deflate's ratio (1032:1), so a member claiming more than that of its compressed bytes is corrupt;
- a member compressed by another method than deflate, or encrypted, is corrupt (zipfile would
  raise `NotImplementedError` or `RuntimeError`);
- object arrays are refused (no pickles), as `np.load(allow_pickle=False)` does;
- a broken zip, header or member data is an `InputError` naming the file (and the member).

Complexity: O(members + bytes read).
"""

from __future__ import annotations

import math
import zipfile
import zlib
from pathlib import Path
from tokenize import TokenError
from typing import IO

import numpy as np

from optgraph.errors import InputError
from optgraph.host_memory import size_text

# Deflate expands at most about 1032:1 (a run of one byte); anything beyond is not deflate.
MAX_DEFLATE_RATIO = 1032
# Zip flag bits of a member zipfile cannot read: encrypted (0), patch data (5), strong
# encryption (6).
UNREADABLE_FLAGS = 0x1 | 0x20 | 0x40


def read_npz(path: str | Path, kind: str) -> dict[str, np.ndarray]:
    """{member name without `.npy`: array} of the `.npz` file `path`; `kind` names the file in
    messages ("inputs", "weights")."""
    path = Path(path)
    if not zipfile.is_zipfile(path):
        raise InputError(f"cannot read {kind} file '{path}': not an .npz archive")
    arrays: dict[str, np.ndarray] = {}
    try:
        size = path.stat().st_size
        with zipfile.ZipFile(path) as archive:
            for info in archive.infolist():
                if not info.filename:  # ZipInfo.is_dir would raise IndexError
                    raise InputError(f"cannot read {kind} file '{path}': a member has no name")
                if info.is_dir():
                    continue
                name = info.filename.removesuffix(".npy")
                _check_sizes(info, size, path, kind, name)
                arrays[name] = _read_member(archive, info, path, kind, name)
    # NotImplementedError: flags in a member's local header that the directory did not show
    except (
        OSError,
        ValueError,
        EOFError,
        NotImplementedError,
        zipfile.BadZipFile,
        zlib.error,
    ) as err:
        raise InputError(f"cannot read {kind} file '{path}': {err}") from None
    return arrays


def _corrupt(path: Path, kind: str, name: str, why: str) -> InputError:
    return InputError(f"cannot read {kind} file '{path}': member '{name}' is corrupt: {why}")


def _check_sizes(info: zipfile.ZipInfo, size: int, path: Path, kind: str, name: str) -> None:
    """The zip directory's word on a member against the file (`size` bytes): its compressed
    bytes inside the file, stored or deflated (as NumPy writes them; no other method's ratio is
    bounded) and not encrypted, and an uncompressed size they can make."""
    if info.flag_bits & UNREADABLE_FLAGS:
        why = f"its zip flags {info.flag_bits:#x} say encrypted or patched (NumPy writes neither)"
        raise _corrupt(path, kind, name, why)
    if info.compress_type not in (zipfile.ZIP_STORED, zipfile.ZIP_DEFLATED):
        why = f"compression method {info.compress_type} (an .npz member is stored or deflated)"
        raise _corrupt(path, kind, name, why)
    if info.header_offset + info.compress_size > size:
        why = (
            f"the archive's directory says it takes {info.compress_size} bytes "
            f"({size_text(info.compress_size)}) from offset {info.header_offset}, but the file "
            f"holds {size} bytes"
        )
        raise _corrupt(path, kind, name, why)
    if info.compress_type == zipfile.ZIP_STORED:
        if info.file_size != info.compress_size:
            why = (
                f"stored uncompressed, it claims {info.file_size} bytes but takes "
                f"{info.compress_size}"
            )
            raise _corrupt(path, kind, name, why)
    elif info.file_size > MAX_DEFLATE_RATIO * max(info.compress_size, 1):
        why = f"it claims {info.file_size} bytes from {info.compress_size} compressed"
        raise _corrupt(path, kind, name, why)


def _read_member(
    archive: zipfile.ZipFile, info: zipfile.ZipInfo, path: Path, kind: str, name: str
) -> np.ndarray:
    """One member's array, its header checked against the member's size (`_check_sizes`: the
    size is one the file can hold) first."""
    with archive.open(info) as handle:
        try:
            shape, fortran, dtype, header = _header(handle)
        except (ValueError, TypeError, SyntaxError, TokenError, RecursionError) as err:
            # NumPy's header parser lets ast's and tokenize's errors through for broken text
            why = str(err).splitlines()[0] if str(err) else type(err).__name__
            raise _corrupt(path, kind, name, f"bad .npy header ({why})") from None
        if dtype.hasobject:
            raise _corrupt(path, kind, name, "it holds Python objects (a pickle), not numbers")
        claimed = math.prod(shape) * dtype.itemsize
        held = info.file_size - header
        if claimed > held:
            described = f"{dtype}[{','.join(map(str, shape))}]"
            why = f"its header claims {described} ({size_text(claimed)}), the member holds {held} bytes"
            raise _corrupt(path, kind, name, why)
        array = np.empty(shape, dtype=dtype, order="F" if fortran else "C")
        got = _read_into(handle, array.T if fortran else array, claimed)
    if got != claimed:
        raise _corrupt(path, kind, name, f"{got} of its {claimed} data bytes are there")
    return array


def _read_into(handle: IO[bytes], array: np.ndarray, nbytes: int) -> int:
    """Fill the C-contiguous `array` from `handle`; the bytes read (fewer: the data ends)."""
    if nbytes == 0:
        return 0
    view = memoryview(array.reshape(-1).view(np.uint8).data)  # any dtype, bf16's records too
    got = 0
    while got < nbytes:
        n = handle.readinto(view[got:])  # type: ignore[attr-defined]
        if not n:
            break
        got += n
    return got


def _header(handle: IO[bytes]) -> tuple[tuple[int, ...], bool, np.dtype, int]:
    """(shape, fortran order, dtype, header bytes) of the `.npy` stream at `handle`."""
    fmt = np.lib.format
    version = fmt.read_magic(handle)
    if version == (1, 0):
        shape, fortran, dtype = fmt.read_array_header_1_0(handle)
    elif version == (2, 0):
        shape, fortran, dtype = fmt.read_array_header_2_0(handle)
    else:
        raise ValueError(f"unsupported .npy format version {version[0]}.{version[1]}")
    if any(d < 0 for d in shape):
        raise ValueError(f"negative dimension in shape {shape}")
    return tuple(int(d) for d in shape), bool(fortran), np.dtype(dtype), handle.tell()
