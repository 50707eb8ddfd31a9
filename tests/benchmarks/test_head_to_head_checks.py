"""The head-to-head suite's floors and agreement check (benchmarks/harness/head_to_head_checks.py)
on the fake CuPy: the prefill's FLOP count and the agreement cell, which must name the side that
is off, run the diagnostics only on a disagreement and report changed weights."""

from __future__ import annotations

import sys
from types import ModuleType, SimpleNamespace
from typing import Any

import numpy as np

from tests.benchmarks.test_gpu_benchmarks_on_fake_cupy import benchmarks

__all__ = ["benchmarks"]  # the fixture, used by name


def test_prefill_compute_floor_counts_products_and_visible_attention(benchmarks: Any) -> None:
    checks: ModuleType = benchmarks("harness.head_to_head_checks")
    import optgraph as og

    graph = og.parse("""graph p {
  input %x : f16[6,32]
  input %w : f16[32,16]
  input %q : f16[1,4,6,8]
  input %k : f16[1,2,6,8]
  %y = matmul(%x, %w) : f16[6,16]
  %a = attention(%q, %k, %k) {causal = true} : f16[1,4,6,8]
  %b = attention(%q, %k, %k) : f16[1,4,6,8]
  output %y, %a, %b
}
""")
    causal_pairs = 6 * 7 // 2  # row i sees i + 1 keys
    want = 2 * 6 * 16 * 32 + 4 * 8 * 4 * causal_pairs + 4 * 8 * 4 * 36
    assert checks.compute_flops(graph) == want
    assert checks._visible_pairs(2, 5, True) == 4 + 5  # bottom-right: rows see 4 and 5 keys
    assert "TFLOP/s" in checks.rate_line(7e14)


def test_agreement_names_the_side_that_is_off(benchmarks: Any, monkeypatch: Any) -> None:
    checks: ModuleType = benchmarks("harness.head_to_head_checks")
    import optgraph as og

    graph = og.parse("graph g {\n input %x : f32[4]\n %y = exp(%x) : f32[4]\n output %y\n}\n")
    good = np.exp(np.arange(4, dtype=np.float32))

    class Exact:  # the third opinion: the right answer, whatever the fake CuPy computes
        def __init__(self, graph: Any) -> None:
            pass

        def __call__(self, env: Any) -> dict[str, np.ndarray]:
            return {"y": good}

    monkeypatch.setitem(
        sys.modules, "benchmarks.harness.cupy_interpreter", SimpleNamespace(CupyModel=Exact)
    )
    inputs = {"x": np.arange(4, dtype=np.float32)}
    seen: list[str] = []

    def zeros(i: Any, w: Any) -> dict[str, np.ndarray]:
        return {"y": np.zeros(4, np.float32)}

    def right(who: str) -> Any:
        return lambda i, w: seen.append(who) or {"y": good}

    cell = checks.agreement(
        graph, inputs, dict, zeros, right("torch"), ["w1"], {"og-x": right("x")}
    )
    assert cell.startswith(
        "og~torch 1.0e+00, og~cupy 1.0e+00, torch~cupy 0.0e+00, og-x~torch 0.0e+00"
    )
    assert "ours all zeros" in cell and "weights changed by the variants: w1" in cell
    assert seen == ["torch", "x"]
    healthy = checks.agreement(
        graph, inputs, dict, right("ours"), right("torch"), None, {"og-x": zeros}
    )
    assert healthy == "og~torch 0.0e+00, og~cupy 0.0e+00"  # no diagnostics when they agree
