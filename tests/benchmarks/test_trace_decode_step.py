"""benchmarks/trace_decode_step.py: traced kernels zipped with the plan's launches, the time each
adds to the step, and a trace that does not match the plan refused (no GPU: made-up traces)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from benchmarks import trace_decode_step
from optgraph.codegen.plan.steps import Extent, KernelStep, Location


def _launch(node: str, kernel: str, weight_bytes: int) -> KernelStep:
    reads = (Extent("weights", "", 0, weight_bytes), Extent("arena", "", 0, 64))
    return KernelStep(
        node, 0, kernel, (1, 1, 1), (256, 1, 1), 0, (Location("arena", "", 0),), reads
    )


PLAN = SimpleNamespace(
    steps=[
        _launch("l0.q", "og_a", 1000),
        _launch("l0.attn", "og_b", 0),
        _launch("logits", "og_c", 10),
    ]
)


def test_rows_add_up_to_the_step_and_overlaps_count_once() -> None:
    earlier = [("og_c", 0.0, 5.0)]  # a previous replay's kernel: not listed
    trace = earlier + [("og_a", 100.0, 10.0), ("og_b", 104.0, 10.0), ("og_c", 108.0, 3.0)]
    rows = trace_decode_step.step_rows(PLAN, trace)
    assert [r[0] for r in rows] == ["l0.q", "l0.attn", "logits"]
    assert [r[2] for r in rows] == [0.0, 4.0, 8.0]  # starts from the first kernel's
    assert [r[4] for r in rows] == [10.0, 4.0, 0.0]  # og_c ends before og_b: adds nothing
    assert sum(r[4] for r in rows) == 14.0  # the step's span
    assert [r[5] for r in rows] == [1000, 0, 10]  # weight bytes only, not the arena's
    assert trace_decode_step.role("l12.attn") == "attn" and trace_decode_step.role("h0") == "h0"


def test_a_trace_unlike_the_plan_is_refused() -> None:
    trace = [("og_a", 0.0, 1.0), ("og_x", 1.0, 1.0), ("og_c", 2.0, 1.0)]
    with pytest.raises(SystemExit, match="og_x traced where og_b was issued"):
        trace_decode_step.step_rows(PLAN, trace)
