"""Diagnostics: source spans and the one error type users see.

Every user-facing problem (syntax, types, shapes, unknown ops or passes, missing files, malformed
weights) is an `OptGraphError`. It renders GCC-style with a caret under the culprit::

    model.ir:4:19: error: matmul: inner dimensions differ (8 vs 4)
        4 |   %y = matmul(%x, %w) : f32[2,4]
          |                   ^~

The CLI prints `str(err)` and exits 1; any other exception is a bug in optgraph.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Iterable
from dataclasses import dataclass, field


@dataclass(frozen=True)
class Span:
    """A 1-based source range: `line:col` up to (not including) `end_col` on the same line."""

    path: str
    line: int
    col: int
    end_col: int | None = None
    source_line: str | None = field(default=None, compare=False, repr=False)

    def location(self) -> str:
        return f"{self.path}:{self.line}:{self.col}"


# Characters of one unbroken word (a token, a name, a file path) a message shows whole: long enough
# for any real path, short enough that a 1 MiB token never reaches the terminal.
LONG_WORD = 400
_LONG_WORD_RE = re.compile(r"\S{" + str(LONG_WORD + 1) + ",}")


def clip_long_words(message: str) -> str:
    """`message` with every word over `LONG_WORD` characters cut to its start and "...".

    Messages quote what the user wrote; a 1 MiB name or number must not reach the terminal whole.
    """
    return _LONG_WORD_RE.sub(lambda m: m.group()[: LONG_WORD - 3] + "...", message)


@dataclass
class Diagnostic:
    message: str
    span: Span | None = None
    severity: str = "error"

    def __post_init__(self) -> None:
        self.message = clip_long_words(self.message)

    def render(self) -> str:
        if self.span is None:
            return f"{self.severity}: {self.message}"
        head = f"{self.span.location()}: {self.severity}: {self.message}"
        text = self.span.source_line
        if text is None:
            return head
        width = 1
        if self.span.end_col is not None and self.span.end_col > self.span.col:
            width = self.span.end_col - self.span.col
        text, col, width = _source_window(text.rstrip("\n"), self.span.col, width)
        gutter = f"{self.span.line:>5}"
        caret = " " * (col - 1) + "^" + "~" * (width - 1)
        return f"{head}\n{gutter} | {text}\n{' ' * len(gutter)} | {caret}"


SOURCE_WINDOW = 100  # characters of a long source line shown around the culprit


def _source_window(text: str, col: int, width: int) -> tuple[str, int, int]:
    """The part of a source line to show, the caret's column in it and the caret's width.

    A line longer than `SOURCE_WINDOW` (a minified model, a 100k-deep nesting) is cut to a window
    around `col` with "..." on the cut sides; tabs and unprintable characters become one space or
    "?" each, so the caret stays aligned and no control sequence reaches the terminal.
    """
    start, end = 0, len(text)
    if len(text) > SOURCE_WINDOW:
        start = max(0, min(col - 1 - SOURCE_WINDOW // 2, len(text) - SOURCE_WINDOW))
        end = start + SOURCE_WINDOW
    shown = "".join(" " if c == "\t" else c if c.isprintable() else "?" for c in text[start:end])
    prefix = "..." if start > 0 else ""
    suffix = "..." if end < len(text) else ""
    col = col - start + len(prefix)
    width = max(1, min(width, end - start + len(prefix) - col + 1))
    return prefix + shown + suffix, col, width


def did_you_mean(word: str, choices: Iterable[str], sigil: str = "") -> str:
    """` (did you mean 'x'?)` for the choice closest to a misspelled `word`, else "".

    `sigil` is written before the suggestion (`%` for values), as the IR spells them; `word` is
    compared without it, whether or not it was typed (`%xx` and `xx` both suggest `%x`). The
    suggestion is never what was typed: a choice that is `word` itself, with or without the
    sigil, is not one (a caller that calls such a word unknown gets no hint, not a riddle).
    """
    bare = word.removeprefix(sigil) if sigil else word
    others = [c for c in choices if c not in (word, bare)]
    close = difflib.get_close_matches(bare, others, n=1)
    return f" (did you mean '{sigil}{close[0]}'?)" if close else ""


class OptGraphError(Exception):
    """A user error. Holds one or more diagnostics; `str()` renders them all."""

    def __init__(
        self, message: str, span: Span | None = None, *, notes: list[Diagnostic] | None = None
    ):
        self.diagnostics: list[Diagnostic] = [Diagnostic(message, span)] + list(notes or [])
        super().__init__(self.diagnostics[0].message)

    @classmethod
    def from_diagnostics(cls, diagnostics: list[Diagnostic]) -> OptGraphError:
        if not diagnostics:
            raise ValueError("an OptGraphError needs at least one diagnostic")
        err = cls(diagnostics[0].message, diagnostics[0].span)
        err.diagnostics = list(diagnostics)
        return err

    @property
    def span(self) -> Span | None:
        return self.diagnostics[0].span

    @property
    def message(self) -> str:
        return self.diagnostics[0].message

    def __str__(self) -> str:
        return "\n".join(d.render() for d in self.diagnostics)


class ParseError(OptGraphError):
    """The text is not valid IR syntax."""


class VerifyError(OptGraphError):
    """The IR parses but is ill-formed (undefined names, shapes, dtypes, attributes, cycles)."""


class PipelineError(OptGraphError):
    """A pipeline string names an unknown pass or option, or a pass's required facts are missing."""


class InputError(OptGraphError):
    """A missing or unreadable file, malformed weights or inputs."""
