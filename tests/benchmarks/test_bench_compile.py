"""benchmarks/bench_compile.py keeps working (a smoke run at small sizes; no timing asserted)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_compile.py"


def _load():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("bench_compile", BENCH)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("extra", [[], ["--chain"], ["--pipeline", "dce,cse"]])
def test_bench_compile_runs_small_sizes(
    extra: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    bench = _load()
    assert bench.main(["--sizes", "60", "200", "--repeat", "1", *extra]) == 0
    out = capsys.readouterr().out
    assert "nodes/s" in out
    rows = [line for line in out.splitlines() if line.rstrip().endswith("ok │")]
    assert len(rows) == 2  # one per size, each within its target
    assert ("pipeline s" in out) == (extra[:1] == ["--pipeline"])


def test_chain_generator_makes_the_requested_size() -> None:
    import optgraph as og

    graph = og.parse(_load().chain_graph(123))
    og.verify(graph)
    assert len(graph.nodes) == 123
