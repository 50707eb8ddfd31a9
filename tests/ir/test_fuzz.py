"""Fuzzing parse + verify: whatever the bytes, only an `OptGraphError` escapes, and it renders.

Two sources of input: random bytes, and valid IR (the examples, the docs' example, random graphs)
with random mutations of characters and tokens. A mutated text that still verifies must survive
dce,cse and print back to a text that parses to the same graph.
"""

from __future__ import annotations

import re
from pathlib import Path

from hypothesis import example, given
from hypothesis import strategies as st

import optgraph as og
from optgraph.errors import OptGraphError, PipelineError
from optgraph.ir.graph import DTYPES, Graph
from optgraph.ir.ops import op_names
from optgraph.ir.parser import decode_source
from tests.support.random_graphs import random_dag_graphs

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EVERY_CONSTRUCT = (
    "graph g {\n  input %x : f32[2,3]\n  weight %w : f32[3] host !{segment = 0, slot = 1}\n"
    "  %a = add(%x, %w) : f32[2,3] !{stream = 1}\n  record ^e0 !{stream = 1}\n"
    "  wait ^e0 !{stream = 0}\n  %s = sum(%a) {axes = [1], keepdims = true} : f32[2,1]\n"
    "  %y = fused(%a, %s) : f32[2,3] body(%p0, %p1) {\n    %t = sub(%p0, %p1) : f32[2,3]\n"
    '    %u = gelu(%t) {approximate = "none"} : f32[2,3]\n    yield %u\n  }\n  output %y, %s\n}\n'
)
# Canonical text (no comments), so mutations land on code rather than on comment prose.
SEEDS = [og.print_graph(og.parse_file(p)) for p in sorted(EXAMPLES.glob("*.ir"))]
SEEDS.append(EVERY_CONSTRUCT)
TOKEN = re.compile(r"%[\w.]+|\^[\w.]+|-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\w+|\"[^\"]*\"|!\{|\s+|.")
INTERESTING = list('%^{}()[]!=,:#"-.\n \t\\') + ["0", "9", "e", "f32", "record", "wait", "body"]
# Same-kind replacements keep the syntax and break the meaning (shapes, names, ops, dtypes).
OPS = op_names()
ATTRIBUTE_NAMES = ("axis", "axes", "perm", "shape", "keepdims", "start", "end", "eps", "factor")
NUMBERS = ["0", "1", "2", "3", "4", "7", "-1", "64", "0.5", "-2.0"]


SYNTACTIC = ("delete", "insert", "duplicate", "swap", "replace", "char", "cut", "same")


def _kind(token: str) -> str:
    if token[:1] in "%^":
        return token[0]
    if re.fullmatch(r"-?\d+(\.\d*)?([eE][-+]?\d+)?", token):
        return "number"
    return "word" if re.fullmatch(r"\w+", token) else "other"


def check_text(text: str) -> None:
    """Parse, verify, and for a valid graph run dce,cse and round-trip; only user errors escape."""
    try:
        graph = og.parse(text, path="fuzz.ir")
        og.verify(graph)
    except OptGraphError as err:
        rendered = str(err)
        assert rendered.startswith(("fuzz.ir:", "error:")), rendered
        for diagnostic in err.diagnostics:
            if diagnostic.span is not None:
                assert diagnostic.span.line >= 1 and diagnostic.span.col >= 1
        return
    try:
        result = og.run_pipeline(graph, "dce,cse")
    except PipelineError as err:  # a valid graph may carry annotations dce or cse would leave stale
        assert "invalidates" in err.message, str(err)
        return
    assert og.parse(og.print_graph(result)) == result


def check_bytes(data: bytes) -> None:
    try:
        text = decode_source(data, "fuzz.ir")
    except OptGraphError as err:
        assert str(err).startswith("fuzz.ir:")
        return
    check_text(text)


@given(st.binary(max_size=512))
@example(b"\xff\xfe")
@example(b"graph g {\x00}")
@example(b"\n\n\n")
def test_random_bytes(data: bytes) -> None:
    check_bytes(data)


@given(st.lists(st.sampled_from(INTERESTING + list("abgr%hxy1")), max_size=120).map("".join))
def test_random_ir_alphabet_text(text: str) -> None:
    check_text(text)


@st.composite
def mutated_texts(draw: st.DrawFn) -> str:
    if draw(st.booleans()):
        text = draw(st.sampled_from(SEEDS))
    else:
        graph: Graph = draw(random_dag_graphs(max_nodes=6, annotations=True, events=True))
        text = og.print_graph(graph)
    tokens = TOKEN.findall(text)
    semantic = draw(st.booleans())  # only same-kind replacements: mostly verifier errors
    for _ in range(draw(st.integers(1, 4))):
        if not tokens:
            break
        i = draw(st.integers(0, len(tokens) - 1))
        kind = "same" if semantic else draw(st.sampled_from(SYNTACTIC))
        if kind == "same":
            token_kind = _kind(tokens[i])
            if token_kind == "number":
                tokens[i] = draw(st.sampled_from(NUMBERS))
            elif token_kind == "word":
                for group in (DTYPES, OPS, ATTRIBUTE_NAMES):
                    if tokens[i] in group:
                        tokens[i] = draw(st.sampled_from(group))
            elif token_kind in "%^":
                alike = [t for t in tokens if _kind(t) == token_kind]
                tokens[i] = draw(st.sampled_from(alike))
        elif kind == "delete":
            del tokens[i]
        elif kind == "insert":
            tokens.insert(i, draw(st.sampled_from(INTERESTING)))
        elif kind == "duplicate":
            tokens.insert(i, tokens[i])
        elif kind == "swap":
            j = draw(st.integers(0, len(tokens) - 1))
            tokens[i], tokens[j] = tokens[j], tokens[i]
        elif kind == "replace":
            tokens[i] = tokens[draw(st.integers(0, len(tokens) - 1))]
        elif kind == "char" and tokens[i]:
            k = draw(st.integers(0, len(tokens[i]) - 1))
            tokens[i] = tokens[i][:k] + draw(st.sampled_from(INTERESTING)) + tokens[i][k + 1 :]
        else:
            tokens = tokens[:i]
    return "".join(tokens)


@given(mutated_texts())
@example("graph g {\n  input %x : f32[2]\n  %a = neg(%a) : f32[2]\n  output %a\n}\n")
@example(
    "graph g {\n  input %x : f32[1]\n  %n = neg(%x) : f32[1] !{visible = []}\n  output %n\n}\n"
)
@example("graph g {\n  weight %x : f32[2]\n  wait ^e\n  output %x\n}\n")
@example("graph g {\n  input %x : f32[2]\n  record ^e\n  output %x\n}\n")
def test_mutated_ir(text: str) -> None:
    check_text(text)


ATTRIBUTE_VALUES = ["0", "1", "-1", "2", "-7", "99999999999", "0.0", "-inf", "nan", "true", '"f16"']
ATTRIBUTE_VALUES += ['"none"', '"x"', "[]", "[0]", "[1, 0]", "[0, 0]", "[-1]", "[2, 2]", "[0, 5]"]
FUZZ_ATTRIBUTES = ("axis", "axes", "keepdims", "perm", "shape", "start", "end", "kernel", "stride")
FUZZ_ATTRIBUTES += ("padding", "groups", "causal", "scale", "eps", "dtype", "to", "approximate")
FUZZ_ATTRIBUTES += ("theta", "factor", "transpose_a", "transpose_b")


@st.composite
def one_op_graphs(draw: st.DrawFn) -> str:
    """One node of any op with random operand types and attributes: the op table's type rules."""
    op = draw(st.sampled_from([o for o in OPS if o != "fused"]))
    types = draw(
        st.lists(
            st.tuples(
                st.sampled_from(DTYPES),
                st.lists(st.sampled_from([0, 1, 2, 3, 4, 8]), max_size=5),
            ),
            max_size=5,
        )
    )
    keys = draw(st.lists(st.sampled_from(FUZZ_ATTRIBUTES), max_size=4, unique=True))
    attrs = ", ".join(f"{k} = {draw(st.sampled_from(ATTRIBUTE_VALUES))}" for k in keys)
    inputs = "".join(
        f"  input %i{n} : {d}[{','.join(map(str, s))}]\n" for n, (d, s) in enumerate(types)
    )
    operands = ", ".join(f"%i{n}" for n in range(len(types)))
    result = draw(st.sampled_from(["f32[2]", "f32[]", "f16[2,3]", "i32[1]"]))
    return f"graph g {{\n{inputs}  %y = {op}({operands}) {{{attrs}}} : {result}\n  output %y\n}}\n"


@given(one_op_graphs())
def test_op_type_rules_on_random_operands_and_attributes(text: str) -> None:
    check_text(text)
