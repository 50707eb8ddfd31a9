"""The CUDA source of every example and every tests/codegen_checks fixture, byte for byte.

Each graph is run through its pipeline (`# RUN:` of a fixture, the default pipeline for an
example), lowered (with merged launches unless the fixture says `# LOWER: no-merge-launches`),
and its kernels' text (the module source after the shared prelude) is compared with
tests/codegen_checks/expected_cuda/<name>.cu. A restructuring of the code generators must leave
every file unchanged; a deliberate kernel change rewrites them with `pytest --update-fixtures`,
so that reviewers read the change of the generated CUDA as a diff.
"""

from __future__ import annotations

import difflib
import re
from pathlib import Path

import pytest

import optgraph as og
from optgraph.codegen.cuda_prelude import PRELUDE
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.passes.manager import run_pipeline

ROOT = Path(__file__).resolve().parents[2]
EXPECTED = ROOT / "tests" / "codegen_checks" / "expected_cuda"
GRAPHS = sorted((ROOT / "examples").glob("*.ir")) + sorted(
    (ROOT / "tests" / "codegen_checks").glob("*.ir")
)


def _expected_path(path: Path) -> Path:
    prefix = "example_" if path.parent.name == "examples" else ""
    return EXPECTED / f"{prefix}{path.stem}.cu"


def generated_source(path: Path) -> str:
    """The kernels' text of the graph at `path` as `optgraph compile` would lower it."""
    text = path.read_text()
    run = re.search(r"^# RUN: (.*)$", text, re.MULTILINE)
    pipeline = run.group(1).strip() if run else "default"
    lower = re.search(r"^# LOWER: (.*)$", text, re.MULTILINE)
    options = lower.group(1).split() if lower else []
    graph = og.parse(text, str(path.relative_to(ROOT)))
    if pipeline != "none":
        graph = run_pipeline(graph, pipeline)
    source = lower_cuda(graph, merge_launches="no-merge-launches" not in options).source()
    assert source.startswith(PRELUDE)
    return source[len(PRELUDE) :]


def _diff(expected: str, actual: str, name: str) -> str:
    lines = difflib.unified_diff(
        expected.splitlines(),
        actual.splitlines(),
        f"expected/{name}",
        f"generated/{name}",
        lineterm="",
    )
    shown = list(lines)
    more = f"\n... {len(shown) - 120} more diff lines" if len(shown) > 120 else ""
    return "\n".join(shown[:120]) + more


@pytest.mark.parametrize("path", GRAPHS, ids=lambda p: f"{p.parent.name}/{p.stem}")
def test_generated_source_is_unchanged(path: Path, update_fixtures: bool) -> None:
    actual = generated_source(path)
    expected_path = _expected_path(path)
    if update_fixtures:
        expected_path.parent.mkdir(parents=True, exist_ok=True)
        expected_path.write_text(actual)
        return
    assert expected_path.exists(), f"{expected_path}: missing; run pytest --update-fixtures"
    expected = expected_path.read_text()
    assert actual == expected, _diff(expected, actual, expected_path.name)


def test_every_expected_file_has_its_graph() -> None:
    """No stale expectation: each file under expected_cuda/ belongs to a graph checked above."""
    names = {_expected_path(p).name for p in GRAPHS}
    stale = sorted(p.name for p in EXPECTED.glob("*.cu") if p.name not in names)
    assert not stale, f"expected_cuda/ files without a graph: {stale}"
