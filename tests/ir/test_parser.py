"""Parser and printer: every construct of docs/ir.md round-trips, and canonical printing is stable."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import optgraph as og
from optgraph.errors import ParseError
from optgraph.ir.graph import Annotations, Region, TensorType

DOC_EXAMPLE = """\
# a comment runs to the end of the line
graph mlp {
  input %x : f32[4,64]
  weight %w1 : f32[64,256]                  # placement hint: device (default) or host
  weight %emb : f16[32000,4096] host
  %h = matmul(%x, %w1) : f32[4,256]
  %a = gelu(%h) : f32[4,256] !{stream = 1}
  record ^e0 !{stream = 1}
  wait ^e0 !{stream = 0}
  %s = sum(%a) {axes = [1], keepdims = true} : f32[4,1]
  %y = fused(%a, %s) : f32[4,256] body(%p0, %p1) {
    %t = sub(%p0, %p1) : f32[4,256]
    %u = relu(%t) : f32[4,256]
    yield %u
  }
  output %y, %s
}
"""

DOC_EXAMPLE_CANONICAL = """\
graph mlp {
  input %x : f32[4,64]
  weight %w1 : f32[64,256]
  weight %emb : f16[32000,4096] host
  %h = matmul(%x, %w1) : f32[4,256]
  %a = gelu(%h) : f32[4,256] !{stream = 1}
  record ^e0 !{stream = 1}
  wait ^e0 !{stream = 0}
  %s = sum(%a) {axes = [1], keepdims = true} : f32[4,1]
  %y = fused(%a, %s) : f32[4,256] body(%p0, %p1) {
    %t = sub(%p0, %p1) : f32[4,256]
    %u = relu(%t) : f32[4,256]
    yield %u
  }
  output %y, %s
}
"""


def round_trip(text: str) -> og.Graph:
    """Parse, print, parse again: equal graphs, and printing the reparsed graph is identical."""
    graph = og.parse(text)
    printed = og.print_graph(graph)
    again = og.parse(printed)
    assert again == graph
    assert og.print_graph(again) == printed
    return graph


def wrap(body: str, header: str = "input %x : f32[2,3]") -> str:
    return f"graph g {{\n  {header}\n{body}\n}}\n"


def test_doc_example_prints_canonically_and_verifies() -> None:
    graph = round_trip(DOC_EXAMPLE)
    assert og.print_graph(graph) == DOC_EXAMPLE_CANONICAL
    og.verify(graph)


def test_doc_example_structure() -> None:
    g = og.parse(DOC_EXAMPLE)
    assert g.name == "mlp"
    assert [i.name for i in g.inputs] == ["x"]
    assert [(w.name, w.placement) for w in g.weights] == [("w1", "device"), ("emb", "host")]
    assert g.weights[1].type == TensorType("f16", (32000, 4096))
    assert [n.op for n in g.nodes] == ["matmul", "gelu", "record", "wait", "sum", "fused"]
    assert g.nodes[1].ann == Annotations(stream=1)
    record, wait = g.nodes[2], g.nodes[3]
    assert (record.name, record.is_event, record.type) == ("e0", True, None)
    assert wait.ann.stream == 0 and wait.operands == ()
    assert g.nodes[4].attrs == {"axes": (1,), "keepdims": True}
    body = g.nodes[5].body
    assert body == Region(("p0", "p1"), body.nodes, "u")
    assert [n.name for n in body.nodes] == ["t", "u"]
    assert g.output_names() == ("y", "s")


def test_canonical_printing_is_idempotent_on_messy_input() -> None:
    messy = (
        "graph   g{input %x:f32[2,3]   weight %w:f32[3] device !{segment=1}"
        "%a=add(%x,%w){}:f32[2,3]!{size=24,stream=2,offset=0}   # trailing comment\n"
        "%b = softmax(%a) {axis = -1} : f32[2,3] output %b}"
    )
    graph = round_trip(messy)
    printed = og.print_graph(graph)
    assert printed == (
        "graph g {\n"
        "  input %x : f32[2,3]\n"
        "  weight %w : f32[3] !{segment = 1}\n"
        "  %a = add(%x, %w) : f32[2,3] !{stream = 2, offset = 0, size = 24}\n"
        "  %b = softmax(%a) {axis = -1} : f32[2,3]\n"
        "  output %b\n"
        "}\n"
    )
    og.verify(graph)


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i32", "i64", "bool"])
def test_every_dtype_round_trips(dtype: str) -> None:
    g = round_trip(f"graph g {{\n  input %x : {dtype}[2,3]\n  output %x\n}}\n")
    assert g.inputs[0].type == TensorType(dtype, (2, 3))


def test_scalar_and_high_rank_types() -> None:
    g = round_trip(wrap("  %s = sum(%x) : f32[]\n  output %s", "input %x : f32[1,2,3,4,5]"))
    assert g.nodes[0].type == TensorType("f32", ())
    assert g.inputs[0].type.rank == 5
    assert "f32[]" in og.print_graph(g)


@pytest.mark.parametrize(
    ("literal", "expected", "printed"),
    [
        ("3", 3, "3"),
        ("-3", -3, "-3"),
        ("0.5", 0.5, "0.5"),
        ("1e-06", 1e-06, "1e-06"),
        ("1E-6", 1e-06, "1e-06"),
        (".25", 0.25, "0.25"),
        ("2.", 2.0, "2.0"),
        ("inf", math.inf, "inf"),
        ("-inf", -math.inf, "-inf"),
        ("true", True, "true"),
        ("false", False, "false"),
        ('"tanh"', "tanh", '"tanh"'),
        (r'"a\"b\\c\n\u00e9"', 'a"b\\c\né', r'"a\"b\\c\n\u00e9"'),
        ("[0, 2, 1]", (0, 2, 1), "[0, 2, 1]"),
        ("[-1]", (-1,), "[-1]"),
        ("[]", (), "[]"),
    ],
)
def test_literals_round_trip(literal: str, expected: object, printed: str) -> None:
    g = round_trip(wrap(f"  %a = neg(%x) {{k = {literal}}} : f32[2,3]\n  output %a"))
    value = g.nodes[0].attrs["k"]
    assert value == expected and type(value) is type(expected)
    assert f"{{k = {printed}}}" in og.print_graph(g)


def test_nan_literal_round_trips_equal() -> None:
    g = round_trip(wrap("  %a = scale(%x) {factor = nan} : f32[2,3]\n  output %a"))
    assert math.isnan(g.nodes[0].attrs["factor"])  # type: ignore[arg-type]


def test_attributes_print_sorted_by_key() -> None:
    g = round_trip(wrap("  %a = neg(%x) {zeta = 1, alpha = 2, mid = true} : f32[2,3]\n  output %a"))
    assert "{alpha = 2, mid = true, zeta = 1}" in og.print_graph(g)


def test_every_annotation_round_trips_in_canonical_order() -> None:
    text = wrap(
        "  %a = neg(%x) : f32[2,3] !{slot = 7, segment = 6, visible = [3, -1, 5], "
        'live = [0, 4], size = 24, offset = 64, backend = "cpu", stream = 2}\n  output %a'
    )
    g = round_trip(text)
    assert g.nodes[0].ann == Annotations(
        stream=2,
        backend="cpu",
        offset=64,
        size=24,
        live=(0, 4),
        visible=(3, -1, 5),
        segment=6,
        slot=7,
    )
    assert (
        '!{stream = 2, backend = "cpu", offset = 64, size = 24, live = [0, 4], '
        "visible = [3, -1, 5], segment = 6, slot = 7}" in og.print_graph(g)
    )


def test_empty_annotation_block_prints_as_nothing() -> None:
    g = round_trip(wrap("  %a = neg(%x) : f32[2,3] !{}\n  output %a"))
    assert g.nodes[0].ann.is_empty()
    assert "!{" not in og.print_graph(g)


def test_weights_host_device_and_annotations() -> None:
    text = (
        "graph g {\n  weight %a : f32[2] device\n  weight %b : f16[2] host !{segment = 0, slot = 1}\n"
        "  weight %c : f32[2]\n  %y = add(%a, %c) : f32[2]\n  output %y\n}\n"
    )
    g = round_trip(text)
    assert [w.placement for w in g.weights] == ["device", "host", "device"]
    assert g.weights[1].ann == Annotations(segment=0, slot=1)
    printed = og.print_graph(g)
    assert "weight %a : f32[2]\n" in printed  # device is the default and not printed
    assert "weight %b : f16[2] host !{segment = 0, slot = 1}\n" in printed


def test_events_round_trip_with_and_without_stream() -> None:
    text = wrap(
        "  %a = neg(%x) : f32[2,3] !{stream = 1}\n  record ^e.0 !{stream = 1}\n"
        "  wait ^e.0\n  record ^other\n  %b = exp(%a) : f32[2,3]\n  output %b"
    )
    g = round_trip(text)
    events = [(n.op, n.name, n.ann.stream) for n in g.nodes if n.is_event]
    assert events == [("record", "e.0", 1), ("wait", "e.0", None), ("record", "other", None)]
    og.verify(g)


@pytest.mark.parametrize(
    "before",
    [
        "input %x : f32[2,3]",
        "weight %x : f32[2,3]",
        "weight %x : f32[2,3] host",
        "%y = neg(%x) : f32[2,3]",
    ],
)
def test_event_right_after_a_type(before: str) -> None:
    # Found by the round-trip property: `record` after a type was lexed as a NAME (a weight
    # placement), so an event could not follow an input, a weight or an unannotated node.
    header = "input %x : f32[2,3]" if before.startswith("%") else before
    body = "" if before.startswith(("input", "weight")) else f"  {before}\n"
    g = round_trip(
        f"graph g {{\n  {header}\n{body}  record ^e\n  wait ^e\n  %z = neg(%x) : f32[2,3]\n"
        "  output %z\n}\n"
    )
    assert [n.op for n in g.nodes if n.is_event] == ["record", "wait"]


def test_keywords_inside_names_stay_names() -> None:
    g = round_trip(
        wrap("  %recorder = neg(%x) {waits = 1, record_me = true} : f32[2,3]\n  output %recorder")
    )
    assert g.nodes[0].name == "recorder" and g.nodes[0].attrs == {"waits": 1, "record_me": True}


def test_fused_body_with_attrs_and_annotations_round_trips() -> None:
    text = wrap(
        "  %f = fused(%x) : f32[2,3] !{stream = 1} body(%p) {\n"
        "    %q = scale(%p) {factor = 2.0} : f32[2,3]\n"
        "    %r = softmax(%q) {axis = 1} : f32[2,3]\n"
        "    yield %r\n  }\n  output %f"
    )
    g = round_trip(text)
    node = g.nodes[0]
    assert node.ann.stream == 1 and node.body is not None
    assert node.body.params == ("p",) and node.body.result == "r"
    assert node.body.nodes[0].attrs == {"factor": 2.0}
    og.verify(g)


def test_value_names_with_digits_and_dots() -> None:
    g = round_trip(
        "graph g.1 {\n  input %0 : f32[2]\n  %h.1 = neg(%0) : f32[2]\n  %_2 = exp(%h.1) : f32[2]\n"
        "  output %_2, %h.1\n}\n"
    )
    assert [n.name for n in g.nodes] == ["h.1", "_2"]
    assert g.name == "g.1"


def test_nodes_keep_issue_order_and_operand_order() -> None:
    g = round_trip(
        wrap("  %b = exp(%x) : f32[2,3]\n  %a = sub(%b, %x) : f32[2,3]\n  output %a, %b")
    )
    assert [n.name for n in g.nodes] == ["b", "a"]
    assert g.nodes[1].operands == ("b", "x")


def test_spans_point_at_op_and_operands() -> None:
    g = og.parse(wrap("  %a = sub(%x,   %x) : f32[2,3]\n  output %a"), path="m.ir")
    node = g.nodes[0]
    assert node.span is not None and (node.span.line, node.span.col) == (3, 8)
    assert [(s.line, s.col) for s in node.operand_spans] == [(3, 12), (3, 18)]
    assert node.span.path == "m.ir"
    assert g.outputs[0].span is not None and g.outputs[0].span.line == 4


def test_spans_do_not_affect_equality() -> None:
    a = og.parse(wrap("  %a = neg(%x) : f32[2,3]\n  output %a"))
    b = og.parse(wrap("\n\n     %a   =   neg(%x) : f32[2,3]\n  output %a"))
    assert a == b
    assert a.nodes[0].span != b.nodes[0].span


def test_whole_graph_on_one_line_equals_pretty_form() -> None:
    one_line = " ".join(DOC_EXAMPLE_CANONICAL.split())
    assert og.parse(one_line) == og.parse(DOC_EXAMPLE)


def test_parse_file_uses_path_in_spans(tmp_path: Path) -> None:
    path = tmp_path / "m.ir"
    path.write_text(DOC_EXAMPLE)
    g = og.parse_file(path)
    assert g == og.parse(DOC_EXAMPLE)
    assert g.nodes[0].span is not None and g.nodes[0].span.path == str(path)


def test_examples_print_canonically_idempotent() -> None:
    examples = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.ir"))
    assert examples
    for path in examples:
        printed = og.print_graph(og.parse_file(path))
        assert og.print_graph(og.parse(printed)) == printed, path.name


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        (wrap("  %a = neg(%x) : f33[2,3]\n  output %a"), (3, 18), "unknown dtype 'f33'"),
        (wrap("  %a = neg(%x) : f32[2,3] !{strem = 1}\n  output %a"), (3, 29), "did you mean"),
        (wrap("  %a = neg(%x) : f32[2,3] !{stream = -1}\n  output %a"), (3, 38), "negative"),
        (wrap("  %a = neg(%x) : f32[2,-3]\n  output %a"), (3, 24), "negative dimension"),
        (wrap("  %a = neg(%x) {k = 1, k = 2} : f32[2,3]\n  output %a"), (3, 24), "duplicate"),
        (wrap("  %a = neg(%x) : f32[2,3] body(%p) {\n yield %p }\n  output %a"), (3, 8), "fused"),
        (wrap("  %a = fused(%x) : f32[2,3]\n  output %a"), (3, 8), "needs a body"),
        ("graph g {\n  input %x : f32[2]\n", (3, 1), "unexpected end of file"),
    ],
)
def test_parse_errors_are_located(text: str, where: tuple[int, int], message: str) -> None:
    with pytest.raises(ParseError) as info:
        og.parse(text, path="m.ir")
    span = info.value.span
    assert span is not None
    assert (span.line, span.col) == where, str(info.value)
    assert message in info.value.message
    assert str(info.value).startswith(f"m.ir:{where[0]}:{where[1]}: error: ")
