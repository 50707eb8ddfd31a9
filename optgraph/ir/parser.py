"""Text to `Graph`: the lark LALR parser with source spans.

The tree is never built: a `Transformer` runs inside the LALR parser and produces `Node`s as rules
are reduced, so parsing is linear in the text. Text laid out one item a line (what the printer and
the generators write) first goes through `optgraph.ir.line_parser`, a faster reader of that subset
of the grammar that leaves everything else, errors included, to lark. Every syntax error becomes a
`ParseError` located at `file:line:col` with a caret; a syntax that parses but says something
impossible (an unknown dtype, an annotation of the wrong kind) is also reported here, at the
offending token.

Checks that need the whole graph (names, shapes, cycles) belong to `optgraph.ir.verify`.
Reading and decoding files lives in `optgraph.ir.source`, the wording of lark's syntax errors in
`optgraph.ir.syntax_errors`; `decode_source` and `read_model_text` are re-exported here.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from lark import Lark, Token, Transformer
from lark.exceptions import UnexpectedInput, VisitError

from optgraph.errors import OptGraphError, ParseError, Span, did_you_mean
from optgraph.ir.constants import constant_bytes
from optgraph.ir.gc_pause import gc_paused
from optgraph.ir.graph import (
    ANNOTATION_KEYS,
    ANNOTATION_KINDS,
    BACKENDS,
    DTYPES,
    QUANT_BLOCKS,
    WEIGHT_LAYOUTS,
    WEIGHT_PLACEMENTS,
    Annotations,
    AttrValue,
    Graph,
    Input,
    Node,
    Output,
    Region,
    TensorType,
    Weight,
)
from optgraph.ir.limits import MAX_INTEGER_DIGITS
from optgraph.ir.line_parser import WORD_LITERALS, parse_lines
from optgraph.ir.source import SourceText, decode_source, normalize_source, read_model_text
from optgraph.ir.syntax_errors import syntax_error

__all__ = ["decode_source", "parse", "parse_file", "parse_with_lark", "read_model_text"]

_GRAMMAR = Path(__file__).with_name("grammar.lark")


@dataclass(frozen=True)
class _Attr:
    key: str
    value: AttrValue
    key_token: Token
    value_token: Token | None


@dataclass(frozen=True)
class _Constant:
    """The values after a weight's `=`, and the first one's token (for errors)."""

    values: tuple[Any, ...]
    token: Token | None


class _Builder(Transformer[Token, Any]):
    """Reduces grammar rules straight to IR objects (runs inside the LALR parser)."""

    def __init__(self, located: SourceText):
        super().__init__()
        self.at = located

    def integer(self, token: Token) -> int:
        """An integer token's value; one too long to be any size, id or attribute is an error
        here (Python refuses to convert over 4300 digits, and nothing needs more than int64)."""
        digits = len(token.lstrip("-"))
        if digits > MAX_INTEGER_DIGITS:
            raise self.at.error(f"integer literal too large ({digits} digits)", token)
        return int(token)

    # -- literals --
    def int_lit(self, children: list[Token]) -> tuple[AttrValue, Token]:
        return self.integer(children[0]), children[0]

    def float_lit(self, children: list[Token]) -> tuple[AttrValue, Token]:
        return float(children[0]), children[0]

    def str_lit(self, children: list[Token]) -> tuple[AttrValue, Token]:
        token = children[0]
        try:
            return json.loads(str(token)), token
        except ValueError:
            raise self.at.error(f"invalid string literal {token}", token) from None

    def name_lit(self, children: list[Token]) -> tuple[AttrValue, Token]:
        token = children[0]
        words = WORD_LITERALS
        if str(token) not in words:
            raise self.at.error(
                f"expected a literal (number, string, true, false or [ints]), found '{token}'",
                token,
            )
        return words[str(token)], token

    def list_lit(self, children: list[Token | None]) -> tuple[AttrValue, Token | None]:
        items = [c for c in children if c is not None]
        return tuple(self.integer(c) for c in items), (items[0] if items else None)

    # -- pieces --
    def attr(self, children: list[Any]) -> _Attr:
        key, (value, value_token) = children
        return _Attr(str(key), value, key, value_token)

    def attrs(self, children: list[_Attr | None]) -> dict[str, AttrValue]:
        out: dict[str, AttrValue] = {}
        for a in children:
            if a is None:
                continue
            if a.key in out:
                raise self.at.error(f"duplicate attribute '{a.key}'", a.key_token)
            out[a.key] = a.value
        return out

    def annotations(self, children: list[_Attr | None]) -> Annotations:
        fields: dict[str, Any] = {}
        for a in children:
            if a is None:
                continue
            kind = ANNOTATION_KINDS.get(a.key)
            if kind is None:
                raise self.at.error(
                    f"unknown annotation '{a.key}'{did_you_mean(a.key, ANNOTATION_KEYS)}",
                    a.key_token,
                )
            if a.key in fields:
                raise self.at.error(f"duplicate annotation '{a.key}'", a.key_token)
            fields[a.key] = self._annotation_value(a, kind)
        return Annotations(**fields)

    def _annotation_value(self, a: _Attr, kind: str) -> Any:
        value = a.value
        token = a.value_token or a.key_token
        if kind == "devices":
            return self._devices(a)
        ok = {
            "int": isinstance(value, int) and not isinstance(value, bool),
            "str": isinstance(value, str),
            "ints": isinstance(value, tuple),
            "pair": isinstance(value, tuple) and len(value) == 2,
        }[kind]
        if not ok:
            expected = {
                "int": "an integer",
                "str": "a string",
                "ints": "a list of integers",
                "pair": "a list of two integers",
            }[kind]
            raise self.at.error(f"annotation '{a.key}' must be {expected}", token)
        if a.key == "backend" and value not in BACKENDS:
            raise self.at.error(
                f'unknown backend "{value}"{did_you_mean(str(value), BACKENDS)}; expected one of '
                + ", ".join(f'"{b}"' for b in BACKENDS),
                token,
            )
        if a.key == "layout" and value not in WEIGHT_LAYOUTS:
            raise self.at.error(
                f'unknown weight layout "{value}"; expected one of '
                + ", ".join(f'"{w}"' for w in WEIGHT_LAYOUTS),
                token,
            )
        if kind == "int" and isinstance(value, int) and value < 0:
            raise self.at.error(f"annotation '{a.key}' must not be negative", token)
        return value

    def _devices(self, a: _Attr) -> tuple[int, ...]:
        """`device = 1` or `device = [0, 1]`: distinct, non-negative ids, stored as a tuple."""
        value = a.value
        token = a.value_token or a.key_token
        if isinstance(value, int) and not isinstance(value, bool):
            value = (value,)
        if not isinstance(value, tuple) or not value:
            raise self.at.error(
                "annotation 'device' must be a device id or a non-empty list of ids", token
            )
        for device in value:
            if device < 0:
                raise self.at.error(f"device id {device} is negative", token)
        if len(set(value)) != len(value):
            twice = next(d for d in value if value.count(d) > 1)
            raise self.at.error(f"device {twice} is listed twice in annotation 'device'", token)
        return value

    def type(self, children: list[Token | None]) -> tuple[TensorType, Token]:
        dtype_token = children[0]
        assert dtype_token is not None
        dtype = str(dtype_token)
        if dtype not in DTYPES and dtype not in QUANT_BLOCKS:
            raise self.at.error(
                f"unknown dtype '{dtype}'{did_you_mean(dtype, DTYPES + tuple(QUANT_BLOCKS))}",
                dtype_token,
            )
        dims = []
        for t in children[1:]:
            if t is None:
                continue
            dim = self.integer(t)
            if dim < 0:
                raise self.at.error(f"negative dimension {t} in type", t)
            dims.append(dim)
        return TensorType(dtype, tuple(dims)), dtype_token

    def operands(self, children: list[Token | None]) -> list[Token]:
        return [c for c in children if c is not None]

    def _node(self, children: list[Any], body: Region | None) -> Node:
        result, op, operand_tokens = children[0], children[1], children[2]
        attrs: dict[str, AttrValue] = {}
        ann = Annotations()
        rest = children[3:]
        node_type: TensorType | None = None
        for piece in rest:
            if isinstance(piece, dict):
                attrs = piece
            elif isinstance(piece, tuple):
                node_type = piece[0]
            elif isinstance(piece, Annotations):
                ann = piece
        return Node(
            name=str(result)[1:],
            op=str(op),
            operands=tuple(str(t)[1:] for t in operand_tokens),
            attrs=attrs,
            type=node_type,
            ann=ann,
            body=body,
            span=self.at.span(op),
            operand_spans=tuple(self.at.span(t) for t in operand_tokens),
        )

    def node(self, children: list[Any]) -> Node:
        body = children[-1] if isinstance(children[-1], Region) else None
        pieces = children[:-1] if body is not None else children
        node = self._node(pieces, body)
        if body is not None and node.op != "fused":
            raise ParseError(f"only 'fused' nodes have a body, not '{node.op}'", node.span)
        if body is None and node.op == "fused":
            raise ParseError("a 'fused' node needs a body(...) { ... }", node.span)
        return node

    def body_node(self, children: list[Any]) -> Node:
        return self._node(children, None)

    def body(self, children: list[Any]) -> Region:
        params = children[0]
        nodes = tuple(c for c in children[1:-1])
        result = children[-1]
        return Region(tuple(str(p)[1:] for p in params), nodes, str(result)[1:])

    def event(self, children: list[Any]) -> Node:
        op, name = children[0], children[1]
        ann = children[2] if len(children) > 2 else Annotations()
        return Node(name=str(name)[1:], op=str(op), ann=ann, span=self.at.span(name))

    def input_decl(self, children: list[Any]) -> Input:
        name, (tensor_type, type_token) = children[0], children[1]
        ann = children[2] if len(children) > 2 and children[2] is not None else Annotations()
        if any(key != "device" for key, _ in ann.items()):
            raise self.at.error("an input takes only the 'device' annotation", type_token)
        return Input(str(name)[1:], tensor_type, self.at.span(name), ann)

    def constant(self, children: list[Any]) -> _Constant:
        items = [c for c in children if c is not None]
        return _Constant(tuple(value for value, _ in items), items[0][1] if items else None)

    def weight_decl(self, children: list[Any]) -> Weight:
        name, (tensor_type, type_token) = children[0], children[1]
        placement = "device"
        ann = Annotations()
        value: bytes | None = None
        for piece in children[2:]:
            if isinstance(piece, _Constant):
                try:
                    value = constant_bytes(tensor_type, piece.values)
                except ValueError as err:
                    where = piece.token if piece.token is not None else type_token
                    raise self.at.error(f"weight '{name}': {err}", where) from None
                continue
            if isinstance(piece, Token):
                placement = str(piece)
                if placement not in WEIGHT_PLACEMENTS:
                    raise self.at.error(
                        f"unknown weight placement '{placement}'"
                        f"{did_you_mean(placement, WEIGHT_PLACEMENTS)}; expected device or host",
                        piece,
                    )
            elif isinstance(piece, Annotations):
                ann = piece
        return Weight(str(name)[1:], tensor_type, placement, ann, self.at.span(name), value)

    def output_decl(self, children: list[Token]) -> list[Output]:
        return [Output(str(t)[1:], self.at.span(t)) for t in children]

    def start(self, children: list[Any]) -> Graph:
        name = str(children[0])
        inputs: list[Input] = []
        weights: list[Weight] = []
        nodes: list[Node] = []
        outputs: list[Output] = []
        for item in children[1:]:
            if isinstance(item, Node):
                nodes.append(item)
            elif isinstance(item, Input):
                inputs.append(item)
            elif isinstance(item, Weight):
                weights.append(item)
            else:
                outputs.extend(item)
        return Graph(
            name, tuple(inputs), tuple(weights), tuple(nodes), tuple(outputs), self.at.path
        )


@lru_cache(maxsize=1)
def _parser_and_builder() -> tuple[Lark, _Builder]:
    """Build the LALR tables once; each parse points the builder at its own source."""
    builder = _Builder(SourceText("<string>", ""))
    lark = Lark(
        _GRAMMAR.read_text(encoding="utf-8"),
        parser="lalr",
        lexer="contextual",
        transformer=builder,
        maybe_placeholders=True,
    )
    return lark, builder


def parse(text: str, path: str = "<string>") -> Graph:
    """Parse IR text into a `Graph` (no verification). Raises `ParseError`.

    Text laid out one item a line takes the fast path (`optgraph.ir.line_parser`); any other
    text, and every text with an error, is parsed by lark, which reports the error."""
    located = _located_source(text, path)
    with gc_paused():
        fast = parse_lines(path, located.lines)
        return fast if fast is not None else _parse_located(located)


def parse_with_lark(text: str, path: str = "<string>") -> Graph:
    """`parse` without the fast path: what the grammar itself makes of `text`."""
    return _parse_located(_located_source(text, path))


def _located_source(text: str, path: str) -> SourceText:
    """`text` normalized (BOM, line endings) as a `SourceText`; a NUL byte is an error."""
    text = normalize_source(text)
    located = SourceText(path, text)
    if "\x00" in text:
        offset = text.index("\x00")
        line = text.count("\n", 0, offset) + 1
        col = offset - (text.rfind("\n", 0, offset) + 1) + 1
        raise ParseError(
            "unexpected NUL byte (is this a binary file?)",
            Span(path, line, col, None, located.lines[line - 1]),
        )
    return located


def _parse_located(located: SourceText) -> Graph:
    lark, builder = _parser_and_builder()
    builder.at = located
    try:
        graph = lark.parse(located.text)
    except OptGraphError:
        raise
    except VisitError as err:
        if isinstance(err.orig_exc, OptGraphError):
            raise err.orig_exc from None
        raise
    except UnexpectedInput as err:
        raise syntax_error(err, located, lark.terminals) from None
    assert isinstance(graph, Graph)
    return graph


def parse_file(path: str | os.PathLike[str]) -> Graph:
    """Parse a model file (no verification)."""
    return parse(read_model_text(path), str(path))
