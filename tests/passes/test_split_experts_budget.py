"""split-experts{budget=SIZE}: the smallest cpu-moe whose step fits the budget, measured
independently (each placement planned by plan-memory, its peak read by `device_memory`); a budget
holding everything changes nothing; one that nothing fits is a located error with the smallest
footprint; the planned programs (f32 and q4_k stacks) equal the reference in random stream
interleavings; `--vram-budget` puts split-experts and split-backends before the weight streaming
for a graph with moe nodes, and `optgraph compile/run` print the choice."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import optgraph as og
from optgraph.analysis.segments import device_memory, format_size
from optgraph.cli.main import main
from optgraph.errors import OptGraphError
from optgraph.passes.manager import run_pipeline, with_vram_budget
from optgraph.passes.split_backends import SplitBackendsPass
from optgraph.passes.split_experts import CpuMoeChoice, ExpertBudgetError, SplitExpertsPass
from tests.passes.test_split_experts import (
    PLAN,
    _assert_planned_runs_equal_reference,
    moe_model,
)


def _peaks(source: og.Graph) -> list[int]:
    """Device bytes with the first n moe layers' experts on the host, n = 0..layers: the
    placement made by cpu-moe=n, planned on one stream by plan-memory."""
    layers = sum(n.op == "moe" for n in source.nodes)
    peaks = []
    for n in range(layers + 1):
        planned = run_pipeline(
            source, f"split-experts{{cpu-moe={n}}},analyze-lifetimes,plan-memory"
        )
        peaks.append(device_memory(planned).peak)
    return peaks


def _chosen(source: og.Graph, budget: int, options: str = "") -> tuple[og.Graph, str]:
    """The graph split-experts{budget} returns and its one note."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = run_pipeline(source, f"split-experts{{budget={budget}{options}}}")
    notes = [str(w.message) for w in caught if issubclass(w.category, CpuMoeChoice)]
    assert len(notes) == 1
    return out, notes[0]


def _host_layers(graph: og.Graph) -> list[int]:
    """The layers (of moe_model) whose three stacks are all on the host."""
    host = {w.name for w in graph.weights if w.placement == "host"}
    layers = {int(name.split(".")[0][1:]) for name in host}
    for i in layers:
        assert {f"l{i}.gate", f"l{i}.up", f"l{i}.down"} <= host
    return sorted(layers)


@pytest.mark.parametrize("stacks", [("f32", "f32", "f32"), ("q4_k", "q4_k", "q8_0")])
def test_the_budget_picks_the_smallest_cpu_moe_that_fits(stacks: tuple[str, str, str]) -> None:
    source = moe_model(layers=4, tokens=2, stacks=stacks, hidden=256)
    peaks = _peaks(source)
    assert peaks == sorted(peaks, reverse=True) and len(set(peaks)) == len(peaks)
    for n, peak in enumerate(peaks):
        out, note = _chosen(source, peak)  # exactly the peak fits
        assert _host_layers(out) == list(range(n))
        assert f"(cpu-moe={n}" in note and f"needs {peak:,} bytes" in note
        if n + 1 < len(peaks):
            out, _ = _chosen(source, peak - 1)  # a byte less: one more layer
            assert _host_layers(out) == list(range(n + 1))
    # whole layers only: no node changes, no piece is cut
    assert [n.name for n in out.nodes] == [n.name for n in source.nodes]
    assert {w.name for w in out.weights} == {w.name for w in source.weights}


@settings(max_examples=10, deadline=None)
@given(
    layers=st.integers(1, 4),
    tokens=st.integers(1, 40),
    dtype=st.sampled_from(["f32", "f16", "q8_0"]),
    fraction=st.floats(0.0, 1.2),
)
def test_any_budget_gets_the_smallest_layers_that_fit(
    layers: int, tokens: int, dtype: str, fraction: float
) -> None:
    """Random models and budgets: the chosen N's planned peak fits and N - 1's does not; below the
    least footprint an error; a moe of 32 tokens or more is never placed."""
    source = moe_model(layers=layers, tokens=tokens, stacks=(dtype, dtype, dtype))
    peaks = _peaks(source)
    budget = int(peaks[-1] + fraction * (peaks[0] - peaks[-1]))
    placeable = layers if tokens < 32 else 0
    if budget < peaks[placeable]:
        with pytest.raises(ExpertBudgetError, match=f"still needs {peaks[placeable]:,} bytes"):
            run_pipeline(source, f"split-experts{{budget={budget}}}")
        return
    n = len(_host_layers(_chosen(source, budget)[0]))
    assert n <= placeable and peaks[n] <= budget and (n == 0 or peaks[n - 1] > budget)


def test_a_budget_that_holds_every_expert_changes_nothing() -> None:
    source = moe_model(layers=2)
    out, note = _chosen(source, _peaks(source)[0])
    assert og.print_graph(out) == og.print_graph(source)
    assert "every expert on the device (cpu-moe=0)" in note


def test_a_graph_without_moe_is_returned_as_it_is() -> None:
    source = og.parse(
        "graph g {\n  input %x : f32[2,8]\n  weight %w : f32[8,8]\n"
        "  %y = matmul(%x, %w) : f32[2,8]\n  output %y\n}\n"
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no note either
        assert run_pipeline(source, "split-experts{budget=1KiB}") is source


def test_an_impossible_budget_names_the_smallest_footprint() -> None:
    source = moe_model(layers=3, tokens=2)
    least = _peaks(source)[-1]
    out, _ = _chosen(source, least)
    assert _host_layers(out) == [0, 1, 2]
    with pytest.raises(ExpertBudgetError) as err:
        run_pipeline(source, f"split-experts{{budget={least - 1}}}")
    message = str(err.value)
    assert f"budget {format_size(least - 1)} is too small" in message
    assert f"still needs {least:,} bytes" in message
    span = err.value.span
    first_moe = next(n for n in source.nodes if n.op == "moe")
    assert span is not None and first_moe.span is not None
    assert (span.line, span.col) == (first_moe.span.line, first_moe.span.col)


def test_budget_is_not_given_with_a_count() -> None:
    with pytest.raises(OptGraphError, match="give budget, or cpu-moe/cpu-experts, not both"):
        run_pipeline(moe_model(layers=1), "split-experts{budget=1GiB,cpu-moe=1}")
    with pytest.raises(OptGraphError, match="cannot read the size '3 bags'"):
        run_pipeline(moe_model(layers=1), "split-experts{budget=3 bags}")


@pytest.mark.parametrize(
    ("tokens", "stacks", "hidden", "layers_on_host"),
    [(1, ("f32", "f32", "f32"), 64, 1), (3, ("q4_k", "q4_k", "q8_0"), 256, 2)],
)
def test_the_chosen_placement_runs_equal_to_the_reference_in_any_interleaving(
    tokens: int, stacks: tuple[str, str, str], hidden: int, layers_on_host: int
) -> None:
    """The budget of `layers_on_host` host layers: those layers' moe on the CPU, the others on
    the GPU; the planned program in random interleavings equals the reference (f32: bit for bit;
    the quantized stacks decode the same way on both backends: bit for bit too)."""
    source = moe_model(layers=3, tokens=tokens, stacks=stacks, hidden=hidden)
    budget = _peaks(source)[layers_on_host]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CpuMoeChoice)
        planned = run_pipeline(source, PLAN.format(options=f"budget={budget}"))
    placed = [n.ann.backend for n in planned.nodes if n.op == "moe"]
    assert placed == ["cpu"] * layers_on_host + ["cuda"] * (3 - layers_on_host)
    _assert_planned_runs_equal_reference(source, planned, True, (None, 0, 1, 2))


def test_vram_budget_puts_experts_on_the_cpu_before_streaming() -> None:
    assert with_vram_budget("verify,fuse,assign-streams,insert-sync", "8GiB", experts=True) == (
        "verify,fuse,split-experts{budget=8GiB,overflow=stream},assign-streams,split-backends,"
        "insert-sync,analyze-lifetimes,plan-memory,plan-prefetch{budget=8GiB}"
    )
    # no assign-streams: split-backends (which assigns streams too) right after split-experts
    assert with_vram_budget("dce", "1GiB", experts=True) == (
        "dce,split-experts{budget=1GiB,overflow=stream},split-backends,analyze-lifetimes,"
        "plan-memory,plan-prefetch{budget=1GiB}"
    )
    # split-backends' gpu-min-batch is split-experts' too (which moe nodes run on the CPU)
    assert with_vram_budget(
        "split-backends{gpu-min-batch=8},insert-sync", "1GiB", experts=True
    ) == (
        "split-experts{budget=1GiB,gpu-min-batch=8,overflow=stream},"
        "split-backends{gpu-min-batch=8},insert-sync,analyze-lifetimes,plan-memory,"
        "plan-prefetch{budget=1GiB}"
    )
    # the pipeline places experts itself, or runs split-backends itself: not added twice
    chosen = "split-experts{cpu-moe=2},assign-streams,split-backends,insert-sync"
    assert with_vram_budget(chosen, "1GiB", experts=True) == (
        f"{chosen},analyze-lifetimes,plan-memory,plan-prefetch{{budget=1GiB}}"
    )
    # without moe nodes the pipeline only streams
    assert "split-experts" not in with_vram_budget("default", "1GiB")


def test_cli_compile_and_run_choose_the_layers_and_say_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = moe_model(layers=3, tokens=2)
    path = tmp_path / "moe.ir"
    path.write_text(og.print_graph(source))
    budget = _peaks(source)[2]
    assert main(["compile", str(path), "--vram-budget", str(budget), "-q"]) == 0
    out = capsys.readouterr().out
    rows = {
        line.split("│")[1].strip(): line.split("│")[2].strip()
        for line in out.splitlines()
        if line.count("│") == 3
    }
    assert rows["ops on cpu"] == "2"  # the moe of layers 0 and 1
    assert rows["races"] == "0"
    assert int(rows["peak device bytes"].replace(",", "")) <= budget
    assert "moe layers on the host (cpu-moe=2:" in " ".join(out.split())
    args = ["run", str(path), "--vram-budget", str(budget), "--device", "cpu", "--check", "-q"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "bit-identical" in out and "(cpu-moe=2:" in " ".join(out.split())
    # nothing fits: every layer on the host, and plan-prefetch (after planning) says why not
    assert main(["compile", str(path), "--vram-budget", "1KiB", "-q"]) == 1
    captured = capsys.readouterr()
    assert "error: plan-prefetch: budget 1.00 KiB is too small" in captured.err


def test_a_moe_split_backends_runs_on_the_gpu_is_never_placed() -> None:
    """At gpu-min-batch tokens or more split-backends copies host stacks in to run the moe on the
    GPU, which frees no device byte: the budget leaves such a moe (a prefill's) on the device."""
    assert SplitExpertsPass().gpu_min_batch == SplitBackendsPass().gpu_min_batch
    source = moe_model(layers=3, tokens=32)
    peaks = _peaks(source)
    with pytest.raises(ExpertBudgetError) as err:
        run_pipeline(source, f"split-experts{{budget={peaks[1]}}}")
    message = str(err.value)
    assert "with the experts of 0 of 3 moe layers on the host (from moe '%l0.m' on, 32 tokens" in (
        message
    )
    assert f"still needs {peaks[0]:,} bytes" in message
    out, note = _chosen(source, peaks[1], ",overflow=stream")
    assert _host_layers(out) == [] and "plan-prefetch streams the rest" in note
    out, _ = _chosen(source, peaks[1], ",gpu-min-batch=33")  # 32 tokens now run on the CPU
    assert _host_layers(out) == [0]


def test_overflow_stream_places_every_layer_and_leaves_the_rest() -> None:
    source = moe_model(layers=2)
    least = _peaks(source)[-1]
    out, note = _chosen(source, least - 1, ",overflow=stream")
    assert _host_layers(out) == [0, 1]
    assert f"needs {least:,} bytes" in note and "plan-prefetch streams the rest" in note
    with pytest.raises(OptGraphError, match="overflow must be error or stream, got 'maybe'"):
        run_pipeline(source, "split-experts{budget=1KiB,overflow=maybe}")


def test_vram_budget_on_a_prefill_streams_its_experts() -> None:
    """A 32-token step under --vram-budget's pipeline: no expert on the host (the moe runs on the
    GPU), plan-prefetch streams weights until the planned peak fits, and the program equals the
    reference in random interleavings."""
    source = moe_model(layers=3, tokens=32)
    budget = _peaks(source)[2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", CpuMoeChoice)
        planned = run_pipeline(source, with_vram_budget("default", str(budget), experts=True))
    assert not any(w.placement == "host" for w in planned.weights)
    assert {n.ann.backend for n in planned.nodes if n.op == "moe"} <= {None, "cuda"}
    assert any(n.op == "prefetch" for n in planned.nodes)
    assert device_memory(planned).peak <= budget
    _assert_planned_runs_equal_reference(source, planned, False, (None, 0, 1))


def _warn_both(notes_into: list[list[str]]) -> None:
    """A note and another warning, inside the CLI's collector."""
    from optgraph.cli.main import _placement_notes

    with _placement_notes() as notes:
        warnings.warn("the note", CpuMoeChoice, stacklevel=1)
        warnings.warn("a ring of 2 segments does not fit", RuntimeWarning, stacklevel=1)
    notes_into.append(notes)


def test_the_cli_keeps_the_notes_and_shows_other_warnings() -> None:
    collected: list[list[str]] = []
    with pytest.warns(RuntimeWarning, match="a ring of 2 segments does not fit") as shown:
        _warn_both(collected)
    assert collected == [["the note"]]
    assert [str(w.message) for w in shown] == ["a ring of 2 segments does not fit"]
