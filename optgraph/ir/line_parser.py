"""The parser's fast path: IR text laid out one item a line, read with a few regular expressions.

Lark's LALR parser spends a few microseconds on every token; a 100k-node model has 2.5 million
tokens. Machine-written IR (the printer, the importers, `examples/gen_llama.py`) puts one
declaration, node, event or `output` on a line, so a line-at-a-time reader with one regular
expression per kind of line builds the same `Graph` in a fraction of that time:

    %l0.q = matmul(%l0.attn_in, %l0.wq) {transpose_b = true} : f32[1,64] !{stream = 1}
    -> Node("l0.q", "matmul", ("l0.attn_in", "l0.wq"), {"transpose_b": True}, f32[1,64], ...)

`parse_lines` accepts a strict subset of the grammar and gives up (returns None) on anything else:
a construct split over lines, several items on one line, a keyword used as a name, an escape in a
string, a literal it does not know, and every input that is wrong in any way. `optgraph.ir.parser`
then parses the whole text with lark, which alone reports errors, so diagnostics are lark's exactly.
Where it accepts, the graph (spans included) is the one lark builds: tests/ir/test_line_parser.py
checks both on every example and fixture and on mutated texts. O(size of the text).
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Sequence
from typing import Any, overload

from optgraph.errors import Span
from optgraph.ir.constants import constant_bytes
from optgraph.ir.graph import (
    ANNOTATION_CHOICES,
    ANNOTATION_KINDS,
    DTYPES,
    NO_ANNOTATIONS,
    QUANT_BLOCKS,
    TYPE_FACTS,
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
from optgraph.ir.op_specs import attrs_key_of

_NAME = r"[A-Za-z_][A-Za-z0-9_.]*"
_VALUE = r"%[A-Za-z0-9_.]+"
_S = r"[ \t]*"  # the fast path reads spaces and tabs only; a form feed sends the text to lark
_INT_RE = re.compile(r"-?[0-9]+")
_FLOAT_RE = re.compile(
    r"-?([0-9]+\.[0-9]*([eE][-+]?[0-9]+)?|[0-9]+[eE][-+]?[0-9]+|\.[0-9]+([eE][-+]?[0-9]+)?)|-inf"
)
_VALUE_RE = re.compile(_VALUE)
_INTS_RE = re.compile(rf"{_S}(?:-?[0-9]+(?:{_S},{_S}-?[0-9]+)*)?{_S}")
_VALUES_RE = re.compile(rf"{_S}(?:{_VALUE}(?:{_S},{_S}{_VALUE})*)?{_S}")
# One `key = literal` of an attribute or annotation list and what follows it (a comma or the end).
# A literal is a string without escapes or control characters, a list, or a bare word (a number,
# true, false, inf, nan) classified afterwards.
_ATTR_RE = re.compile(
    rf"{_S}({_NAME}){_S}={_S}(\"[^\"\\\x00-\x1f]*\"|\[[^\[\]]*\]|[^\s,\[\]\"]+){_S}(,|$)"
)
_TYPE = rf"({_NAME}){_S}\[([^\[\]]*)\]"
# A node line. Its operand list is matched as `_VALUES_RE` reads one (a node whose list is
# anything else gives up, as before), so the names are found in it without a second check.
_OPERANDS = rf"{_S}(?:{_VALUE}(?:{_S},{_S}{_VALUE})*)?{_S}"
_NODE_RE = re.compile(
    rf"({_VALUE}){_S}={_S}({_NAME}){_S}\(({_OPERANDS})\){_S}(?:\{{([^{{}}]*)\}}{_S})?:{_S}"
    rf"{_TYPE}{_S}(?:!\{{([^{{}}]*)\}}{_S})?(body{_S}\(([^()]*)\){_S}\{{{_S})?"
)
_OPERAND_NAME_RE = re.compile(r"%([A-Za-z0-9_.]+)")
_INPUT_RE = re.compile(rf"input[ \t]+({_VALUE}){_S}:{_S}{_TYPE}{_S}")
_WEIGHT_RE = re.compile(
    rf"weight[ \t]+({_VALUE}){_S}:{_S}{_TYPE}{_S}(?:(device|host)(?![A-Za-z0-9_.]){_S})?"
    rf"(?:!\{{([^{{}}]*)\}}{_S})?(?:={_S}\[([^\[\]]*)\]{_S})?"
)
_EVENT_RE = re.compile(rf"(record|wait)[ \t]+(\^[A-Za-z0-9_.]+){_S}(?:!\{{([^{{}}]*)\}}{_S})?")
_OUTPUT_RE = re.compile(rf"output[ \t]+({_VALUE}(?:{_S},{_S}{_VALUE})*){_S}")
_YIELD_RE = re.compile(rf"yield[ \t]+({_VALUE}){_S}")
_HEADER_RE = re.compile(rf"{_S}graph[ \t]+({_NAME}){_S}\{{{_S}")

# Words that are keywords somewhere in the grammar: lark's contextual lexer reads them as names in
# some places only, so the fast path leaves every such use to lark.
_KEYWORDS = frozenset({"graph", "input", "weight", "output", "body", "yield", "record", "wait"})
# One shared NaN object for both parsers: containers compare NaN by identity first, so graphs parsed
# from the same text compare equal (`parse(print(g)) == g` holds for `{factor = nan}`).
_NAN = float("nan")
WORD_LITERALS: dict[str, AttrValue] = {
    "true": True,
    "false": False,
    "inf": float("inf"),
    "nan": _NAN,
}


class _GiveUp(Exception):
    """The text is not in the fast path's subset: lark parses it instead."""


def _integer(text: str) -> int:
    if len(text) - text.startswith("-") > MAX_INTEGER_DIGITS:
        raise _GiveUp
    return int(text)


def _ints(text: str) -> tuple[int, ...]:
    if _INTS_RE.fullmatch(text) is None:
        raise _GiveUp
    return tuple(_integer(t) for t in _INT_RE.findall(text))


def _literal(text: str) -> AttrValue:
    first = text[0]
    if first == '"':
        return text[1:-1]
    if first == "[":
        return _ints(text[1:-1])
    if _INT_RE.fullmatch(text):
        return _integer(text)
    if _FLOAT_RE.fullmatch(text):
        return float(text)
    if text in WORD_LITERALS:
        return WORD_LITERALS[text]
    raise _GiveUp


def _constant(t: TensorType, text: str) -> bytes:
    """A constant's value bytes from the inside of its `[...]`; lark reports what is wrong."""
    words = text.split(",") if text.strip(" \t") else []
    values: list[AttrValue] = []
    for word in words:
        item = word.strip(" \t")
        if not item or item[0] in '"[':
            raise _GiveUp
        values.append(_literal(item))
    try:
        return constant_bytes(t, values)  # type: ignore[arg-type]
    except ValueError:
        raise _GiveUp from None


def _pairs(text: str) -> dict[str, AttrValue]:
    """`key = literal, ...` (the inside of `{...}` or `!{...}`) as a dict in text order."""
    out: dict[str, AttrValue] = {}
    pos, end = 0, len(text)
    if not text.strip(" \t"):
        return out
    while True:
        m = _ATTR_RE.match(text, pos)
        if m is None:
            raise _GiveUp
        key = m.group(1)
        if key in out or key in _KEYWORDS:
            raise _GiveUp
        out[key] = _literal(m.group(2))
        pos = m.end()
        if m.group(3) != ",":
            return out
        if pos >= end:
            raise _GiveUp  # a trailing comma


def _annotations(text: str | None) -> Annotations:
    if text is None:
        return NO_ANNOTATIONS
    fields: dict[str, Any] = {}
    for key, value in _pairs(text).items():
        kind = ANNOTATION_KINDS.get(key)
        if kind == "int":
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise _GiveUp
        elif kind == "str":
            if value not in ANNOTATION_CHOICES[key]:
                raise _GiveUp
        elif kind == "ints" or kind == "pair":
            if not isinstance(value, tuple) or (kind == "pair" and len(value) != 2):
                raise _GiveUp
        else:
            raise _GiveUp
        fields[key] = value
    return Annotations(**fields)


def _new_type(dtype: str, dims: str) -> TensorType:
    if dtype not in DTYPES and dtype not in QUANT_BLOCKS:
        raise _GiveUp
    shape = _ints(dims)
    if any(d < 0 for d in shape):
        raise _GiveUp
    return TensorType(dtype, shape)


def _span(path: str, line: int, source_line: str, start: int, end: int) -> Span:
    """The span of source_line[start:end] (0-based offsets) on 1-based `line`."""
    # `Span(...)` field by field: a frozen dataclass's `__init__` costs several times more,
    # and a model has a span per node.
    span = object.__new__(Span)
    span.__dict__.update(
        path=path, line=line, col=start + 1, end_col=end + 1, source_line=source_line
    )
    return span


class OperandSpans(Sequence[Span]):
    """The spans of a node's operands, found in its source line when first read: only
    diagnostics read them, and a model has a few operands a node (making every span up front
    cost a fifth of the parse). Equal to the tuple of spans lark makes.

        %y = add(%a, %b) : f32[4]   ->  [Span(line, 10, 12), Span(line, 14, 16)] on first use
    """

    __slots__ = ("_node_span", "_spans", "_start")

    def __init__(self, node_span: Span, start: int):
        """`node_span`: the node's own span (its op), on the same line; `start`: the 0-based
        offset in that line of the operand list, after its `(`."""
        self._node_span, self._start = node_span, start
        self._spans: tuple[Span, ...] | None = None

    def _made(self) -> tuple[Span, ...]:
        """The spans of the `%name`s from offset `start` to the list's `)`."""
        spans = self._spans
        if spans is None:
            at, start = self._node_span, self._start
            source = at.source_line
            assert source is not None
            text = source[start : source.index(")", start)]
            spans = self._spans = tuple(
                _span(at.path, at.line, source, start + m.start(), start + m.end())
                for m in _VALUE_RE.finditer(text)
            )
        return spans

    def __len__(self) -> int:
        return len(self._made())

    @overload
    def __getitem__(self, index: int) -> Span: ...
    @overload
    def __getitem__(self, index: slice) -> tuple[Span, ...]: ...
    def __getitem__(self, index: int | slice) -> Span | tuple[Span, ...]:
        return self._made()[index]

    def __iter__(self) -> Iterator[Span]:
        return iter(self._made())

    def __eq__(self, other: object) -> bool:
        if isinstance(other, OperandSpans | tuple):
            return self._made() == tuple(other)
        return NotImplemented

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return repr(self._made())


class _LineReader:
    """Builds the graph item by item; every method raises `_GiveUp` on what it does not accept."""

    def __init__(self, path: str, lines: list[str]):
        self.path = path
        self.lines = lines
        # A model repeats a few types, attribute lists and annotations many times: each text is
        # read once. Types and annotations are immutable and shared; attribute dicts are copied.
        self.types: dict[tuple[str, str], TensorType] = {}
        self.attr_lists: dict[str, dict[str, AttrValue]] = {}
        # Per attribute text, the `attrs_key_of` its nodes start with in their `TYPE_FACTS`: the
        # verifier's memos key on it, and it is the same for every node of one text.
        self.attr_keys: dict[str, tuple[object, ...]] = {}
        self.annotation_lists: dict[str | None, Annotations] = {None: NO_ANNOTATIONS}

    def type(self, dtype: str, dims: str) -> TensorType:
        key = (dtype, dims)
        found = self.types.get(key)
        if found is None:
            found = self.types[key] = _new_type(dtype, dims)
        return found

    def attrs(self, text: str | None) -> dict[str, AttrValue]:
        if text is None:
            return {}
        found = self.attr_lists.get(text)
        if found is None:
            found = self.attr_lists[text] = _pairs(text)
            self.attr_keys[text] = attrs_key_of(found)
        return dict(found)

    def ann(self, text: str | None) -> Annotations:
        found = self.annotation_lists.get(text)
        if found is None:
            found = self.annotation_lists[text] = _annotations(text)
        return found

    def span(self, line: int, start: int, end: int) -> Span:
        """The span of line[start:end] (0-based offsets) on 1-based `line`."""
        return _span(self.path, line, self.lines[line - 1], start, end)

    def values(self, text: str, offset: int, line: int) -> tuple[tuple[str, ...], tuple[Span, ...]]:
        """The `%name`s of a comma-separated list at `offset` in the line, and their spans."""
        if _VALUES_RE.fullmatch(text) is None:
            raise _GiveUp
        names, spans = [], []
        for m in _VALUE_RE.finditer(text):
            names.append(m.group()[1:])
            spans.append(self.span(line, offset + m.start(), offset + m.end()))
        return tuple(names), tuple(spans)

    def node(self, m: re.Match[str], line: int, indent: int, body: Region | None) -> Node:
        """The node of a `_NODE_RE` match on `line`, whose text starts at column `indent`."""
        name, op, operand_text, attr_text, dtype, dims, ann_text = m.group(1, 2, 3, 4, 5, 6, 7)
        if op in _KEYWORDS or (body is None) == (op == "fused"):
            raise _GiveUp  # lark reports a fused node without a body (and a body elsewhere)
        tensor_type = self.types.get((dtype, dims))
        if tensor_type is None:
            tensor_type = self.types[dtype, dims] = _new_type(dtype, dims)
        ann = self.annotation_lists.get(ann_text)
        if ann is None:
            ann = self.ann(ann_text)
        op_start = indent + m.start(2)
        operands = tuple(_OPERAND_NAME_RE.findall(operand_text))
        span = object.__new__(Span)  # `self.span`, inline: once per node
        span.__dict__.update(
            path=self.path,
            line=line,
            col=op_start + 1,
            end_col=op_start + len(op) + 1,
            source_line=self.lines[line - 1],
        )
        node = object.__new__(Node)  # field by field: see `span`
        node.__dict__.update(
            name=name[1:],
            op=op,
            operands=operands,
            attrs={} if attr_text is None else self.attrs(attr_text),
            type=tensor_type,
            ann=ann,
            body=body,
            span=span,
            operand_spans=OperandSpans(span, indent + m.start(3)) if operands else (),
        )
        if attr_text is not None:
            node.__dict__[TYPE_FACTS] = {"attrs_key": self.attr_keys[attr_text]}
        return node

    def body(self, m: re.Match[str], line: int, indent: int) -> tuple[Region, int]:
        """The body opened on `line`: its region and the number of the line that closes it."""
        params, _ = self.values(m.group(9), 0, line)
        nodes = []
        number = line
        while True:
            number += 1
            if number > len(self.lines):
                raise _GiveUp
            text = _uncommented(self.lines[number - 1])
            stripped = text.lstrip(" \t")
            if not stripped:
                continue
            inner = len(text) - len(stripped)
            if stripped[0] == "%":
                n = _NODE_RE.fullmatch(stripped)
                if n is None or n.group(8) is not None:
                    raise _GiveUp
                if n.group(2) == "fused":
                    raise _GiveUp
                nodes.append(self.node(n, number, inner, None))
                continue
            y = _YIELD_RE.fullmatch(stripped)
            if y is None:
                raise _GiveUp
            closing = number + 1
            while closing <= len(self.lines) and not _uncommented(self.lines[closing - 1]).strip(
                " \t"
            ):
                closing += 1
            if (
                closing > len(self.lines)
                or _uncommented(self.lines[closing - 1]).strip(" \t") != "}"
            ):
                raise _GiveUp
            return Region(params, tuple(nodes), y.group(1)[1:]), closing

    def graph(self) -> Graph:
        lines = self.lines
        header_line = _first_item_line(lines)
        header = _HEADER_RE.fullmatch(_uncommented(lines[header_line - 1]))
        if header is None or header.group(1) in _KEYWORDS:
            raise _GiveUp
        inputs: list[Input] = []
        weights: list[Weight] = []
        nodes: list[Node] = []
        outputs: list[Output] = []
        node_match = _NODE_RE.fullmatch
        skip_to = header_line  # lines up to here are read (a body reads its own)
        for number in range(header_line + 1, len(lines) + 1):
            if number <= skip_to:
                continue
            text = lines[number - 1]
            if "#" in text:
                text = _uncommented(text)
            stripped = text.lstrip(" \t")
            if not stripped:
                continue
            indent = len(text) - len(stripped)
            first = stripped[0]
            if first == "%":
                m = node_match(stripped)
                if m is None:
                    raise _GiveUp
                if m.group(8) is None:
                    nodes.append(self.node(m, number, indent, None))
                else:
                    region, skip_to = self.body(m, number, indent)
                    nodes.append(self.node(m, number, indent, region))
            elif first == "}":
                if stripped.rstrip(" \t") != "}" or _first_item_line(lines, number + 1) != 0:
                    raise _GiveUp
                return Graph(
                    header.group(1),
                    tuple(inputs),
                    tuple(weights),
                    tuple(nodes),
                    tuple(outputs),
                    self.path,
                )
            else:
                self.declaration(stripped, number, indent, inputs, weights, nodes, outputs)
        raise _GiveUp  # no closing brace

    def declaration(
        self,
        text: str,
        line: int,
        indent: int,
        inputs: list[Input],
        weights: list[Weight],
        nodes: list[Node],
        outputs: list[Output],
    ) -> None:
        """An `input`, `weight`, `record`/`wait` or `output` line, appended where it belongs."""
        if text.startswith("weight") and (m := _WEIGHT_RE.fullmatch(text)):
            span = self.span(line, indent + m.start(1), indent + m.end(1))
            placement = m.group(4) or "device"
            assert placement in WEIGHT_PLACEMENTS
            tensor_type = self.type(m.group(2), m.group(3))
            ann = self.ann(m.group(5))
            value = None if m.group(6) is None else _constant(tensor_type, m.group(6))
            weight = object.__new__(Weight)  # field by field: see `span`
            weight.__dict__.update(
                name=m.group(1)[1:],
                type=tensor_type,
                placement=placement,
                ann=ann,
                span=span,
                value=value,
            )
            weights.append(weight)
        elif m := _INPUT_RE.fullmatch(text):
            span = self.span(line, indent + m.start(1), indent + m.end(1))
            inputs.append(Input(m.group(1)[1:], self.type(m.group(2), m.group(3)), span))
        elif m := _EVENT_RE.fullmatch(text):
            span = self.span(line, indent + m.start(2), indent + m.end(2))
            ann = self.ann(m.group(3))
            nodes.append(Node(name=m.group(2)[1:], op=m.group(1), ann=ann, span=span))
        elif m := _OUTPUT_RE.fullmatch(text):
            names, spans = self.values(m.group(1), indent + m.start(1), line)
            outputs.extend(Output(n, s) for n, s in zip(names, spans, strict=True))
        else:
            raise _GiveUp


def _uncommented(line: str) -> str:
    """`line` without a trailing `# comment`; a `#` that may sit inside a string gives up."""
    if "#" not in line:
        return line
    if '"' in line:
        raise _GiveUp
    return line[: line.index("#")]


def _first_item_line(lines: list[str], start: int = 1) -> int:
    """The 1-based number of the first line from `start` holding more than a comment; 0 if none."""
    for number in range(start, len(lines) + 1):
        if _uncommented(lines[number - 1]).strip(" \t"):
            return number
    return 0


def parse_lines(path: str, lines: list[str]) -> Graph | None:
    """The graph of the source `lines` (the text split at "\\n"), or None where the text is
    outside the fast path's subset (lark then parses it and reports any error)."""
    try:
        if _first_item_line(lines) == 0:
            return None
        return _LineReader(path, lines).graph()
    except _GiveUp:
        return None
