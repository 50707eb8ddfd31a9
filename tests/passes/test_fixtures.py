"""Textual before/after tests: every `tests/fixtures/<pass-name>/*.ir` file (format: docs/passes.md).

    # RUN: dce,cse
    graph g { ... }                         the input IR
    # EXPECT:
    graph g { ... }                         the complete expected IR, canonical form

or, instead of `# EXPECT:` and the IR, one `# EXPECT-ERROR: line:col: message` line per expected
diagnostic (line:col in the fixture file itself). The pipeline runs through `run_pipeline`;
results are compared exactly and a failure shows a unified diff. `pytest --update-fixtures`
rewrites the expectation with the actual result so a reviewer sees the change as a diff.

New fixture folders are picked up with no change here.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass
from pathlib import Path

import pytest

from optgraph import parse, print_graph, run_pipeline
from optgraph.errors import Diagnostic, OptGraphError
from optgraph.passes.manager import PIPELINE_PATH

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURE_FILES = sorted(FIXTURES.glob("*/*.ir"))

RUN = "# RUN:"
EXPECT = "# EXPECT:"
EXPECT_ERROR = "# EXPECT-ERROR:"


@dataclass(frozen=True)
class Fixture:
    path: Path
    pipeline: str
    source: str  # everything before the expectation: RUN lines, comments, the input IR
    expected: str  # the expected IR text, or the expected diagnostics one per line
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


def _diagnostic_line(d: Diagnostic) -> str:
    if d.span is None:
        return d.message
    if d.span.path == PIPELINE_PATH:  # a column in the RUN line, not in the model
        return f"{PIPELINE_PATH}:{d.span.col}: {d.message}"
    return f"{d.span.line}:{d.span.col}: {d.message}"


def run_fixture(fixture: Fixture) -> tuple[str, bool]:
    """(actual text, whether it is an error): the printed IR or the diagnostics, one per line."""
    try:
        graph = run_pipeline(parse(fixture.source, str(fixture.path)), fixture.pipeline)
    except OptGraphError as err:
        return "\n".join(_diagnostic_line(d) for d in err.diagnostics) + "\n", True
    return print_graph(graph), False


def render_fixture(fixture: Fixture, actual: str, is_error: bool) -> str:
    """The fixture file with its expectation replaced by `actual`."""
    source = fixture.source if fixture.source.endswith("\n") else fixture.source + "\n"
    if is_error:
        return source + "".join(f"{EXPECT_ERROR} {line}\n" for line in actual.splitlines())
    return f"{source}{EXPECT}\n{actual}"


@pytest.mark.parametrize(
    "path", FIXTURE_FILES, ids=[str(p.relative_to(FIXTURES)) for p in FIXTURE_FILES]
)
def test_fixture(path: Path, update_fixtures: bool) -> None:
    fixture = read_fixture(path)
    actual, is_error = run_fixture(fixture)
    if actual == fixture.expected and is_error == fixture.expects_error:
        return
    if update_fixtures:
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


def test_core_passes_have_fixtures() -> None:
    folders = {p.parent.name for p in FIXTURE_FILES}
    assert {"dce", "cse", "verify"} <= folders


def test_reader_splits_source_and_expectation(tmp_path: Path) -> None:
    path = tmp_path / "f.ir"
    path.write_text("# RUN: dce\n# RUN: cse\ngraph g {\n}\n# EXPECT:\ngraph g {\n}\n")
    fixture = read_fixture(path)
    assert fixture.pipeline == "dce,cse"
    assert fixture.source == "# RUN: dce\n# RUN: cse\ngraph g {\n}\n"
    assert fixture.expected == "graph g {\n}\n"
    assert not fixture.expects_error


def test_update_rewrites_only_the_expectation(tmp_path: Path) -> None:
    path = tmp_path / "f.ir"
    head = "# RUN: dce\n# drops %b\ngraph g {\n  input %x : f32[2]\n"
    head += "  %a = exp(%x) : f32[2]\n  %b = neg(%x) : f32[2]\n  output %a\n}\n"
    path.write_text(head + "# EXPECT:\nstale\n")
    fixture = read_fixture(path)
    actual, is_error = run_fixture(fixture)
    assert not is_error and "%b" not in actual
    path.write_text(render_fixture(fixture, actual, is_error))
    again = read_fixture(path)
    assert again.source == head
    assert again.expected == actual


def test_error_expectation_lists_every_diagnostic(tmp_path: Path) -> None:
    path = tmp_path / "f.ir"
    path.write_text(
        "# RUN: verify\ngraph g {\n  input %x : f32[2]\n  %a = exp(%q) : f32[2]\n"
        "  %b = neg(%r) : f32[2]\n  output %a, %b\n}\n# EXPECT-ERROR: stale\n"
    )
    fixture = read_fixture(path)
    actual, is_error = run_fixture(fixture)
    assert is_error
    assert actual.splitlines() == [
        "4:12: use of undefined value '%q'",
        "5:12: use of undefined value '%r'",
    ]
    rendered = render_fixture(fixture, actual, is_error)
    assert rendered.endswith(
        "# EXPECT-ERROR: 4:12: use of undefined value '%q'\n"
        "# EXPECT-ERROR: 5:12: use of undefined value '%r'\n"
    )
