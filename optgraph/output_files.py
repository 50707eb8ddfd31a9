"""How optgraph writes every output file: atomically, through a temporary file and a rename.

The bytes go to a temporary file in the target's directory, which is then renamed over the target
with `os.replace`, so a reader never sees half a file and an interrupted write leaves the old file
in place:

    before: out/ holds last run's model.opt.ir
    after:  out/model.opt.ir is either entirely the old text or entirely the new one

Files that belong together (`compile -o DIR`'s artifacts with `--report-json`, `import`'s IR
and weights) go through an `OutputSet`: every file is written to a temporary beside its target
first, then all are renamed into place together; a failure at any point (a full disk while
writing, a rename that fails) leaves every old target as it was and removes every temporary:

    before: out/ holds last run's model.opt.ir, report.json, kernels.cu, ...
    after:  all of them the new compile's, or all of them still the old one's

A low module beside `errors.py`, so every layer that writes files (`ir/dot.py`, `artifacts.py`,
the command line) can use it without importing upwards. Problems (a missing directory, a target
that is a directory, a full disk) are `InputError`s naming the file, never tracebacks.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator, Mapping
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
        # np.require keeps a 0-d array 0-d (ascontiguousarray makes it 1-d: a graph's f32[]
        # weight read back as f32[1])
        name: np.require(value.get() if hasattr(value, "get") else value, requirements="C")
        for name, value in arrays.items()
    }
    with open_atomic(target, what) as handle:
        np.savez(handle, **host)
    return target


def write_file(path: Path, data: bytes) -> None:
    """`data` into the file `path` (no rename: what `OutputSet` fills its temporaries with)."""
    with open(path, "wb") as handle:
        handle.write(data)


class OutputSet:
    """Files that appear together or not at all (see the module docstring).

        outputs = OutputSet()
        outputs.write_text(out / "model.opt.ir", text)     # to a temporary beside the target
        outputs.write_with(out / "w.safetensors", save)    # save(temporary path) fills it
        outputs.remove(out / "program.json")               # a stale member of the set goes too
        outputs.commit()                                   # all renamed into place, or none

    `discard()` (also what `commit` does on failure) removes the temporaries and the directories
    `make_directory` made. A write or a rename that fails raises an `InputError` naming the
    target, with every old target intact.
    """

    def __init__(self, what: str = "") -> None:
        self.what = what
        self._staged: dict[Path, Path | None] = {}  # target -> its temporary (None: remove it)
        self._made: list[Path] = []  # directories made for the set, innermost first

    def make_directory(self, directory: str | os.PathLike[str]) -> Path:
        """`directory`, made with its missing parents for files of the set; a set that does
        not commit removes them again (each only while empty), as it removes its temporaries."""
        directory = Path(directory)
        missing = [p for p in (directory, *directory.parents) if not p.exists()]
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(
                f"{self.what}cannot create output directory '{directory}': {err.strerror or err}"
            ) from None
        self._made[:0] = missing
        return directory

    def write_with(self, target: str | os.PathLike[str], write: Callable[[Path], None]) -> None:
        """Stage `target`: `write(temporary)` fills a temporary beside it (same suffix)."""
        target = Path(target)
        temporary = temporary_beside(target, self.what)
        self._discard(target)
        self._staged[target] = temporary
        try:
            write(temporary)
        except OSError as err:
            self.discard()
            raise self._error(target, err) from None

    def write_text(self, target: str | os.PathLike[str], text: str) -> None:
        self.write_bytes(target, text.encode("utf-8"))

    def write_bytes(self, target: str | os.PathLike[str], data: bytes) -> None:
        self.write_with(target, lambda temporary: write_file(temporary, data))

    def remove(self, target: str | os.PathLike[str]) -> None:
        """`target` must not exist once the set is committed (a stale member of the set)."""
        target = Path(target)
        self._discard(target)
        self._staged[target] = None

    def targets(self) -> list[Path]:
        """The files the set writes, in staging order."""
        return [target for target, temporary in self._staged.items() if temporary is not None]

    def commit(self) -> list[Path]:
        """Rename every staged file over its target (and remove the removed ones) together;
        on any failure, put every old target back. The written targets."""
        backups: dict[Path, Path] = {}
        done: list[Path] = []
        current = None
        try:
            for current in self._staged:
                if current.exists():
                    backups[current] = self._backup(current)
            for current, temporary in self._staged.items():
                if temporary is None:
                    current.unlink(missing_ok=True)
                else:
                    os.chmod(temporary, 0o666 & ~_umask())
                    os.replace(temporary, current)
                done.append(current)
        except OSError as err:
            for target in done:
                self._restore(target, backups.pop(target, None))
            for backup in backups.values():
                backup.unlink(missing_ok=True)
            self.discard()
            assert current is not None
            raise self._error(current, err) from None
        for backup in backups.values():
            backup.unlink(missing_ok=True)
        written = self.targets()
        self._staged.clear()
        self._made.clear()
        return written

    def discard(self) -> None:
        """Remove every temporary, and the directories made for the set; nothing is committed."""
        for target in list(self._staged):
            self._discard(target)
        self._staged.clear()
        for directory in self._made:
            try:
                directory.rmdir()
            except OSError:  # something else is in it: not the set's to remove
                break
        self._made.clear()

    def _discard(self, target: Path) -> None:
        temporary = self._staged.pop(target, None)
        if temporary is not None:
            temporary.unlink(missing_ok=True)

    def _backup(self, target: Path) -> Path:
        """A second name for the old `target` (a hard link, else a copy): what a failed commit
        puts back."""
        fd, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".old")
        os.close(fd)
        backup = Path(name)
        backup.unlink()
        try:
            os.link(target, backup)
        except OSError:  # a file system without hard links
            shutil.copy2(target, backup)
        return backup

    @staticmethod
    def _restore(target: Path, backup: Path | None) -> None:
        try:
            if backup is None:
                target.unlink(missing_ok=True)
            else:
                os.replace(backup, target)
        except OSError:  # nothing more to try; the error raised names the failed write
            pass

    def _error(self, target: Path, err: OSError) -> InputError:
        return InputError(f"{self.what}cannot write '{target}': {err.strerror or err}")
