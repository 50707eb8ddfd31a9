"""C and C++ built with the host's compiler, each distinct build once, kept in a folder by digest.

`build(command, source, folder, source_suffix=".c", output_suffix=".so")` writes `source` to
`folder/KEY.c` and runs `command -o folder/KEY.so folder/KEY.c`, where KEY is the digest of the
command, the compiler's identity and the source; a later call with the same three finds the file
and builds nothing. Both files are written under temporary names and renamed into place, so
processes building the same program at once never see half a file. A failed build raises
`BuildError` with the compiler's message.

    library = build(("gcc", "-O3", "-shared", "-fPIC"), c_text, cache_folder())   # -> Path
    ctypes.CDLL(str(library))

The compiler's identity is what it predefines for these flags (`-dM -E`: its version, and with
`-march=native` the host's instruction sets), asked once per command and process, so a cache
folder shared between machines or compiler upgrades never hands out a foreign build.

Two users: the CPU kernels for quantized weights (`runtime/cpu/quantized.py`, a shared library
in the user's cache folder) and the CUDA emulator of the tests (executables and a precompiled
header in a temporary folder). Does not handle: Windows compilers, cleaning old builds.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import subprocess
from collections.abc import Sequence
from pathlib import Path

from optgraph.output_files import commit, temporary_beside

__all__ = ["BuildError", "build", "cache_folder", "find_compiler", "identity"]


class BuildError(RuntimeError):
    """The compiler refused a program (its message attached) or could not be run."""


def find_compiler(candidates: Sequence[str]) -> str | None:
    """The first of `candidates` on PATH, as its full path (None: none is installed)."""
    for name in candidates:
        found = shutil.which(name)
        if found is not None:
            return found
    return None


def cache_folder(*parts: str) -> Path:
    """`~/.cache/optgraph/PARTS` (under `$XDG_CACHE_HOME` where that is set), created."""
    root = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    folder = Path(root, "optgraph", *parts)
    folder.mkdir(parents=True, exist_ok=True)
    return folder


_IDENTITIES: dict[tuple[str, ...], str] = {}


def identity(command: Sequence[str], language: str = "c") -> str:
    """What the compiler of `command` predefines with its flags: version and target features."""
    key = (*command, language)
    if key not in _IDENTITIES:
        probe = [*command, "-dM", "-E", "-x", language, os.devnull]
        done = _run(probe)
        _IDENTITIES[key] = done.stdout + done.stderr
    return _IDENTITIES[key]


def _run(argv: Sequence[str]) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(list(argv), check=False, capture_output=True, text=True)
    except OSError as err:
        raise BuildError(f"cannot run '{argv[0]}': {err.strerror}") from None


def build(
    command: Sequence[str],
    source: str,
    folder: Path,
    *,
    source_suffix: str = ".c",
    output_suffix: str = ".so",
    language: str = "c",
) -> Path:
    """`folder/KEY{output_suffix}` built from `source` by `command` (reused when present)."""
    key = hashlib.sha256(
        "\0".join([*command, identity(command, language), source]).encode()
    ).hexdigest()[:32]
    output = folder / f"{key}{output_suffix}"
    if output.exists():
        return output
    program = folder / f"{key}{source_suffix}"
    if not program.exists():
        scratch = temporary_beside(program)
        scratch.write_text(source)
        commit(scratch, program)
    # Not `temporary_beside`: the compiler creates its output with the mode it needs (an
    # executable's x bits), and the rename keeps it.
    scratch = folder / f".{key}.{os.getpid()}.{secrets.token_hex(4)}{output_suffix}"
    try:
        done = _run([*command, "-o", str(scratch), str(program)])
        if done.returncode != 0:
            raise BuildError(f"'{command[0]}' failed ({done.returncode}):\n{done.stderr[-4000:]}")
        os.replace(scratch, output)
    finally:
        scratch.unlink(missing_ok=True)
    return output
