"""How optgraph writes every output file: atomically, through a temporary file and a rename.

The bytes go to a temporary file in the target's directory, which is then renamed over the target
with `os.replace`, so a reader never sees half a file and an interrupted write leaves the old file
in place:

    before: out/ holds last run's model.opt.ir
    after:  out/model.opt.ir is either entirely the old text or entirely the new one

A low module beside `errors.py`, so every layer that writes files (`ir/dot.py`, `artifacts.py`,
the command line) can use it without importing upwards. Problems (a missing directory, a target
that is a directory, a full disk) are `InputError`s naming the file, never tracebacks.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from optgraph.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def check_target(target: Path, what: str = "") -> None:
    """Raise the `InputError` a write to `target` would meet (no directory, a directory), before
    any long work. `what` prefixes the message, e.g. "--save-outputs: "."""
    directory = target.parent
    if not directory.is_dir():
        raise InputError(f"{what}cannot write '{target}': directory '{directory}' does not exist")
    if target.is_dir():
        raise InputError(f"{what}cannot write '{target}': it is a directory")


def temporary_beside(target: Path, what: str = "") -> Path:
    """An empty temporary file in `target`'s directory for the caller to fill, then `commit`
    (several files committed together: `frontends/model_files.py`). Its name ends in the
    target's suffix, for writers that choose a format by it (`.npz`, `.safetensors`)."""
    check_target(target, what)
    try:
        suffix = f".tmp{target.suffix}"
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=suffix)
    except OSError as err:
        raise InputError(f"{what}cannot write '{target}': {err.strerror}") from None
    os.close(fd)
    return Path(name)


def commit(temporary: Path, target: Path) -> None:
    """`temporary` (`temporary_beside`) renamed over `target`, with the mode a new file gets
    (0666 less the umask: mkstemp's, or a writer's, may be 0600)."""
    os.chmod(temporary, 0o666 & ~_umask())
    os.replace(temporary, target)


@contextmanager
def open_atomic(path: str | os.PathLike[str], what: str = "") -> Iterator[IO[bytes]]:
    """A binary handle on a temporary file that becomes `path` when the block ends without an
    exception (and is removed otherwise). `what` prefixes error messages, e.g. "--save-outputs: "."""
    target = Path(path)
    check_target(target, what)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except OSError as err:
        raise InputError(f"{what}cannot write '{target}': {err.strerror}") from None
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the usual mode
        os.replace(tmp, target)
    except OSError as err:
        Path(tmp).unlink(missing_ok=True)
        raise InputError(f"{what}cannot write '{target}': {err.strerror}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_atomic(path: str | os.PathLike[str], text: str) -> Path:
    """Write `text` (UTF-8, `\\n` line ends) to `path` atomically; return the path."""
    with open_atomic(path) as handle:
        handle.write(text.encode("utf-8"))
    return Path(path)


def write_atomic_bytes(path: str | os.PathLike[str], data: bytes) -> Path:
    """Write `data` to `path` atomically; return the path."""
    with open_atomic(path) as handle:
        handle.write(data)
    return Path(path)


def check_npz_target(path: str | os.PathLike[str], what: str = "") -> Path:
    """`path` if a `.npz` file can be written there (see `check_target`), else an `InputError`."""
    target = Path(path)
    if target.suffix != ".npz":
        raise InputError(f"{what}'{target}' is not a .npz file name")
    check_target(target, what)
    return target


def write_npz(path: str | os.PathLike[str], arrays: Mapping[str, Any], what: str = "") -> Path:
    """Write arrays by name to a `.npz` file atomically (NumPy's format; bf16 as 2-byte records,
    as `--inputs` reads them). CuPy arrays are copied to the host first."""
    import numpy as np  # only a command that saves arrays pays for NumPy

    target = check_npz_target(path, what)
    host = {
        name: np.ascontiguousarray(value.get() if hasattr(value, "get") else value)
        for name, value in arrays.items()
    }
    with open_atomic(target, what) as handle:
        np.savez(handle, **host)  # type: ignore[arg-type]
    return target
