"""The lowered plan text of every tests/lowering_checks/*.ir fixture, compared exactly.

Each fixture is a pass fixture (`# RUN: <pipeline>`, the input IR, `# EXPECT:`; format and
`pytest --update-fixtures`: docs/passes.md, machinery: tests/support/text_fixtures.py) whose
expected text is `lowered_plan_text` of the pipeline's result lowered as `optgraph compile -o`
lowers it (`lowered_plan.txt`): the launches per stream, merged launches, events, copies and the
decode rewrites taken. A change of a decode rewrite's decision, of launch merging or of a kernel
fails here as a diff of that text.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from optgraph.codegen.lower_cuda import lower_for_cuda
from optgraph.codegen.lowered_plan_text import lowered_plan_text
from optgraph.ir.graph import Graph
from tests.support.text_fixtures import check_fixture

CHECKS = Path(__file__).resolve().parents[1] / "lowering_checks"
CHECK_FILES = sorted(CHECKS.glob("*.ir"))


def lowered_text(graph: Graph) -> str:
    """What `optgraph compile -o` writes as lowered_plan.txt for `graph`."""
    return lowered_plan_text(lower_for_cuda(graph))


@pytest.mark.parametrize("path", CHECK_FILES, ids=[p.stem for p in CHECK_FILES])
def test_lowered_plan_text(path: Path, update_fixtures: bool) -> None:
    check_fixture(path, update_fixtures, lowered_text)


def test_the_decode_layer_is_checked() -> None:
    assert "llama_decode_layer" in {p.stem for p in CHECK_FILES}
