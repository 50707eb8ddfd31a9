"""`CompiledProgram.node_times()` and `optgraph run --node-times FILE.json`
(runtime/cuda/node_times.py) on the fake CuPy: every GPU node of the last run gets its time (the
fake's events always measure 0.25 ms), each node issued alone behind the spin kernel on its own
stream; the file is what `plan-prefetch{times=}` reads; asked before a run, on the cpu or with
--device cpu, a clear error."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.cli.main import main
from optgraph.codegen.plan.steps import EventStep
from optgraph.errors import OptGraphError
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.passes.plan_prefetch import load_times
from optgraph.runtime.cuda import node_times as node_times_module
from tests.support.fake_cupy import fake_cupy

GRAPH = """graph two_branches {
  input %x : f32[4,16]
  weight %w1 : f32[16,16]
  weight %w2 : f32[16,16]
  %a = matmul(%x, %w1) : f32[4,16]
  %b = matmul(%x, %w2) : f32[4,16]
  %c = relu(%a) : f32[4,16]
  %d = add(%c, %b) : f32[4,16]
  output %d
}
"""


def test_every_gpu_node_of_the_last_run_gets_its_time(monkeypatch: pytest.MonkeyPatch) -> None:
    rng = np.random.default_rng(0)
    x = {"x": rng.standard_normal((4, 16)).astype(np.float32)}
    with fake_cupy(monkeypatch) as fake:
        program = og.compile(og.parse(GRAPH), target="cuda")
        with pytest.raises(OptGraphError, match="run the program once first"):
            program.node_times()
        program.run(x)
        plan = program._cuda.plan()
        nodes = {s.node for s in plan.steps if not isinstance(s, EventStep) and s.node}
        fake.launches.clear()
        times = program.node_times(passes=2)
        assert set(times) == nodes and nodes
        assert all(t == pytest.approx(0.25e-3) for t in times.values())
        spins = [name for name in fake.launches if name == "og_node_times_spin"]
        assert len(spins) == 2 * len(nodes)  # one before each node, each pass
        program.close()


def test_the_cpu_target_has_no_node_times() -> None:
    program = og.compile(og.parse(GRAPH), target="cpu")
    with pytest.raises(OptGraphError, match="run the program on cuda first"):
        program.node_times()


def test_run_writes_the_file_plan_prefetch_reads(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    model = tmp_path / "m.ir"
    model.write_text(GRAPH)
    out = tmp_path / "times.json"
    with fake_cupy(monkeypatch):
        assert main(["run", str(model), "--device", "cuda", "--node-times", str(out), "-q"]) == 0
    times = load_times(str(out))
    compiled = run_pipeline(og.parse(GRAPH), DEFAULT_PIPELINE)  # what `run` compiled
    assert times and set(times) <= {n.name for n in compiled.nodes if not n.is_event}
    assert all(t == pytest.approx(0.25e-3) for t in times.values())
    assert json.loads(out.read_text()) == times
    assert node_times_module.times_text(times) == out.read_text()


def test_node_times_need_one_gpu(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    model = tmp_path / "m.ir"
    model.write_text(GRAPH)
    out = tmp_path / "times.json"
    assert main(["run", str(model), "--device", "cpu", "--node-times", str(out), "-q"]) == 1
    err = capsys.readouterr().err
    assert "--node-times: measured on one GPU" in err and "Traceback" not in err
    assert not out.exists()


def test_a_program_with_cpu_nodes_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    """CPU nodes run on the host, outside the device timeline: measuring them alone on a stream
    would time nothing, so the measurement refuses the program (a CPU node's step put in)."""
    from dataclasses import replace

    from optgraph.codegen.plan.steps import HostStep

    with fake_cupy(monkeypatch):
        program = og.compile(og.parse(GRAPH), target="cuda")
        program.run({"x": np.ones((4, 16), np.float32)})
        runtime = program._cuda
        variant = runtime._variants[runtime.last_key]
        steps = [*variant.plan.steps, HostStep("d", 0, 3)]
        monkeypatch.setattr(variant, "plan", replace(variant.plan, steps=steps))
        with pytest.raises(OptGraphError, match="runs nodes on the CPU"):
            program.node_times()
        program.close()
