"""bench_split.py: the dry run's placement and sync counts on the CPU, and the three variants end
to end on the fake CuPy (tests/support/fake_cupy.py: kernels compute nothing, host functions run
where the fake stream is, so only the plumbing, the counts and the table are checked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from optgraph.analysis.host_syncs import host_device_waits, min_host_device_syncs
from tests.benchmarks.test_gpu_benchmarks_on_fake_cupy import benchmarks  # noqa: F401
from tests.support.fake_cupy import Event as FakeEvent

TINY = [
    "--layers", "3", "--hidden", "64", "--heads", "4", "--kv-heads", "2", "--experts", "8",
    "--expert-ffn", "32", "--shared-ffn", "64", "--vocab", "128", "--cache-len", "16",
]  # fmt: skip


def test_dry_run_syncs_at_the_placements_minimum(
    benchmarks: Any,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
) -> None:
    bench = benchmarks("bench_split")
    assert bench.main([*TINY, "--dry-run"]) == 0
    out = capsys.readouterr().out
    assert "split 6 in the lowered program (6 in the IR; the placement's minimum is 6)" in out
    assert "syncs at the minimum: yes" in out


def test_the_routed_experts_run_on_the_cpu_and_nothing_else(benchmarks: Any) -> None:  # noqa: F811
    bench = benchmarks("bench_split")
    args = bench.build_parser().parse_args(TINY)
    _, split, gpu = benchmarks("harness.split_plan").plan_graphs(args)
    cpu = {
        n.name.split(".", 1)[1]
        for n in split.nodes
        if n.ann.backend == "cpu" and not n.is_event and n.name.startswith("l")
    }
    assert {"w_gate", "w_up", "w_down", "e_up", "e_mid", "e_down"} <= cpu
    assert not {"attn", "logits", "probs", "s_up", "out"} & cpu
    # Per layer one wait each way: the host for the router's ids, the copy stream for the host.
    assert host_device_waits(split) == min_host_device_syncs(split) == 2 * 3
    assert host_device_waits(gpu) == 0 and min_host_device_syncs(gpu) == 0


@pytest.mark.parametrize("caches", [[], ["--host-caches"]])
def test_every_variant_on_fake_cupy(
    benchmarks: Any,  # noqa: F811
    tmp_path: Path,
    caches: list[str],
) -> None:
    bench = benchmarks("bench_split")
    out = tmp_path / "split.md"
    argv = [*TINY, *caches, "--iters", "2", "--repeats", "1", "--warmup", "3", "--in-process"]
    assert bench.main([*argv, "--markdown", str(out), "--json", str(tmp_path / "s.json")]) == 0
    import json

    result = json.loads((tmp_path / "s.json").read_text())
    facts, rows = result["facts"], result["rows"]
    assert set(rows) == {"gpu", "calling-thread", "graph", "graph-per-node", "sync"}
    assert facts["plan_syncs"] == facts["min_syncs"] == 6
    # Every split way synchronizes at the placement's minimum; the sync way counted what its
    # plan says it makes, and more.
    assert [rows[n]["syncs"] for n in ("calling-thread", "graph", "graph-per-node")] == [6] * 3
    assert rows["sync"]["syncs"] == facts["sync_way_syncs"] > facts["min_syncs"] + 1
    # The same kernels (none compute here) and the same CPU functions in every split way.
    logits = {n: rows[n]["logits"] for n in ("calling-thread", "graph", "graph-per-node", "sync")}
    assert all(v == logits["sync"] for v in logits.values())
    text = out.read_text()
    assert "| split, CPU nodes on the calling thread (optgraph's default) |" in text
    assert "6 + 1 (placement's minimum 6 + 1)" in text
    assert "split ways' syncs at the placement's minimum: yes" in text
    # The calling-thread variant's overlap, from 5 more steps piece by piece: on the fake every
    # GPU part reads 10 µs from the step's start, so no GPU time and no overlap; the line under
    # the table prints the row's figures.
    from benchmarks.harness.split_timeline import OVERLAP_KEYS, overlap_line

    overlap = rows["calling-thread"]["overlap"]
    assert set(overlap) == set(OVERLAP_KEYS) and rows["calling-thread"]["overlap_steps"] == 5
    assert "overlap" not in rows["sync"] and "overlap" not in rows["graph"]
    assert overlap["gpu_busy"] == overlap["overlap"] == 0.0
    assert 0 < overlap["cpu_nodes"] == overlap["gpu_idle_cpu_nodes"] < overlap["step"]
    assert "\ncalling-thread: " + overlap_line(overlap, 5) + "\n" in text


def test_several_processes_a_variant_give_the_median_and_range(
    benchmarks: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    bench = benchmarks("bench_split")
    out, js = tmp_path / "split.md", tmp_path / "s.json"
    argv = [*TINY, "--iters", "2", "--repeats", "1", "--warmup", "3", "--in-process"]
    argv += ["--variants", "calling-thread,sync", "--processes", "3"]
    assert bench.main([*argv, "--markdown", str(out), "--json", str(js)]) == 0
    import json

    rows = json.loads(js.read_text())["rows"]
    assert [len(rows[n]["ms"]) for n in ("calling-thread", "sync")] == [3, 3]  # one a run
    text = out.read_text()
    assert "3 processes a variant (orders rotated)" in text
    cell = text.split("| split, CPU nodes on the calling thread (optgraph's default) | ")[1]
    low, high = min(rows["calling-thread"]["ms"]), max(rows["calling-thread"]["ms"])
    assert cell.split(" |")[0].endswith(f"({low:.3f}–{high:.3f})")
    # A run that fails makes the variant's row an error, not a median of the others.
    failed = bench.combined([{"ms": [1.0]}, {"variant": "sync", "error": "exit 1"}])
    assert failed == {"variant": "sync", "error": "exit 1"}
    assert bench.combined([{"ms": [1.0, 3.0]}, {"ms": [5.0]}])["ms"] == [2.0, 5.0]
    assert bench.combined([{"ms": [1.0, 3.0]}])["ms"] == [1.0, 3.0]  # one process: its repeats


def test_the_diagnosis_runs_every_way_on_fake_cupy(
    benchmarks: Any,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from optgraph.runtime.cuda.offload import HostFunction

    monkeypatch.setattr(HostFunction, "_call", HostFunction._call)  # the probe undone after
    diagnose = benchmarks("split_diagnose")
    assert diagnose.main([*TINY, "--steps", "2", "--budget", "60"]) == 0
    out = capsys.readouterr().out
    for mode in ("graph-per-node", "graph", "calling-thread"):
        assert f"== {mode}: " in out
    # Every CPU node of a layer is probed in every way (6 per layer, 3 layers), each with its
    # time inside the run and alone in the main thread and in a fresh thread.
    assert out.count("18 CPU node calls per step on 1 thread(s)") == 3
    assert "l0.e_down" in out and "main thread at entry" in out
    assert "20 x program.run (calling-thread): " in out and "20 x program.run (graph): " in out
    assert "thread, main in CUDA wait" in out
    calling_thread = out[out.index("== calling-thread: ") : out.index("== does the main")]
    # The calling thread's CPU nodes were found for the alone timings too.
    main_alone = float(calling_thread.split("main_alone ")[1].split(",")[0])
    assert "l2.e_down" in calling_thread and main_alone > 0
    # The step piece by piece: every GPU part timed by its events, every host wait and CPU node.
    timeline = out[out.index("== one calling-thread step, piece by piece") : out.index("== does")]
    rows = timeline.splitlines()[2:-1]
    parts = [r for r in rows if r.split()[:2] == ["GPU", "part"]]
    assert len(parts) >= 3 and all(len(r.split()) == 9 for r in parts)  # with GPU start and end
    assert sum(r.split()[:2] == ["host", "wait"] for r in rows) == 3  # one a layer
    assert sum(r.split()[0] == "cpu" for r in rows) == 18 and "cpu l2.e_down" in timeline
    assert "sums: GPU parts " in timeline
    # The overlap line: every GPU part reads 10 µs from the step's start on the fake, so no GPU
    # time, no overlap; the CPU nodes' time is their rows' sum (medians of 2 steps: means, so
    # the sum of the rows' medians is the median of the steps' sums), the GPU idle all the
    # time the host is not waiting.
    line = timeline.splitlines()[-1].strip()
    figures = _overlap_figures(line)
    assert figures["gpu_busy"] == figures["overlap"] == figures["overlap_of_cpu"] == 0.0
    assert figures["host_waiting_gpu_working"] == 0.0
    sums = timeline.split("sums: GPU parts ")[1].split("\n")[0]
    cpu_sum = float(sums.split("CPU nodes ")[1])
    wait_sum = float(sums.split("host waits ")[1].split(",")[0])
    assert figures["cpu_nodes"] == pytest.approx(cpu_sum, abs=0.2)
    assert figures["gpu_idle_cpu_nodes"] == figures["cpu_nodes"]
    end = float(timeline.split("step end ")[1].split()[0])
    assert figures["step"] == pytest.approx(end, abs=0.1)
    assert figures["gpu_idle_host_working"] == pytest.approx(end - wait_sum, abs=0.2)


OVERLAP_FIGURES = (
    "steps", "cpu_nodes", "overlap", "overlap_of_cpu", "overlap_of_step", "step", "gpu_busy",
    "gpu_idle_host_working", "gpu_idle_cpu_nodes", "host_waiting_gpu_working", "host_waits",
)  # fmt: skip


def _overlap_figures(line: str) -> dict[str, float]:
    """The figures of an overlap line (harness/split_timeline.py's `overlap_line`), in the order
    it prints them, shares as fractions."""
    import re

    assert line.startswith("overlap (µs a step, medians of "), line
    numbers = [float(x) for x in re.findall(r"\d+(?:\.\d+)?", line)]
    figures = dict(zip(OVERLAP_FIGURES, numbers, strict=True))
    figures["overlap_of_cpu"] /= 100
    figures["overlap_of_step"] /= 100
    return figures


def test_the_overlap_line_is_the_printed_timelines_overlap(
    benchmarks: Any,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """split_diagnose's timeline on the fake CuPy with a clock of its own: the host's clock
    ticks 10 µs a reading, every CUDA event reads that clock when recorded and the GPU runs
    each part 55 µs after the host launched it, so GPU parts overlap the host waits and CPU
    nodes after them. The overlap line (one step) equals `overlap` of the printed rows (each
    rounded to 0.1 µs)."""
    import argparse
    import types

    diagnose = benchmarks("split_diagnose")
    split_timeline = benchmarks("harness.split_timeline")
    split_sync_way = benchmarks("harness.split_sync_way")
    cp = __import__("cupy")
    now = [0.0]

    def clock() -> float:
        now[0] += 1e-5
        return now[0]

    class ClockEvent(FakeEvent):
        at = 0.0

        def record(self, stream: Any = None) -> None:
            self.at = clock()

    lag_ms = 0.055
    monkeypatch.setattr(split_timeline, "time", types.SimpleNamespace(perf_counter=clock))
    monkeypatch.setattr(cp.cuda, "Event", ClockEvent)
    monkeypatch.setattr(cp.cuda, "get_elapsed_time", lambda a, b: (b.at - a.at) * 1e3 + lag_ms)
    args = argparse.Namespace(**vars(benchmarks("bench_split").build_parser().parse_args(TINY)))
    args.steps = 1
    source, split, _ = diagnose.plan_graphs(args)
    inputs, out = split_sync_way.step_arrays(cp, source, args)
    parts = (split, split_sync_way.moe_weights(source), inputs, out)
    diagnose.timeline_section(cp, parts, args)
    text = capsys.readouterr().out
    lines = text.splitlines()
    gpu, cpu, waits = [], [], []
    for line in lines[2:]:
        words = line.split()
        if words[:2] == ["GPU", "part"]:
            gpu.append((float(words[-2]), float(words[-1])))
            # The GPU starts a part 55 µs after the host entered its launch (its event one
            # tick before the entry, the step's event one tick before the step's start).
            assert float(words[-2]) - float(words[-4]) == pytest.approx(55, abs=0.2)
        elif words[0] == "cpu":
            cpu.append((float(words[-2]), float(words[-1])))
        elif words[:2] == ["host", "wait"]:
            waits.append((float(words[-2]), float(words[-1])))
    assert len(gpu) >= 3 and len(cpu) == 18 and len(waits) == 3
    end = float(text.split("step end ")[1].split()[0])
    expected = split_timeline.overlap(gpu, cpu, waits, end)
    figures = _overlap_figures(lines[-1].strip())
    assert figures.pop("steps") == 1
    tolerance = 0.1 * (len(gpu) + len(cpu) + len(waits))  # 0.05 µs an end, two ends a piece
    for key, value in figures.items():
        if key.startswith("overlap_of"):
            assert value == pytest.approx(expected[key], abs=0.002), key
        else:
            assert value == pytest.approx(expected[key], abs=tolerance), key
    # The clock makes every figure deterministic: the GPU runs beside the host.
    assert expected["overlap"] > 0 and expected["host_waiting_gpu_working"] > 0
    assert expected["overlap"] + expected["gpu_idle_cpu_nodes"] == pytest.approx(
        expected["cpu_nodes"]
    )


@pytest.mark.parametrize(("dtype", "hidden", "ffn"), [("f32", 128, 32), ("q4_k", 256, 256)])
def test_the_imported_qwen3_moe_runs_its_experts_on_the_cpu_on_fake_cupy(
    benchmarks: Any,  # noqa: F811
    tmp_path: Path,
    dtype: str,
    hidden: int,
    ffn: int,
) -> None:
    """`--model qwen3moe`: transformers' model imported (its experts raised to moe), every moe
    on the CPU with its whole stacks on the host (f32, or stored as q4_k blocks), at the
    placement's fewest syncs, and the variants run end to end."""
    pytest.importorskip("transformers", reason="the imported model needs transformers")
    bench = benchmarks("bench_split")
    imported = [
        "--model", "qwen3moe", "--layers", "2", "--qwen3moe-hidden", str(hidden),
        "--qwen3moe-experts", "8", "--qwen3moe-expert-ffn", str(ffn),
        "--qwen3moe-expert-dtype", dtype, "--vocab", "64", "--cache-len", "16",
    ]  # fmt: skip
    args = bench.build_parser().parse_args(imported)
    _, split, gpu = benchmarks("harness.split_plan").plan_graphs(args)
    moes = [n for n in split.nodes if n.op == "moe"]
    assert len(moes) == 2 and all(n.ann.backend == "cpu" for n in moes)
    host = {w.name: w.type.dtype for w in split.weights if w.placement == "host"}
    assert set(host) == {o for n in moes for o in n.operands[2:]}
    assert set(host.values()) == {dtype}
    assert host_device_waits(split) == min_host_device_syncs(split) == 2 * 2
    assert not any(n.ann.backend == "cpu" for n in gpu.nodes)
    argv = [*imported, "--variants", "gpu,calling-thread,sync", "--in-process"]
    argv += ["--iters", "2", "--repeats", "1", "--warmup", "2"]
    assert bench.main([*argv, "--json", str(tmp_path / "s.json")]) == 0
    import json

    rows = json.loads((tmp_path / "s.json").read_text())["rows"]
    assert rows["calling-thread"]["syncs"] == 4
    assert rows["sync"]["logits"] == rows["calling-thread"]["logits"]


def test_the_imported_qwen3_moe_with_some_experts_of_each_layer_on_the_cpu(
    benchmarks: Any,  # noqa: F811
    tmp_path: Path,
) -> None:
    """`--qwen3moe-cpu-experts 3`: each moe cut into a GPU part and a CPU part over its last 3
    experts, whose pieces the benchmark cuts from the imported stacks; the variants agree."""
    pytest.importorskip("transformers", reason="the imported model needs transformers")
    bench = benchmarks("bench_split")
    imported = [
        "--model", "qwen3moe", "--layers", "2", "--qwen3moe-hidden", "128",
        "--qwen3moe-experts", "8", "--qwen3moe-expert-ffn", "32", "--qwen3moe-cpu-experts", "3",
        "--vocab", "64", "--cache-len", "16",
    ]  # fmt: skip
    args = bench.build_parser().parse_args(imported)
    _, split, _ = benchmarks("harness.split_plan").plan_graphs(args)
    parts = [n for n in split.nodes if n.op == "moe"]
    assert sorted(str(n.ann.backend) for n in parts) == ["cpu", "cpu", "cuda", "cuda"]
    argv = [*imported, "--variants", "gpu,calling-thread,sync", "--in-process"]
    argv += ["--iters", "2", "--repeats", "1", "--warmup", "2"]
    assert bench.main([*argv, "--json", str(tmp_path / "s.json")]) == 0
    import json

    rows = json.loads((tmp_path / "s.json").read_text())["rows"]
    assert rows["sync"]["logits"] == rows["calling-thread"]["logits"]


def test_the_diagnosis_of_the_imported_qwen3_moe_reports_its_overlap(
    benchmarks: Any,  # noqa: F811
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """split_diagnose.py takes bench_split.py's `--model qwen3moe` options: the imported model's
    moe nodes are its CPU nodes, one a layer, in the timeline and its overlap line."""
    pytest.importorskip("transformers", reason="the imported model needs transformers")
    from optgraph.runtime.cuda.offload import HostFunction

    monkeypatch.setattr(HostFunction, "_call", HostFunction._call)  # the probe undone after
    diagnose = benchmarks("split_diagnose")
    imported = [
        "--model", "qwen3moe", "--layers", "2", "--qwen3moe-hidden", "128",
        "--qwen3moe-experts", "8", "--qwen3moe-expert-ffn", "32", "--vocab", "64",
        "--cache-len", "16",
    ]  # fmt: skip
    assert diagnose.main([*imported, "--modes", "calling-thread", "--steps", "2"]) == 0
    out = capsys.readouterr().out
    timeline = out[out.index("== one calling-thread step, piece by piece") : out.index("== does")]
    rows = timeline.splitlines()[2:]
    cpu = [r.split()[1] for r in rows if r.split()[0] == "cpu"]
    assert len(cpu) == 2 and sum(r.split()[:2] == ["host", "wait"] for r in rows) == 2
    figures = _overlap_figures(rows[-1].strip())
    assert figures["steps"] == 2 and figures["cpu_nodes"] > 0
    assert figures["gpu_idle_cpu_nodes"] == figures["cpu_nodes"]  # the fake: no GPU time
