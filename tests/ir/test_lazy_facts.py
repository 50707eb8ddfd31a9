"""What the IR objects keep outside their fields: a type's hash, a parsed node's operand spans.

A `TensorType` keeps its hash (the passes' memos key on types), but a hash of strings differs from
one Python process to the next, so a pickle must not carry it. The parser's fast path finds a
node's operand spans when first read (`line_parser.OperandSpans`): they must behave as the tuple
lark makes, whatever reads them.
"""

from __future__ import annotations

import pickle

import optgraph as og
from optgraph.ir.graph import TensorType
from optgraph.ir.line_parser import OperandSpans
from optgraph.ir.parser import parse_with_lark

TEXT = """graph g {
  input %x : f32[4]
  input %w : f32[4]
  %y = add(%x,   %w) : f32[4]
  %z = mul(%y, %y) : f32[4]
  output %z
}
"""


def test_a_type_keeps_its_hash_but_not_in_a_pickle() -> None:
    t = TensorType("f32", (2, 3))
    assert hash(t) == hash(("f32", (2, 3)))
    assert "_hash" in t.__dict__
    copy = pickle.loads(pickle.dumps(t))
    assert "_hash" not in copy.__dict__
    assert copy == t and hash(copy) == hash(t)
    assert {t: 1}[TensorType("f32", (2, 3))] == 1


def test_operand_spans_read_as_lark_makes_them() -> None:
    fast = og.parse(TEXT, "m.ir")
    lark = parse_with_lark(TEXT, "m.ir")
    for mine, theirs in zip(fast.nodes, lark.nodes, strict=True):
        spans = mine.operand_spans
        assert isinstance(spans, OperandSpans)
        expected = tuple(theirs.operand_spans)
        assert spans == expected and len(spans) == len(expected)
        assert [s.source_line for s in spans] == [s.source_line for s in expected]
        assert spans[-1] == expected[-1] and spans[:1] == expected[:1]
    add = fast.nodes[0].operand_spans
    assert [(s.line, s.col, s.end_col) for s in add] == [(4, 12, 14), (4, 18, 20)]
    again = pickle.loads(pickle.dumps(fast))
    assert tuple(again.nodes[1].operand_spans) == tuple(fast.nodes[1].operand_spans)
