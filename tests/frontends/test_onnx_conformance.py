"""ONNX's backend node tests for every op the ONNX importer maps (tools/onnx_conformance.py):
no case may compute a wrong answer, and docs/importers.md's table is the one the tool prints."""

from __future__ import annotations

import difflib

import pytest

pytest.importorskip("onnx", reason="the ONNX importer tests need onnx")

from optgraph.frontends.onnx_ops import CONVERTERS
from tools import onnx_conformance as conformance


@pytest.mark.parametrize("op", sorted(CONVERTERS))
def test_no_node_test_of_a_mapped_op_computes_a_wrong_answer(op: str) -> None:
    outcomes = conformance.run_op(op)
    wrong = [f"{o.case}: {o.detail}" for o in outcomes if o.status == "fail"]
    assert not wrong, "\n".join(wrong)
    # A refusal is the importer's own located message, never an empty one.
    assert all(o.detail for o in outcomes if o.status == "unsupported")


def test_the_common_ops_pass_their_node_tests() -> None:
    """Ops whose every node test is within what optgraph supports pass them all."""
    for op in ("Concat", "Gemm", "Reshape", "Softmax", "Split", "Transpose", "Where", "Flatten"):
        outcomes = conformance.run_op(op)
        assert outcomes and all(o.status == "pass" for o in outcomes), op


def test_a_wrong_answer_is_caught() -> None:
    """The comparison fails a float result off by 1e-2 in 4 of 64 elements, a NaN where a number
    is expected, and one wrong integer; NaN where NaN is expected is equal."""
    import numpy as np

    want = np.linspace(-1, 1, 64, dtype=np.float32)
    have = want.copy()
    have[:4] += 1e-2
    assert "nmse" in conformance._compare([have], [want])
    nan = want.copy()
    nan[3] = np.nan
    assert conformance._compare([nan], [nan]) == ""
    assert "inf/nan" in conformance._compare([want], [nan])
    ints = np.arange(5)
    assert "differ" in conformance._compare([ints + (ints == 2)], [ints])


def test_the_docs_table_is_current() -> None:
    doc = conformance.DOC.read_text()
    outcomes = [o for op in conformance.node_cases() for o in conformance.run_op(op)]
    fresh, documented = conformance.table(outcomes), conformance.documented_table(doc)
    diff = "".join(difflib.unified_diff(documented.splitlines(True), fresh.splitlines(True)))
    assert fresh == documented, (
        f"docs/importers.md's ONNX conformance table is stale "
        f"(python tools/onnx_conformance.py rewrites it):\n{diff}"
    )
