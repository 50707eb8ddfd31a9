"""Compiled programs kept on disk, so the second `generate` of a model starts in a second or two.

    cache = ProgramCache(default_cache_dir())          # ~/.cache/optgraph/programs
    key = cache_key({"model": fingerprint, "step": "decode", "context": 4096, ...})
    program, hit = cache.load_or_build(key, build)      # build() runs on a miss, then is stored

An entry is one file `<key>.ogp` named by a SHA-256 over everything the program depends on: the
caller's parts (the model's fingerprint, the step, dtype, target, pipeline, lowering options,
context length) and `software_stamp()` (Python, NumPy, and every optgraph source file's name,
size and modification time: code that changed compiles again). Its bytes are a magic line, the
payload's length and SHA-256, then the payload (a pickle of what `build` returned). It is written
to a temporary file beside it and renamed (`output_files.open_atomic`): a reader sees a whole
entry or none. On load the magic, length and digest are checked and the pickle loaded; an entry
that fails any of them (a disk error, a cut file, another version's classes) is reported through
`on_rebuild` and built again, and the new entry replaces it.

Caches are written by this user for this user: the pickle is trusted like the source files are.
No eviction: entries stay until removed (`rm -r ~/.cache/optgraph/programs`).
"""

from __future__ import annotations

import hashlib
import json
import os
import pickle
import platform
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

import numpy as np

from optgraph.errors import InputError
from optgraph.output_files import open_atomic

T = TypeVar("T")
MAGIC = b"optgraph program cache 1\n"
SUFFIX = ".ogp"


def default_cache_dir() -> Path:
    """`$XDG_CACHE_HOME/optgraph/programs`, else `~/.cache/optgraph/programs`."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "optgraph" / "programs"


_STAMP: str | None = None


def software_stamp() -> str:
    """What a compiled program depends on besides its inputs: versions and optgraph's sources."""
    global _STAMP
    if _STAMP is None:
        root = Path(__file__).resolve().parents[1]
        digest = hashlib.sha256(f"{platform.python_version()} numpy {np.__version__}".encode())
        for folder, dirs, files in sorted(os.walk(root)):
            dirs.sort()
            for name in sorted(files):
                if name.endswith((".py", ".lark")):
                    stat = (Path(folder) / name).stat()
                    relative = os.path.relpath(Path(folder) / name, root)
                    digest.update(f"{relative}:{stat.st_size}:{stat.st_mtime_ns}\n".encode())
        _STAMP = digest.hexdigest()
    return _STAMP


def cache_key(parts: Mapping[str, Any]) -> str:
    """The entry name of a program: a hash over `parts` (JSON-able) and `software_stamp()`."""
    text = json.dumps(dict(parts), sort_keys=True, default=str)
    return hashlib.sha256(f"{software_stamp()}\n{text}".encode()).hexdigest()[:40]


class CorruptEntry(Exception):
    """A cache entry that cannot be used; the message says why."""


def encode_entry(value: Any) -> bytes:
    payload = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
    digest = hashlib.sha256(payload).digest()
    return MAGIC + len(payload).to_bytes(8, "little") + digest + payload


def decode_entry(data: bytes) -> Any:
    if not data.startswith(MAGIC):
        raise CorruptEntry("not a program cache entry (bad magic)")
    head = len(MAGIC)
    if len(data) < head + 40:
        raise CorruptEntry("cut short")
    length = int.from_bytes(data[head : head + 8], "little")
    digest, payload = data[head + 8 : head + 40], data[head + 40 :]
    if len(payload) != length:
        raise CorruptEntry(f"{len(payload)} payload bytes, the header says {length}")
    if hashlib.sha256(payload).digest() != digest:
        raise CorruptEntry("checksum mismatch")
    try:
        return pickle.loads(payload)  # our own entry, checked above
    except Exception as err:  # noqa: BLE001 - classes of another version unpickle in many ways
        raise CorruptEntry(f"cannot be loaded ({type(err).__name__}: {err})") from None


class ProgramCache:
    """Entries in `directory` (None: no cache, every program is built)."""

    def __init__(
        self,
        directory: str | Path | None,
        on_rebuild: Callable[[Path, str], None] | None = None,
    ) -> None:
        self.directory = None if directory is None else Path(directory)
        self.on_rebuild = on_rebuild
        self.hits = 0
        self.misses = 0
        self.rebuilt = 0

    def path(self, key: str) -> Path | None:
        return None if self.directory is None else self.directory / f"{key}{SUFFIX}"

    def load_or_build(self, key: str, build: Callable[[], T]) -> tuple[T, bool]:
        """(the entry's value, True) when `key` has a whole entry; else (build(), False), the
        value stored for next time."""
        path = self.path(key)
        if path is not None and path.is_file():
            try:
                value: T = decode_entry(path.read_bytes())
                self.hits += 1
                return value, True
            except (CorruptEntry, OSError) as err:
                reason = err.strerror if isinstance(err, OSError) else str(err)
                self.rebuilt += 1
                if self.on_rebuild is not None:
                    self.on_rebuild(path, reason or "unreadable")
        self.misses += 1
        value = build()
        if path is not None:
            self._store(path, value)
        return value, False

    def _store(self, path: Path, value: Any) -> None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise InputError(
                f"program cache: cannot create '{path.parent}': {err.strerror}"
            ) from None
        data = encode_entry(value)
        with open_atomic(path, "program cache: ") as handle:
            handle.write(data)
