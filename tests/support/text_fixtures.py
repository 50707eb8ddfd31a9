"""Fixture files whose expectation is text: `# RUN:` lines, the input IR, `# EXPECT:` and the text.

Shared by the pass fixtures (tests/passes/test_fixtures.py: the expected text is the printed IR)
and the lowering fixtures (tests/codegen/test_lowering_fixtures.py: the lowered plan text). The
format is docs/passes.md's "Fixture tests":

    # RUN: dce,cse
    graph g { ... }                         the input IR
    # EXPECT:
    graph g { ... }                         the complete expected text

or, instead of `# EXPECT:` and the text, one `# EXPECT-ERROR: line:col: message` line per
expected diagnostic (line:col in the fixture file itself). `check_fixture` compares exactly; a
failure shows a unified diff, and with `pytest --update-fixtures` the expectation is rewritten
with the actual result (everything above it kept byte for byte) so a reviewer sees the change.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from optgraph import parse, print_graph, run_pipeline
from optgraph.errors import Diagnostic, OptGraphError
from optgraph.ir.graph import Graph

RUN = "# RUN:"
EXPECT = "# EXPECT:"
EXPECT_ERROR = "# EXPECT-ERROR:"


@dataclass(frozen=True)
class Fixture:
    path: Path
    pipeline: str
    source: str  # everything before the expectation: RUN lines, comments, the input IR
    expected: str  # the expected text, or the expected diagnostics one per line
    expects_error: bool


def read_fixture(path: Path) -> Fixture:
    lines = path.read_text(encoding="utf-8").splitlines(keepends=True)
    runs = [line[len(RUN) :].strip() for line in lines if line.startswith(RUN)]
    if not runs:
        raise ValueError(f"{path}: no '# RUN: <pipeline>' line")
    for index, line in enumerate(lines):
        if line.rstrip("\n") == EXPECT:
            return Fixture(
                path, ",".join(runs), "".join(lines[:index]), "".join(lines[index + 1 :]), False
            )
        if line.startswith(EXPECT_ERROR):
            errors = [
                rest[len(EXPECT_ERROR) :].strip()
                for rest in lines[index:]
                if rest.startswith(EXPECT_ERROR)
            ]
            source = "".join(lines[:index])
            return Fixture(path, ",".join(runs), source, "\n".join(errors) + "\n", True)
    raise ValueError(f"{path}: no '# EXPECT:' or '# EXPECT-ERROR:' line")


def _diagnostic_line(d: Diagnostic, fixture_path: Path) -> str:
    """`line:col: message` for a place in the fixture's IR; a place elsewhere (the pipeline text
    of the RUN line) keeps its path, e.g. `<pipeline>:1:15: message`."""
    if d.span is None:
        return d.message
    where = "" if d.span.path == str(fixture_path) else f"{d.span.path}:"
    return f"{where}{d.span.line}:{d.span.col}: {d.message}"


def run_fixture(fixture: Fixture, render: Callable[[Graph], str] = print_graph) -> tuple[str, bool]:
    """(actual text, whether it is an error): `render` of the pipeline's result (the printed
    IR unless told), or the diagnostics, one per line."""
    try:
        graph = run_pipeline(parse(fixture.source, str(fixture.path)), fixture.pipeline)
        text = render(graph)
    except OptGraphError as err:
        return "\n".join(_diagnostic_line(d, fixture.path) for d in err.diagnostics) + "\n", True
    return text, False


def render_fixture(fixture: Fixture, actual: str, is_error: bool) -> str:
    """The fixture file with its expectation replaced by `actual`."""
    source = fixture.source if fixture.source.endswith("\n") else fixture.source + "\n"
    if is_error:
        return source + "".join(f"{EXPECT_ERROR} {line}\n" for line in actual.splitlines())
    return f"{source}{EXPECT}\n{actual}"


def check_fixture(path: Path, update: bool, render: Callable[[Graph], str] = print_graph) -> None:
    """Run the fixture at `path` and compare with its expectation: equal, rewritten (`update`),
    or a test failure showing the unified diff."""
    fixture = read_fixture(path)
    actual, is_error = run_fixture(fixture, render)
    if actual == fixture.expected and is_error == fixture.expects_error:
        return
    if update:
        path.write_text(render_fixture(fixture, actual, is_error), encoding="utf-8")
        return
    want = ("error:\n" if fixture.expects_error else "") + fixture.expected
    got = ("error:\n" if is_error else "") + actual
    diff = difflib.unified_diff(
        want.splitlines(keepends=True),
        got.splitlines(keepends=True),
        fromfile=f"{path.name} (expected)",
        tofile=f"{path.name} (actual, after '{fixture.pipeline}')",
    )
    pytest.fail(
        "fixture output differs (pytest --update-fixtures rewrites it):\n" + "".join(diff),
        pytrace=False,
    )
