"""The fork cost model of assign-streams (optgraph/analysis/fork_cost.py): the gain and cost of one
fork, the merged-launch runs of one stream, which kernels may share a launch, a branch's figures
on a decode layer, and the pass options that set the constants."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

import optgraph as og
from optgraph.analysis.chain_cover import path_cover
from optgraph.analysis.fork_cost import (
    RUN_MEMBERS,
    BranchCosts,
    BranchFigures,
    ForkModel,
    fork_gain,
    fork_pays,
    kernel_times,
    launch_runs,
    may_share_launch,
)
from optgraph.analysis.schedule_estimate import data_predecessors
from optgraph.errors import PipelineError
from optgraph.ir.op_costs import H100, H200
from optgraph.passes.assign_streams import AssignStreamsPass
from optgraph.passes.manager import make_pass, run_pipeline

US = 1e-6
MODEL = ForkModel(kernel_s=4 * US, wait_s=4 * US, spacing_s=2 * US)
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "assign-streams"


def branch(**figures: float) -> BranchFigures:
    """A branch of `launches` kernels of 4 us (no roofline to speak of) beside a sibling path of
    `sibling_launches` such kernels, inline as on its own stream, one wait in and one out."""
    launches = int(figures.pop("launches", 3))
    sibling = int(figures.pop("sibling_launches", 3))
    base = {
        "own_s": 4 * US * launches,
        "inline_s": 4 * US * launches,
        "roof_s": 0.0,
        "sibling_s": 4 * US * sibling,
        "sibling_roof_s": 0.0,
        "waits": 2,
    }
    base.update(figures)
    return BranchFigures(
        base["own_s"],
        base["inline_s"],
        base["roof_s"],
        launches,
        base["sibling_s"],
        base["sibling_roof_s"],
        sibling,
        int(base["waits"]),
    )


def test_gain_is_the_overlap_of_latency_bound_branches() -> None:
    # three 4 us kernels beside three: one stream 24 us, two streams 12 us
    b = branch()
    assert fork_gain(b, MODEL) == pytest.approx(12 * US)
    assert fork_pays(b, MODEL)  # 12 us > two waits of 4 us
    # a shorter sibling bounds the overlap
    assert fork_gain(branch(sibling_launches=1), MODEL) == pytest.approx(4 * US)


def test_merged_launches_leave_a_single_kernel_nothing_to_gain() -> None:
    # one small product whose launch merges with its siblings' on one stream adds only its
    # roofline there: a fork cannot save more than that
    b = branch(launches=1, inline_s=0.2 * US, roof_s=0.2 * US)
    assert fork_gain(b, MODEL) == pytest.approx(0.2 * US)
    assert not fork_pays(b, MODEL)
    # without merging it would save its whole launch, still less than its two waits
    unmerged = branch(launches=1)
    assert fork_gain(unmerged, MODEL) == pytest.approx(4 * US)
    assert not fork_pays(unmerged, MODEL)


def test_device_bound_branches_gain_nothing() -> None:
    # two 20 us bandwidth-bound kernels: their rooflines add up on one memory system
    b = branch(
        launches=1,
        sibling_launches=1,
        own_s=20 * US,
        inline_s=20 * US,
        roof_s=20 * US,
        sibling_s=20 * US,
        sibling_roof_s=20 * US,
    )
    assert fork_gain(b, MODEL) == pytest.approx(0.0)
    assert not fork_pays(b, MODEL)


def test_launch_spacing_bounds_the_overlap_of_tiny_kernels() -> None:
    # 4 + 4 kernels of 4 us: two streams need 16 us, but the device starts one every 3 us: 24 us
    spaced = ForkModel(kernel_s=4 * US, wait_s=1 * US, spacing_s=3 * US)
    b = branch(launches=4, sibling_launches=4)
    assert fork_gain(b, MODEL) == pytest.approx(16 * US)
    assert fork_gain(b, spaced) == pytest.approx(8 * US)


def test_the_fork_must_beat_its_waits() -> None:
    b = branch(launches=2, sibling_launches=2)  # gains 8 us
    assert not fork_pays(b, MODEL)  # two waits of 4 us: not more than 8
    assert fork_pays(branch(launches=2, sibling_launches=2, waits=1), MODEL)
    assert fork_pays(b, ForkModel(4 * US, 3.9 * US, 2 * US))


def test_no_sibling_means_no_gain() -> None:
    alone = branch(sibling_launches=0, sibling_s=0.0)
    assert fork_gain(alone, MODEL) == pytest.approx(0.0)


def test_runs_merge_consecutive_independent_kernels() -> None:
    # 0 = x; 1, 2, 3 read x (q, k, v); 4 is a view of 1; 5 reads the view; 6 reads 2 and 3
    preds = [[], [0], [0], [0], [1], [4], [2, 3]]
    kernel = [True, True, True, True, False, True, True]
    runs = launch_runs(preds, kernel, [True] * 7)
    assert runs == [0, 1, 1, 1, -1, 2, 2]
    # a kernel that launches alone (a library call: 2) has a run of its own and closes the open
    # one; 5 (after a view) joins 3's run, 6 reads 3 and opens another
    alone = [True, True, False, True, True, True, True]
    assert launch_runs(preds, kernel, alone) == [0, 1, 2, 3, -1, 3, 4]


def test_runs_hold_at_most_the_merge_limit() -> None:
    from optgraph.codegen.plan.merge_launches import MAX_MEMBERS

    assert RUN_MEMBERS == MAX_MEMBERS  # the model's runs are the code generator's groups
    n = RUN_MEMBERS + 3
    runs = launch_runs([[]] * n, [True] * n, [True] * n)
    assert runs == [0] * RUN_MEMBERS + [1] * 3


def test_which_kernels_may_share_a_launch() -> None:
    g = og.parse(
        """graph g {
          input %row : f16[1,512]
          input %rows : f16[4,512]
          input %img : f16[1,8,16,16]
          weight %w : f16[512,512]
          weight %k : f16[8,8,3,3]
          %a = matmul(%row, %w) : f16[1,512]
          %b = matmul(%rows, %w) : f16[4,512]
          %c = conv2d(%img, %k) {padding = [1, 1]} : f16[1,8,16,16]
          %d = silu(%rows) : f16[4,512]
          output %a, %b, %c, %d
        }"""
    )
    shares = {n.name: may_share_launch(n) for n in g.nodes}
    assert shares == {"a": True, "b": False, "c": False, "d": True}
    fused = run_pipeline(og.parse(_decode()), "fuse")
    regions = [n for n in fused.nodes if n.op == "fused"]
    assert regions and all(may_share_launch(n) for n in regions)  # one-row product regions


def _decode() -> str:
    text = (FIXTURES / "cost_decode_products_stay.ir").read_text()
    return text.split("# EXPECT:")[0]


def _figures(source: str, names: list[str], model: ForkModel) -> BranchFigures:
    graph = og.parse(source)
    preds = data_predecessors(graph)
    times = kernel_times(graph, H100, model)
    n = len(preds)
    sinks = [v for v in range(n) if not any(v in ps for ps in preds)]
    outputs = [i for i, node in enumerate(graph.nodes) if node.name in graph.output_names()]
    cover = path_cover([*preds, sorted(set(sinks) | set(outputs))])
    index = {node.name: i for i, node in enumerate(graph.nodes)}
    return BranchCosts(cover, preds, times, model).branch(sorted(index[m] for m in names))


def test_decode_branches_on_the_h100() -> None:
    model = AssignStreamsPass().fork_model()
    q = _figures(_decode(), ["q", "q4", "q_rot", "q_t"], model)
    assert q.launches == 2 and q.waits == 2
    assert q.inline_s == pytest.approx(0.0, abs=1e-9)  # merged with k/v, then with rope(k)
    assert q.own_s == pytest.approx(2 * model.kernel_s)
    assert not fork_pays(q, model)
    no_merge = dataclasses.replace(model, merged_launches=False)
    unmerged = _figures(_decode(), ["q", "q4", "q_rot", "q_t"], no_merge)
    assert unmerged.inline_s == pytest.approx(unmerged.own_s)


def test_one_stream_result_is_the_given_order() -> None:
    graph = og.parse(_decode())
    assigned = AssignStreamsPass().run(graph)
    single = AssignStreamsPass(max_streams=1).run(graph)
    assert assigned == single


def test_options_set_the_constants() -> None:
    assert AssignStreamsPass().fork_model() == ForkModel(
        H100.kernel_latency, H100.wait_latency, H100.kernel_spacing
    )
    assert AssignStreamsPass(device="h200").fork_model().wait_s == H200.wait_latency
    p = make_pass(
        "assign-streams",
        {"wait-us": "2.5", "kernel-us": "3", "spacing-us": "1", "merged-launches": "false"},
    )
    assert isinstance(p, AssignStreamsPass)
    assert p.fork_model() == ForkModel(3 * US, 2.5 * US, 1 * US, False)
    with pytest.raises(PipelineError, match="wait-us"):
        make_pass("assign-streams", {"wait-us": "soon"})
