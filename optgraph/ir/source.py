"""Model source text: reading a file, decoding it, and pointing spans into it.

`read_model_text` turns a missing file, a directory or invalid UTF-8 into a located error before
the parser sees anything; `SourceText` builds the `Span`s (with the source line for the caret)
that every parse diagnostic carries.
"""

from __future__ import annotations

import os
from pathlib import Path

from lark import Token

from optgraph.errors import InputError, ParseError, Span

BYTE_ORDER_MARK = "\ufeff"


def normalize_source(text: str) -> str:
    """`text` without a leading UTF-8 byte order mark and with every line ending as "\\n".

    Editors on Windows save a BOM and CRLF; old Mac files end lines with a lone CR, which the
    grammar (a `#` comment runs to "\\n") would otherwise read as one line holding the whole file.
    """
    text = text.removeprefix(BYTE_ORDER_MARK)
    if "\r" in text:
        text = text.replace("\r\n", "\n").replace("\r", "\n")
    return text


class SourceText:
    """Builds spans that point into the source text."""

    def __init__(self, path: str, text: str):
        self.path = path
        self.text = text
        self.lines = text.split("\n")

    def line_text(self, line: int) -> str | None:
        """Line `line` (1-based) of the source, or None past either end."""
        return self.lines[line - 1] if 0 < line <= len(self.lines) else None

    def span(self, token: Token) -> Span:
        line = token.line or 1
        col = token.column or 1
        end_col = token.end_column if token.end_line == token.line else None
        return Span(self.path, line, col, end_col, self.line_text(line))

    def error(self, message: str, token: Token) -> ParseError:
        return ParseError(message, self.span(token))


def decode_source(data: bytes, path: str) -> str:
    """UTF-8 text of a model file, or a located `ParseError` at the first invalid byte."""
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        line = data.count(b"\n", 0, err.start) + 1
        line_start = data.rfind(b"\n", 0, err.start) + 1
        col = err.start - line_start + 1
        source = data[
            line_start : data.find(b"\n", err.start) if b"\n" in data[err.start :] else None
        ]
        shown = source.decode("utf-8", errors="replace")
        raise ParseError(
            f"invalid UTF-8 byte 0x{data[err.start]:02x}", Span(path, line, col, None, shown)
        ) from None


def read_model_text(path: str | os.PathLike[str]) -> str:
    """Read a model file, turning missing files, directories and bad encodings into errors."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"no such file: '{p}'")
    if p.is_dir():
        raise InputError(f"'{p}' is a directory, not a model file")
    try:
        data = p.read_bytes()
    except OSError as err:
        raise InputError(f"cannot read '{p}': {err.strerror}") from None
    return decode_source(data, str(path))
