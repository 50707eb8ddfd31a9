"""Textual before/after tests: every `tests/fixtures/<pass-name>/*.ir` file (format: docs/passes.md).

    # RUN: dce,cse
    graph g { ... }                         the input IR
    # EXPECT:
    graph g { ... }                         the complete expected IR, canonical form

or, instead of `# EXPECT:` and the IR, one `# EXPECT-ERROR: line:col: message` line per expected
diagnostic (line:col in the fixture file itself). The pipeline runs through `run_pipeline`;
results are compared exactly and a failure shows a unified diff. `pytest --update-fixtures`
rewrites the expectation with the actual result so a reviewer sees the change as a diff (the
reading, running and comparing: tests/support/text_fixtures.py, shared with the lowering fixtures).

New fixture folders are picked up with no change here.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.text_fixtures import (
    check_fixture,
    read_fixture,
    render_fixture,
    run_fixture,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
FIXTURE_FILES = sorted(FIXTURES.glob("*/*.ir"))


@pytest.mark.parametrize(
    "path", FIXTURE_FILES, ids=[str(p.relative_to(FIXTURES)) for p in FIXTURE_FILES]
)
def test_fixture(path: Path, update_fixtures: bool) -> None:
    check_fixture(path, update_fixtures)


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
