"""The parser's fast path (`optgraph.ir.line_parser`) against the grammar (`parse_with_lark`).

Where the fast path accepts a text, lark must accept it too and build an equal graph with equal
spans (equality of `Node`s ignores spans, so they are compared on their own); where lark rejects a
text, the fast path must give up so that lark's diagnostic is the one reported. Checked on every
example, fixture and bad input, on printed random graphs, and on thousands of mutated texts.
"""

from __future__ import annotations

import importlib.util
import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

import optgraph as og
from optgraph.errors import OptGraphError, Span
from optgraph.ir.graph import Graph, Node
from optgraph.ir.line_parser import parse_lines
from optgraph.ir.parser import parse_with_lark
from optgraph.ir.source import SourceText, normalize_source
from tests.ir.test_parser import DOC_EXAMPLE
from tests.support.random_graphs import random_dag_graphs

ROOT = Path(__file__).resolve().parents[2]
EXPECT = "# EXPECT:"


def _sources() -> Iterator[tuple[str, str]]:
    """(name, text) of every example, fixture (input and expected IR) and bad input."""
    for path in sorted((ROOT / "examples").glob("*.ir")):
        yield path.name, path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "tests" / "fixtures").rglob("*.ir")):
        text = path.read_text(encoding="utf-8")
        for i, part in enumerate(text.split(EXPECT + "\n")):
            yield f"{path.parent.name}/{path.name}#{i}", part
    for path in sorted((ROOT / "tests" / "bad_input").rglob("*.ir")):
        yield f"bad_input/{path.name}", path.read_bytes().decode("utf-8", errors="replace")


SOURCES = dict(_sources())


def _fast(text: str) -> Graph | None:
    return parse_lines("m.ir", SourceText("m.ir", normalize_source(text)).lines)


def _spans(graph: Graph) -> list[Any]:
    """Every span of `graph` with its source line, in a fixed order."""

    def key(span: Span | None) -> Any:
        return None if span is None else (span, span.source_line)

    def node_spans(node: Node) -> Iterator[Any]:
        yield key(node.span)
        yield [key(s) for s in node.operand_spans]
        if node.body is not None:
            for inner in node.body.nodes:
                yield from node_spans(inner)

    out: list[Any] = [key(i.span) for i in graph.inputs] + [key(w.span) for w in graph.weights]
    for node in graph.nodes:
        out.extend(node_spans(node))
    return out + [key(o.span) for o in graph.outputs]


def assert_same_as_lark(text: str) -> Graph | None:
    """The fast path's graph of `text` (None where it gives up), checked against lark's."""
    fast = _fast(text)
    if fast is None:
        return None
    lark = parse_with_lark(text, "m.ir")  # raises where the fast path accepted a bad text
    assert fast == lark
    assert fast.name == lark.name and fast.path == lark.path
    assert _spans(fast) == _spans(lark)
    assert og.print_graph(fast) == og.print_graph(lark)
    return fast


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_fast_path_builds_what_lark_builds(name: str) -> None:
    assert_same_as_lark(SOURCES[name])


def test_fast_path_takes_the_examples_and_printed_graphs() -> None:
    """The fast path is not a no-op: it reads every example and every printed graph itself."""
    for name, text in SOURCES.items():
        if name.endswith(".ir") and "/" not in name:
            assert assert_same_as_lark(text) is not None, name
            assert assert_same_as_lark(og.print_graph(og.parse(text))) is not None, name
    assert assert_same_as_lark(DOC_EXAMPLE) is not None


def test_fast_path_leaves_every_bad_input_to_lark() -> None:
    for name, text in SOURCES.items():
        if name.startswith("bad_input/"):
            try:
                parse_with_lark(text, "m.ir")
            except OptGraphError:
                assert _fast(text) is None, name


def test_generated_llama_graphs_take_the_fast_path() -> None:
    spec = importlib.util.spec_from_file_location("gen_llama", ROOT / "examples" / "gen_llama.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    for kwargs in ({"layers": 2}, {"layers": 1, "bias": "all", "tied_embeddings": True}):
        assert assert_same_as_lark(module.generate_llama(**kwargs)) is not None


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(random_dag_graphs(max_nodes=12, annotations=True))
def test_printed_random_graphs_take_the_fast_path(graph: Graph) -> None:
    parsed = assert_same_as_lark(og.print_graph(graph))
    assert parsed == graph


# Characters a mutation inserts: every delimiter of the grammar, sigils, digits, letters of
# keywords and literals, and the whitespace that the fast path does not read.
MUTATION_CHARACTERS = list('%^!{}()[],:="#.-+eE019 \t\n\fxfnaitr\\')
SPECIAL_LINES = [
    "  %z = record(%x) : f32[4,64]",
    "  weight %q : f32[2] record",
    "  %z = neg(%x) {a = 1,} : f32[4,64]",
    '  %z = neg(%x) {a = "x\ty"} : f32[4,64]',
    "  %z = neg(%x) {a = 1_0} : f32[4,64]",
    "  %z = neg(%x) {a = 1.5e} : f32[4,64]",
    "  %z = neg(%x) {a = -inf, b = .5, c = 1., d = 2e3, e = nan} : f32[4,64]",
    "  %z = input(%x) : f32[4,64]",
    "  input%z : f32[2]",
    "  record^e9",
    "graph graph {",
]


def _mutants(text: str, count: int, seed: int) -> Iterator[str]:
    rng = random.Random(seed)
    lines = text.split("\n")
    for _ in range(count):
        kind = rng.randrange(5)
        if kind == 4:  # a special line inserted somewhere
            at = rng.randrange(len(lines))
            yield "\n".join(lines[:at] + [rng.choice(SPECIAL_LINES)] + lines[at:])
            continue
        pos = rng.randrange(len(text))
        if kind == 0:
            yield text[:pos] + text[pos + 1 :]
        elif kind == 1:
            yield text[:pos] + rng.choice(MUTATION_CHARACTERS) + text[pos:]
        elif kind == 2:
            yield text[:pos] + rng.choice(MUTATION_CHARACTERS) + text[pos + 1 :]
        else:
            end = min(len(text), pos + rng.randrange(1, 12))
            yield text[:pos] + text[pos:end] + text[pos:]


@pytest.mark.parametrize("name", ["diamond.ir", "llama_decode.ir", "moe_block.ir", "DOC_EXAMPLE"])
def test_mutated_texts_parse_alike_or_go_to_lark(name: str) -> None:
    """Single edits of real texts: the fast path never accepts what lark rejects or reads
    differently (it gives up on most edits; the rest must match lark exactly)."""
    text = DOC_EXAMPLE if name == "DOC_EXAMPLE" else SOURCES[name]
    taken = 0
    for mutant in _mutants(text, 600, seed=len(name)):
        try:
            taken += assert_same_as_lark(mutant) is not None
        except OptGraphError as err:  # lark rejected a text the fast path accepted
            raise AssertionError(f"fast path accepted a bad text ({err}):\n{mutant}") from None
    assert taken > 0  # some edits (a renamed value, another number) stay on the fast path
