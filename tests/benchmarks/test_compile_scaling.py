"""Every phase of a compile (parse, each pass of the default pipeline, verify, report, print) stays
near-linear in the graph size.

Not a timing test: it counts the Python function calls (`sys.setprofile` "call" and "c_call"
events) each phase makes on Llama decode graphs of about 1k and 4k nodes. The counts do not depend
on the machine or its load; four times the nodes must cost less than six times the calls in every
phase (linear gives about 4, anything O(V^2) about 16). plan-memory, and the report that plans the
one-stream graph again, pack buffers with every conflicting pair explicit up to a fixed number of
pairs (`arena_plan.plan`'s `explicit_limit`; past it, permanent buffers are stacked): quadratic
below that cap by design, so they get a looser bound. A quadratic loop that calls nothing
(`x in some_list`) is not counted; a per-node rescan of the graph that calls anything is.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Any

import optgraph as og
from optgraph.cli.report import compute_report
from optgraph.ir.verify import verify
from optgraph.passes.manager import check_contract, parse_pipeline

ROOT = Path(__file__).resolve().parents[2]
NODES_PER_LAYER = 26
MAX_RATIO = 6.0


def _llama_text(nodes: int) -> str:
    spec = importlib.util.spec_from_file_location("gen_llama", ROOT / "examples" / "gen_llama.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    text: str = module.generate_llama(layers=max(1, nodes // NODES_PER_LAYER), hidden=64)
    return text


CAPPED_QUADRATIC = {"plan-memory": 12.0, "report": 12.0}


def _calls(run: Callable[[], Any]) -> tuple[int, Any]:
    count = 0

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        nonlocal count
        if event == "call" or event == "c_call":
            count += 1

    sys.setprofile(profile)
    try:
        result = run()
    finally:
        sys.setprofile(None)
    return count, result


def _phase_calls(text: str) -> dict[str, int]:
    """Calls per phase of a compile of `text`."""
    counts: dict[str, int] = {}
    counts["parse"], graph = _calls(lambda: og.parse(text))
    counts["verify"], _ = _calls(lambda: verify(graph))
    for p in parse_pipeline("default"):
        # the contract (the clocks of `synced`) and the pass, then verify as run_pipeline does
        counts[p.name], result = _calls(lambda: (check_contract(p, graph), p.run(graph))[1])  # noqa: B023
        counts[f"verify after {p.name}"], _ = _calls(lambda: verify(result, previous=graph))  # noqa: B023
        graph = result
    counts["report"], _ = _calls(lambda: compute_report(graph))
    counts["print"], _ = _calls(lambda: og.print_graph(graph))
    return counts


def test_compile_calls_grow_linearly_with_the_graph() -> None:
    small, large = _llama_text(1_000), _llama_text(4_000)
    _phase_calls(small)  # imports and caches first, so no count includes them
    # The large graph between: the clocks of the last graph compiled are shared with a graph
    # scheduled alike (`happens_before`), which would spare the small graph's second compile.
    large_calls, small_calls = _phase_calls(large), _phase_calls(small)
    for phase, calls in large_calls.items():
        ratio = calls / small_calls[phase]
        bound = CAPPED_QUADRATIC.get(phase, MAX_RATIO)
        assert ratio < bound, f"{phase}: {small_calls[phase]:,} calls at 1k nodes, {calls:,} at 4k"
    total = sum(large_calls.values()) / sum(small_calls.values())
    assert 3.0 < total < MAX_RATIO  # the counts measure the compile, which grows with the graph
