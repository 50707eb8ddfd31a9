"""Lark's syntax errors as located, readable `ParseError`s.

    model.ir:3:22: error: unexpected ')', expected a value (%name)

Lark reports terminals by their grammar names (`VALUE`, `RPAR`, `"INPUT"`); `_TERMINAL_NAMES` and
the grammar's literal patterns turn them into what the user typed or should type. An error at the
end of the input points just past the last character; an empty file gets its own message.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable

from lark.exceptions import UnexpectedCharacters, UnexpectedEOF, UnexpectedInput, UnexpectedToken
from lark.lexer import TerminalDef

from optgraph.errors import ParseError, Span
from optgraph.ir.source import SourceText

# Friendly names for the terminals lark reports as "expected".
_TERMINAL_NAMES = {
    "VALUE": "a value (%name)",
    "EVENT": "an event (^name)",
    "NAME": "a name",
    "INT": "an integer",
    "FLOAT": "a float",
    "STRING": "a string",
    "EVENT_OP": "'record' or 'wait'",
    "LBRACE": "'{'",
    "RBRACE": "'}'",
    "LPAR": "'('",
    "RPAR": "')'",
    "LSQB": "'['",
    "RSQB": "']'",
    "COMMA": "','",
    "COLON": "':'",
    "EQUAL": "'='",
    "BANG": "'!{'",
    "$END": "end of file",
}

MAX_EXPECTED_SHOWN = 6


def _terminal_text(name: str, terminals: Collection[TerminalDef]) -> str:
    """How a terminal is spelled in a message: 'a value (%name)', "'!{'", "'input'"."""
    if name in _TERMINAL_NAMES:
        return _TERMINAL_NAMES[name]
    for terminal in terminals:
        if terminal.name == name and terminal.pattern.type == "str":
            return repr(terminal.pattern.value)
    return repr(name.strip('"').lower())


def _describe_expected(expected: Iterable[str], terminals: Collection[TerminalDef]) -> str:
    names = sorted({_terminal_text(e, terminals) for e in expected})
    if len(names) > MAX_EXPECTED_SHOWN:
        names = names[:MAX_EXPECTED_SHOWN] + ["..."]
    return ", ".join(names)


def syntax_error(
    err: UnexpectedInput, source: SourceText, terminals: Collection[TerminalDef]
) -> ParseError:
    """The `ParseError` for lark's `err` in `source`; `terminals` are the parser's own."""
    text = source.text
    line = getattr(err, "line", 1) or 1
    col = getattr(err, "column", 1) or 1
    if isinstance(err, UnexpectedCharacters):
        pos = err.pos_in_stream
        char = text[pos] if pos is not None and pos < len(text) else ""
        shown = repr(char) if char.isprintable() and char else f"U+{ord(char):04X}" if char else "?"
        message = f"unexpected character {shown}"
    elif isinstance(err, UnexpectedEOF) or (
        isinstance(err, UnexpectedToken) and err.token.type == "$END"
    ):
        message = "unexpected end of file"
        if err.expected:
            message += f", expected {_describe_expected(err.expected, terminals)}"
        lines = text.split("\n")
        line = len(lines)
        col = len(lines[-1]) + 1
        if not text.strip():
            message = "empty file: expected 'graph NAME { ... }'"
    elif isinstance(err, UnexpectedToken):
        token = err.token
        message = f"unexpected '{token}'"
        if err.expected:
            message += f", expected {_describe_expected(err.expected, terminals)}"
        line, col = token.line or line, token.column or col
        end = token.end_column if token.end_line == token.line else None
        return ParseError(message, Span(source.path, line, col, end, source.line_text(line)))
    else:
        message = "syntax error"
    return ParseError(message, Span(source.path, line, col, None, source.line_text(line)))
