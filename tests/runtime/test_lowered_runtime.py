"""The seam between lowering and the CUDA runtime: the runtime runs what was lowered once.

`optgraph.compile` / `optgraph.api.programs.cuda_program` lower a planned graph into a
`LoweredProgram` (`codegen/plan/lowered.py`) with one `LoweringOptions`; the runtime binds, allocates,
captures, updates and replays it, and asks the API layer's `relower` callback for new variants.
Checked here on the fake CuPy (tests/support/fake_cupy.py): with every pass and every lowering
function made to raise, a lowered program still runs, captures, updates and replays.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
import optgraph.api.programs as api
from optgraph.api.programs import cuda_program, relowering
from optgraph.codegen import lower_cuda
from optgraph.codegen.lower_cuda import lower_for_cuda
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.codegen.plan.lowered import LoweredVariant
from optgraph.codegen.plan.steps import KernelStep
from optgraph.errors import OptGraphError
from optgraph.ir.graph import TensorType
from optgraph.passes import manager
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import random_inputs
from tests.support.fake_cupy import fake_cupy

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"
PIPELINE = (
    "verify,dce,cse,assign-streams{max-streams=2,min-branch-us=0},insert-sync,"
    "analyze-lifetimes,plan-memory"
)
CACHE = """graph cache {
  input %k_cache : f32[1,2,16,8]
  input %new : f32[1,2,1,8]
  input %pos : i32[1]
  %k = kv_cache_write(%k_cache, %new, %pos) : f32[1,2,16,8]
  %y = exp(%new) : f32[1,2,1,8]
  output %k, %y
}
"""
# What the runtime may import from codegen: the data of a lowered program, nothing that lowers.
RUNTIME_MAY_IMPORT = {
    "optgraph.codegen.plan.steps",
    "optgraph.codegen.plan.lowered",
    "optgraph.codegen.lowering_options",
    "optgraph.codegen.plan.arena_program",  # the planned executor's Program, Buffer and Step
    "optgraph.codegen.plan.cpu_node_schedule",  # the calling thread's pieces (made at lowering)
}
LOWERING = {
    *("run_pipeline", "lower_cuda", "lower_for_cuda", "lower_variant", "lower"),
    *("calling_thread_schedule", "cpu_schedule"),
}


def _planned(name: str) -> og.Graph:
    return run_pipeline(og.parse_file(EXAMPLES / f"{name}.ir"), PIPELINE)


def _forbid_lowering(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pass and every lowering entry point raises from now on."""

    def refuse(*args: object, **kwargs: object) -> None:
        raise AssertionError("the runtime ran a pass or lowered")

    monkeypatch.setattr(manager, "run_pipeline", refuse)
    monkeypatch.setattr(manager, "plan_memory_if_missing", refuse)
    for name in ("lower_cuda", "lower_for_cuda", "lower_variant", "synchronous_prefetch"):
        monkeypatch.setattr(lower_cuda, name, refuse)
    for name in ("lower_for_cuda", "lower_variant", "run_pipeline", "plan_memory_if_missing"):
        monkeypatch.setattr(api, name, refuse)


def test_runtime_modules_import_nothing_that_lowers() -> None:
    for path in sorted((ROOT / "optgraph" / "runtime").glob("*.py")):
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module:
                module = node.module
                assert not module.startswith("optgraph.passes"), (path.name, module)
                if module.startswith("optgraph.codegen"):
                    assert module in RUNTIME_MAY_IMPORT, (path.name, module)
                    names = {a.name for a in node.names}
                    assert not names & LOWERING, (path.name, names)
            if isinstance(node, ast.Import):
                for alias in node.names:
                    assert not alias.name.startswith(("optgraph.passes", "optgraph.codegen"))
            if isinstance(node, ast.Call):
                called = getattr(node.func, "id", getattr(node.func, "attr", None))
                assert called not in LOWERING, (path.name, node.lineno, called)


def test_a_lowered_program_runs_captures_updates_and_replays_without_lowering(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with fake_cupy(monkeypatch) as fake:
        graph = _planned("diamond")
        program = cuda_program(graph)
        kernels = [s.kernel for s in program.plan().steps if isinstance(s, KernelStep)]
        _forbid_lowering(monkeypatch)
        x = random_inputs(graph)["x"]
        program.run({"x": x})
        program.run({"x": x})
        y = fake.asarray(np.zeros((4, 64), np.float32))
        x1, x2 = fake.asarray(x), fake.asarray(x)
        for _ in range(2):  # bound pointers: a new key, captured; then replayed
            program.run({"x": x1}, out={"y": y})
        program.run({"x": x2}, out={"y": y})  # another input array: updated
        c = program.counters
        assert (c.eager_runs, c.captures, c.updates, c.replays) == (2, 2, 1, 3)
        assert c.specializations == 1
        assert fake.launches[: len(kernels)] == kernels  # the eager run issued the lowered plan
        # The guard bites: a new shape needs lowering, which only the API layer's callback does.
        with pytest.raises(AssertionError, match="ran a pass or lowered"):
            program.run({"x": np.zeros((8, 64), np.float32)})
        program.close()


def test_compile_lowers_once_and_the_runtime_runs_that(monkeypatch: pytest.MonkeyPatch) -> None:
    with fake_cupy(monkeypatch):
        options = LoweringOptions(merge_launches=False, use_graph=False)
        source = og.parse_file(EXAMPLES / "mlp.ir")
        compiled = og.compile(source, PIPELINE, target="cuda", options=options)
        assert compiled.lowered is not None and compiled.lowered.options is options
        assert compiled._cuda.lowered is compiled.lowered and compiled._cuda.options is options
        _forbid_lowering(monkeypatch)
        x = random_inputs(source)
        compiled.run(x)
        compiled.run(x)
        c = compiled._cuda.counters
        assert (c.eager_runs, c.captures, c.replays) == (2, 0, 0)  # use_graph=False
        plan = compiled._cuda.plan()
        assert plan is compiled.lowered.main.plan
        assert not any(
            s.kernel.startswith("og_merged_") for s in plan.steps if isinstance(s, KernelStep)
        )


def test_new_shapes_and_in_place_outputs_come_from_the_relower_callback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with fake_cupy(monkeypatch) as fake:
        from optgraph.runtime.cuda.runner import CudaProgram

        graph = og.parse(CACHE)
        options = LoweringOptions()
        asked: list[tuple[dict[str, TensorType], dict[str, str]]] = []
        relower = relowering(graph, options, None)

        def recording(types: Mapping[str, TensorType], in_place: Mapping[str, str]) -> object:
            asked.append((dict(types), dict(in_place)))
            return relower(types, in_place)

        program = CudaProgram(lower_for_cuda(graph, options), relower=recording)  # type: ignore[arg-type]
        inputs = random_inputs(graph)
        program.run(inputs)
        program.run(inputs)
        assert asked == []  # the compiled types: the lowered program's own variant
        cache = fake.asarray(inputs["k_cache"])
        bound = {"k_cache": cache, "new": fake.asarray(inputs["new"]), "pos": inputs["pos"]}
        program.run(bound, out={"k": cache})
        program.run(bound, out={"k": cache})
        assert asked == [({i.name: i.type for i in graph.inputs}, {"k": "k_cache"})]
        plan = program.plan()  # the last run's variant
        assert plan.locations["k"] == plan.locations["k_cache"]
        assert program.lowered.main.plan.locations["k"] != plan.locations["k_cache"]
        wide = dict(inputs, new=np.zeros((1, 2, 2, 8), np.float32))
        program.run(wide)  # (a cache write of two rows at once)
        assert len(asked) == 2 and asked[1][0]["new"] == TensorType("f32", (1, 2, 2, 8))
        assert program.counters.specializations == 3
        program.close()


def test_without_a_relower_callback_only_the_lowered_variant_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with fake_cupy(monkeypatch):
        from optgraph.runtime.cuda.runner import CudaProgram

        graph = _planned("diamond")
        program = CudaProgram(lower_for_cuda(graph))
        program.run({"x": np.zeros((4, 64), np.float32)})
        with pytest.raises(OptGraphError, match=r"was lowered for its own input types"):
            program.run({"x": np.zeros((8, 64), np.float32)})
        assert program.counters.specializations == 1
        program.close()


def test_a_streamed_program_is_lowered_with_its_synchronous_fallback() -> None:
    from optgraph.analysis.segments import device_memory
    from tests.support.offload_models import llama

    planned = run_pipeline(llama(layers=2), "analyze-lifetimes,plan-memory")
    assert lower_for_cuda(planned).main.fallback is None
    budget = device_memory(planned).peak // 2
    streamed = run_pipeline(planned, f"plan-prefetch{{budget={budget}}}")
    main = lower_for_cuda(streamed).main
    assert isinstance(main.fallback, LoweredVariant) and main.fallback.fallback is None
    slots = {n.ann.slot for n in main.fallback.graph.nodes if n.op == "prefetch"}
    assert slots == {0} and main.fallback.plan.arena_bytes < main.plan.arena_bytes


def test_the_cli_makes_one_options_object_for_run(monkeypatch: pytest.MonkeyPatch) -> None:
    from optgraph.cli import main as cli
    from optgraph.cli import run

    seen: list[LoweringOptions | None] = []

    def runner(graph: og.Graph, inputs: object, weights: object, **kw: object) -> dict:
        seen.append(kw["options"])  # type: ignore[arg-type]
        return {n: np.zeros(1) for n in graph.output_names()}

    monkeypatch.setitem(run.RUNNERS, "cpu", runner)
    model = str(EXAMPLES / "diamond.ir")
    argv = ["run", model, "--device", "cpu", "--no-graph", "--no-merge-launches"]
    assert cli.main(argv) == 0
    assert seen == [LoweringOptions(merge_launches=False, use_graph=False)]


def test_optgraph_run_on_cuda_compiles_once_with_the_flags_options(monkeypatch) -> None:
    from optgraph.cli import main as cli

    compiled: list[api.CompiledProgram] = []
    real = api.compile

    def recording(*args: object, **kwargs: object) -> api.CompiledProgram:
        program = real(*args, **kwargs)  # type: ignore[arg-type]
        compiled.append(program)
        return program

    counters: list[object] = []
    real_close = api.CompiledProgram.close

    def close(self: api.CompiledProgram) -> None:
        counters.append(self._cuda.counters)  # what the runtime did, read before it is released
        real_close(self)

    from optgraph.cli import run

    monkeypatch.setattr(api, "compile", recording)
    monkeypatch.setattr(run, "compile_program", recording)  # the run compiles before its values
    monkeypatch.setattr(api.CompiledProgram, "close", close)
    with fake_cupy(monkeypatch) as fake:
        model = str(EXAMPLES / "diamond.ir")
        assert cli.main(["run", model, "--device", "cuda", "--no-merge-launches"]) == 0
        (program,) = compiled
        assert program.lowered is not None
        assert program.lowered.options == LoweringOptions(merge_launches=False)
        assert program._cuda is None  # released by close()
        (c,) = counters
        assert (c.eager_runs, c.captures, c.replays) == (1, 1, 1)  # run, then its replay
        assert fake.live_graphs == 0  # closed after the run
