"""bench_split.py: the dry run's placement and sync counts on the CPU, and the three variants end
to end on the fake CuPy (tests/support/fake_cupy.py: kernels compute nothing, host functions run
where the fake stream is, so only the plumbing, the counts and the table are checked)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from optgraph.analysis.host_syncs import host_device_waits, min_host_device_syncs
from tests.benchmarks.test_gpu_benchmarks_on_fake_cupy import benchmarks  # noqa: F401

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
