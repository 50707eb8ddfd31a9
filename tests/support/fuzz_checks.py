"""What every fuzzed file must get (tests/bad_input/test_fuzz_*.py): it works, or one
`OptGraphError` whose message names the file and says what is wrong.

    result = works_or_refused(lambda: open_gguf(path), path)   # the result, or None if refused

`Mutant` is what the strategies of `fuzz_gguf` and `fuzz_safetensors` draw.

`run_cli(args)` runs `optgraph ARGS` in this process, `assert_refused_cleanly` checks what it
printed. Any other exception escapes (a bug: hypothesis shrinks it and prints the mutant); so does a
message that names no file, spans many lines, or would print a Python traceback.
"""

from __future__ import annotations

import contextlib
import io
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from optgraph.cli.main import main
from optgraph.errors import OptGraphError

T = TypeVar("T")
HUGE = (2**31, 2**32 - 1, 2**40, 2**62, 2**63, 2**64 - 1)  # what a damaged count or length says


@dataclass(frozen=True)
class Mutant:
    """A damaged file: what was changed (its repr: a failing example prints as that) and its
    bytes."""

    what: str
    data: bytes = field(repr=False)


MAX_MESSAGE = 2000  # characters: a message quotes the culprit, never a whole header


def works_or_refused(call: Callable[[], T], *named: Path) -> T | None:
    """`call()`'s result, or None when it raised an `OptGraphError` that names one of `named`
    (by path or file name) in a short message of its own."""
    try:
        return call()
    except OptGraphError as err:
        text = str(err)
        assert any(str(p) in text or f"'{p.name}'" in text or p.name in text for p in named), text
        assert "Traceback" not in text, text
        assert len(text) < MAX_MESSAGE, text[:MAX_MESSAGE]
        assert len(err.diagnostics) == 1, text
        return None


def run_cli(args: list[str]) -> tuple[int, str]:
    """`optgraph ARGS` in this process: (exit status, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        status = main(args)
    return status, err.getvalue()


def assert_refused_cleanly(status: int, err: str, path: Path) -> None:
    """The command worked, or exited 1 naming the file, with no traceback."""
    assert status in (0, 1), err
    assert "Traceback" not in err, err
    if status == 1:
        assert path.name in err, err
