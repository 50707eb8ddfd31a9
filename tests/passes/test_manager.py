"""The pass manager: pipeline text both ways, the budget edit, and contracts that tell the truth.

The ordering rules themselves have one `# EXPECT-ERROR` fixture each (tests/fixtures/*/after_*,
needs_*). Here: every declared fact exists and is established by a real pass, each pass provides
what it declares, and a pass that does not declare a fact invalidated really keeps it true.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

import optgraph as og
from optgraph.analysis.arena_plan import check_plan
from optgraph.analysis.lifetimes import annotate_lifetimes, compute_lifetimes
from optgraph.analysis.segments import device_memory
from optgraph.errors import OptGraphError, PipelineError
from optgraph.ir.graph import Graph
from optgraph.passes.base import Pass
from optgraph.passes.facts import FACTS
from optgraph.passes.manager import (
    DEFAULT_PIPELINE,
    PASSES,
    check_contract,
    format_pass,
    format_pipeline,
    make_pass,
    parse_pipeline,
    run_pipeline,
    with_vram_budget,
)
from tests.support.offload_models import llama

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"

EVERY_OPTION = (
    "verify,dce,cse,fuse{max-ops=3,row-prologues=false,prologue-max-k=512},fuse-siblings,"
    "assign-streams{max-streams=2,policy=fanout,min-branch-us=0.5,device=h100,wait-us=1.5,"
    "merged-launches=false},split-backends{gpu-min-batch=8,cpu-ops=conv2d+max_pool2d},"
    "insert-sync,analyze-lifetimes,plan-memory{algo=size,alignment=64,inplace=false},"
    "plan-prefetch{budget=2GiB,depth=3,segment-bytes=256MiB,sync=true},check-races"
)


def test_format_reads_back_as_the_same_passes() -> None:
    passes = parse_pipeline(EVERY_OPTION)
    assert parse_pipeline(format_pipeline(passes)) == passes
    assert parse_pipeline(format_pipeline(parse_pipeline("default"))) == parse_pipeline("default")


def test_format_writes_only_options_that_differ() -> None:
    assert format_pass(make_pass("plan-memory")) == "plan-memory"
    assert format_pass(make_pass("plan-memory", {"inplace": "off"})) == "plan-memory{inplace=false}"
    assert format_pipeline(parse_pipeline("dce, assign-streams{ max-streams=2 }")) == (
        "dce,assign-streams{max-streams=2}"
    )


def test_vram_budget_appends_prefetch_after_the_plan() -> None:
    assert with_vram_budget("default", "2GiB") == f"{DEFAULT_PIPELINE},plan-prefetch{{budget=2GiB}}"
    assert with_vram_budget("dce,assign-streams{max-streams=2}", "1GiB", depth=3) == (
        "dce,assign-streams{max-streams=2},analyze-lifetimes,plan-memory,"
        "plan-prefetch{budget=1GiB,depth=3}"
    )


def test_vram_budget_replaces_a_prefetch_already_there() -> None:
    pipeline = "analyze-lifetimes,plan-memory{algo=size},plan-prefetch{budget=8GiB,sync=true}"
    assert with_vram_budget(pipeline, "512MiB") == (
        "analyze-lifetimes,plan-memory{algo=size},plan-prefetch{budget=512MiB}"
    )


def test_vram_budget_rejects_an_unreadable_size() -> None:
    with pytest.raises(PipelineError, match="--vram-budget: cannot read the size '2 lots'"):
        with_vram_budget("default", "2 lots")
    with pytest.raises(PipelineError, match="unknown pass 'dcee' \\(did you mean 'dce'\\?\\)"):
        with_vram_budget("dcee", "2GiB")


def test_every_declared_fact_exists_and_is_established_by_a_pass() -> None:
    for name, cls in PASSES.items():
        assert cls.name == name
        for fact in (*cls.requires, *cls.provides, *cls.invalidates):
            assert fact in FACTS, f"{name} names unknown fact {fact}"
        assert not set(cls.requires) & set(cls.invalidates), name
        assert not set(cls.provides) & set(cls.invalidates), name
    for fact in FACTS.values():
        assert fact.established_by in PASSES
        assert fact.name in PASSES[fact.established_by].provides


def test_each_pass_provides_what_it_declares() -> None:
    pipeline = (
        "verify,dce,cse,fuse,assign-streams{max-streams=2,min-branch-us=0},split-backends,"
        "insert-sync,analyze-lifetimes,plan-memory"
    )
    seen: list[str] = []

    def check(p: Pass, result: Graph) -> None:
        seen.append(p.name)
        for fact in p.provides:
            assert FACTS[fact].holds(result), f"{p.name} does not provide {fact}"

    planned = run_pipeline(llama(layers=2, host_weights=("embed",)), pipeline, after_each=check)
    budget = device_memory(planned).peak // 2  # some weights must be streamed
    streamed = run_pipeline(planned, f"plan-prefetch{{budget={budget}}},check-races", check)
    assert any(n.op == "prefetch" for n in streamed.nodes)
    assert seen == [p.name for p in parse_pipeline(pipeline)] + ["plan-prefetch", "check-races"]


@pytest.mark.parametrize("name", sorted(PASSES))
def test_every_pass_docstring_shows_its_rewrite_limits_and_cost(name: str) -> None:
    doc = " ".join((sys.modules[PASSES[name].__module__].__doc__ or "").split())
    assert doc.startswith(f"`{name}"), f"{name}: the docstring opens with the pass's name"
    for part in ("before:", "after:", "Does not handle", "Complexity"):
        assert part in doc, f"{name}: the module docstring lacks '{part}'"


def _scheduled_graphs() -> list[tuple[str, Graph]]:
    """Graphs at every stage where a pass may be asked to run: unscheduled, synced, planned,
    planned with its live ranges dropped (so passes that invalidate only those may run)."""
    out = []
    for example in ("diamond", "inception_block", "moe_block"):
        graph = og.parse_file(str(EXAMPLES / f"{example}.ir"))
        synced = run_pipeline(graph, "assign-streams{max-streams=3,min-branch-us=0},insert-sync")
        planned = run_pipeline(synced, "analyze-lifetimes,plan-memory")
        unmarked = planned.with_nodes(n.with_ann(live=None, visible=None) for n in planned.nodes)
        out += [
            (f"{example}:{stage}", g)
            for stage, g in [
                ("graph", graph),
                ("synced", synced),
                ("planned", planned),
                ("offsets", unmarked),
            ]
        ]
    return out


def _kept_true(fact: str, before: Graph, after: Graph) -> bool:
    """Whether `fact`, carried by `before`, is still true of `after` (stale annotations fail)."""
    if not FACTS[fact].is_marked(after):
        return True  # the pass dropped the annotations: nothing stale is left
    if not FACTS[fact].holds(after):
        return False
    if fact == "lifetimes-analyzed":
        return annotate_lifetimes(after, compute_lifetimes(after)) == after
    if fact == "memory-planned":
        return check_plan(after) == []
    return True


@pytest.mark.parametrize("name", sorted(PASSES))
def test_a_pass_keeps_every_fact_it_does_not_invalidate(name: str) -> None:
    ran = 0
    for label, graph in _scheduled_graphs():
        # plan-prefetch: a budget that streams some weights where the graph has any
        budget = {"budget": str(max(1, device_memory(graph).peak * 3 // 4))}
        p = make_pass(name, budget if name == "plan-prefetch" else {})
        try:
            check_contract(p, graph)
            result = p.run(graph)
        except OptGraphError:
            continue  # refused by its contract, or an input it rejects (a budget too small)
        ran += 1
        for fact in FACTS:
            if fact in p.invalidates or fact in p.provides:
                continue
            if FACTS[fact].is_marked(graph) and FACTS[fact].holds(graph):
                assert _kept_true(fact, graph, result), f"{name} breaks {fact} on {label}"
    assert ran, f"{name} ran on none of the graphs"
