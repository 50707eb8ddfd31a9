"""What each decode rewrite reports it took (`CudaPlan.rewrites`, codegen/decode/taken.py) and
what the lowered plan text (`lowered_plan_text`, `plan_outline`) prints of it: per rewrite, the
node whose launch does the work, the nodes involved, the kernel actually launched; with the
rewrite's switch off, no record and no line. Launch merges are recorded with their members."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest

import optgraph as og
from optgraph.codegen.decode import (
    argmax_folds,
    early_cache_reads,
    gathered_rows,
    qkv_folds,
    rope_cache_writes,
)
from optgraph.codegen.lower_cuda import lower_cuda, lower_for_cuda
from optgraph.codegen.lowered_plan_text import SWITCHES, lowered_plan_text
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.codegen.plan.in_place_outputs import in_place_candidates
from optgraph.codegen.plan.plan_outline import plan_outline
from optgraph.codegen.plan.steps import CudaPlan, DecodeRewrite, KernelStep
from optgraph.codegen.rank_programs import lower_ranks
from optgraph.ir.graph import Graph
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from tests.codegen.test_residual_adds import llama
from tests.support.decode_loop_graph import loop_step_graph

ROOT = Path(__file__).resolve().parents[2]


@contextmanager
def switched(*changes: tuple[object, str, bool]) -> Iterator[None]:
    """Each (module, setting, value) set inside the block."""
    saved = [(m, n, getattr(m, n)) for m, n, _ in changes]
    try:
        for module, name, value in changes:
            setattr(module, name, value)
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


@pytest.fixture(scope="module")
def step() -> Graph:
    """A one-layer decode step (f16) with an argmax and its cast at the end, planned."""
    return run_pipeline(loop_step_graph("f16", layers=1), DEFAULT_PIPELINE)


def _in_place(graph: Graph) -> CudaPlan:
    return lower_cuda(graph, in_place=in_place_candidates(graph))


def _taken(plan: CudaPlan, rewrite: str) -> dict[str, DecodeRewrite]:
    return {r.node: r for r in plan.rewrites if r.rewrite == rewrite}


def _launched(plan: CudaPlan) -> dict[str, str]:
    """{node: the kernel its launch runs before merging} for every launched node."""
    found = {s.node: s.kernel for s in plan.steps if isinstance(s, KernelStep) and not s.nodes}
    for merge in plan.merges:
        found.update(zip(merge.nodes, merge.kernels, strict=True))
    return found


def _text(plan: CudaPlan) -> str:
    return "\n".join(plan_outline(plan))


def test_qkv_folds_name_the_rope_and_the_cache_writes(step: Graph) -> None:
    plan = _in_place(step)
    taken = _taken(plan, "qkv_folds")
    assert {n: r.nodes for n, r in taken.items()} == {
        "l0.q": ("l0.q_rot",),
        "l0.k": ("l0.k_rot", "l0.k_cache_new"),
        "l0.v": ("l0.v_cache_new",),
    }
    launched = _launched(plan)
    assert all(r.kernel == launched[n] for n, r in taken.items())
    assert "rope and the cache write in the product's store" in taken["l0.k"].note
    text = _text(plan)
    assert f"%l0.k in {taken['l0.k'].kernel} takes %l0.k_rot, %l0.k_cache_new:" in text
    assert "also computes %l0.q_rot, %l0.k_rot, %l0.k_cache_new, %l0.v_cache_new" in text
    with switched((qkv_folds, "FOLD_QKV", False)):
        off = _in_place(step)
    assert not _taken(off, "qkv_folds") and "qkv_folds" not in _text(off)


def test_rope_cache_writes_show_where_the_products_do_not_fold(step: Graph) -> None:
    assert not _taken(_in_place(step), "rope_cache_writes")  # qkv_folds took the pair
    with switched((qkv_folds, "FOLD_QKV", False)):
        plan = _in_place(step)
    (taken,) = _taken(plan, "rope_cache_writes").values()
    assert (taken.node, taken.nodes) == ("l0.k_rot", ("l0.k_cache_new",))
    assert taken.kernel == _launched(plan)["l0.k_rot"] and taken.kernel.startswith("og_rope_kv_")
    assert "%l0.k_rot in og_rope_kv_" in _text(plan)
    both = ((qkv_folds, "FOLD_QKV", False), (rope_cache_writes, "ROPE_CACHE_WRITES", False))
    with switched(*both):
        off = _in_place(step)
    assert not _taken(off, "rope_cache_writes") and "rope_cache_writes" not in _text(off)
    assert {r.rewrite for r in off.rewrites} == {"early_cache_reads"}


def test_early_cache_reads_name_the_cache_writes(step: Graph) -> None:
    plan = _in_place(step)
    (taken,) = _taken(plan, "early_cache_reads").values()
    assert (taken.node, taken.nodes, taken.absorbs) == (
        "l0.attn",
        ("l0.k_cache_new", "l0.v_cache_new"),
        False,
    )
    assert taken.kernel == _launched(plan)["l0.attn"]
    line = (
        f"  early_cache_reads  %l0.attn in {taken.kernel}: loads the rows of %l0.k_cache_new,"
        " %l0.v_cache_new but [%pos, %pos + 1) before the PDL wait"
    )
    assert line in _text(plan).splitlines()
    assert not _taken(lower_cuda(step), "early_cache_reads")  # caches not in place
    with switched((early_cache_reads, "EARLY_CACHE_READS", False)):
        off = _in_place(step)
    assert not _taken(off, "early_cache_reads") and "early_cache_reads" not in _text(off)


def test_argmax_folds_each_setting(step: Graph) -> None:
    assert not _taken(_in_place(step), "argmax_folds")  # both settings off by default
    with switched((argmax_folds, "ARGMAX_CAST", True)):
        cast = _in_place(step)
    assert [(r.node, r.nodes) for r in _taken(cast, "argmax_folds").values()] == [
        ("next_token64", ("next_token",))
    ]
    assert "%next_token64 in og_argmax_" in _text(cast)
    with switched((argmax_folds, "ARGMAX_IN_PRODUCT", True)):
        product = _in_place(step)
    (taken,) = _taken(product, "argmax_folds").values()
    assert (taken.node, taken.nodes) == ("logits", ("next_token64", "next_token"))
    assert taken.kernel == _launched(product)["logits"]
    assert "the product's last block finds the argmax, stored as %next_token (i32)" in taken.note


def test_gathered_rows_one_record_a_reader(step: Graph) -> None:
    assert not _taken(_in_place(step), "gathered_rows")
    with switched((gathered_rows, "GATHER_ROWS", True)):
        plan = _in_place(step)
    taken = _taken(plan, "gathered_rows")
    readers = {step.nodes[u].name for u in step.users()["h0"]}
    assert set(taken) == readers and len(readers) > 1
    launched = _launched(plan)
    assert "h0" not in launched
    for node, record in taken.items():
        assert record.nodes == ("h0",) and record.kernel == launched[node]
    # the q product's fold names the kernel after the gather renamed it
    assert _taken(plan, "qkv_folds")["l0.q"].kernel == taken["l0.q"].kernel
    assert "reads %h0 as the rows of %embed at %tokens" in _text(plan)


def test_residual_adds_are_offered_and_listed() -> None:
    source = llama(layers=1)
    ranks = lower_ranks(og.compile(source, "tensor-parallel{ways=2},default", "cpu").graph)
    for program in ranks.ranks:
        plan = program.main.plan
        taken = _taken(plan, "residual_adds")
        assert set(taken) == {"l0.attn_out", "l0.mlp_out"}
        adds = {n.name: n for n in program.graph.nodes if n.op == "add"}
        for record in taken.values():
            (add,) = record.nodes
            assert record.node in adds[add].operands and not record.absorbs
        assert "residual_adds      %l0.attn_out: offers %" in _text(plan)
    rank, relower = ranks.ranks[0], ranks.relowers[0]
    text = lowered_plan_text(rank, relower)
    assert "== in place" in text  # each rank's caches: its in-place plan offers the adds too
    assert text.count("residual_adds      %l0.mlp_out: offers %") == 2


def test_merges_list_their_members() -> None:
    graph = run_pipeline(og.parse_file(ROOT / "examples" / "llama_decode.ir"), "default")
    plan = lower_cuda(graph)
    merged = [s for s in plan.steps if isinstance(s, KernelStep) and s.nodes]
    assert [(m.kernel, m.nodes) for m in plan.merges] == [(s.kernel, s.nodes) for s in merged]
    assert plan.merges[0].nodes == ("l0.q", "l0.k", "l0.v")
    assert all(len(m.kernels) == len(m.grids) == len(m.nodes) for m in plan.merges)
    assert not lower_cuda(graph, merge_launches=False).merges


def test_the_example_decode_step_in_place() -> None:
    """examples/llama_decode.ir as compile -o prints it: the in-place plan's rewrites section."""
    graph = run_pipeline(og.parse_file(ROOT / "examples" / "llama_decode.ir"), "default")
    text = lowered_plan_text(lower_for_cuda(graph))
    in_place = text[text.index("== in place") :]
    section = in_place[in_place.index("decode rewrites (8):") :].splitlines()[1:]
    assert [line.split()[:2] for line in section] == [
        [rewrite, f"%l{layer}.{node}"]
        for layer in (0, 1)
        for rewrite, node in (
            ("qkv_folds", "q"),
            ("qkv_folds", "k"),
            ("qkv_folds", "v"),
            ("early_cache_reads", "attn"),
        )
    ]


def test_the_header_names_the_switches_that_are_off() -> None:
    graph = run_pipeline(og.parse_file(ROOT / "examples" / "mlp.ir"), "default")
    program = lower_for_cuda(graph)
    off = [f"{m.__name__.rsplit('.', 1)[-1]}.{n}" for m, n in SWITCHES if not getattr(m, n)]
    assert f"decode rewrites switched off: {', '.join(off) or 'none'}" in lowered_plan_text(program)
    with switched((qkv_folds, "FOLD_QKV", False)):
        assert "qkv_folds.FOLD_QKV" in lowered_plan_text(program)
    unmerged = replace(program, options=LoweringOptions(merge_launches=False))
    assert "(one launch per kernel)" in lowered_plan_text(unmerged).splitlines()[0]
    assert "== in place" not in lowered_plan_text(program)  # no output may be in place
