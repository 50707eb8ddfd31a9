"""The CUDA runtime's host side on a fake CuPy (tests/fake_cupy.py): what it issues, captures,
replays, updates and uploads, asserted through `counters` and the fake's records. Kernels do not
compute on the fake, so no test here looks at output values; tests/gpu covers those."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.api.programs import cuda_program
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.codegen.plan.steps import KernelStep
from optgraph.errors import InputError
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights
from optgraph.runtime.cuda.graph_cache import count_dot_nodes
from tests.support.fake_cupy import fake_cupy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PIPELINE = (
    "verify,dce,cse,assign-streams{max-streams=2,min-branch-us=0},insert-sync,"
    "analyze-lifetimes,plan-memory"
)


def _planned(name: str) -> og.Graph:
    return run_pipeline(og.parse_file(EXAMPLES / f"{name}.ir"), PIPELINE)


def _kernels(program) -> list[str]:
    return [s.kernel for s in program.plan().steps if isinstance(s, KernelStep)]


def test_first_run_is_eager_then_captured_later_runs_replay(monkeypatch) -> None:
    with fake_cupy(monkeypatch) as fake:
        graph = _planned("diamond")
        program = cuda_program(graph)
        x = random_inputs(graph)["x"]
        out = program.run({"x": x})
        c = program.counters
        assert (c.eager_runs, c.captures, c.replays, c.specializations) == (1, 1, 0, 1)
        assert sorted(fake.launches) == sorted(_kernels(program))  # the eager run only
        assert out["y"].shape == (4, 64) and out["y"].dtype == np.float32
        program.run({"x": x})
        program.run({"x": x})
        assert (c.eager_runs, c.captures, c.replays) == (1, 1, 2)
        assert len(fake.launches) == 3 * len(_kernels(program))
        assert fake.graph_launches == 2 and c.allocations_refused == 0
        program.close()
        assert fake.live_graphs == 0


def test_new_pointers_update_the_graph_and_new_shapes_specialize(monkeypatch) -> None:
    with fake_cupy(monkeypatch) as fake:
        graph = _planned("diamond")
        program = cuda_program(graph)
        rng = np.random.default_rng(0)
        x1 = fake.asarray(rng.standard_normal((4, 64)).astype(np.float32))
        x2 = fake.asarray(rng.standard_normal((4, 64)).astype(np.float32))
        y = fake.asarray(np.zeros((4, 64), np.float32))
        program.run({"x": x1}, out={"y": y})
        program.run({"x": x1}, out={"y": y})
        c = program.counters
        assert (c.captures, c.updates, c.replays) == (1, 0, 1)
        assert program.run({"x": x2}, out={"y": y})["y"] is y
        assert (c.captures, c.updates, c.replays, c.update_fallbacks) == (1, 1, 2, 0)
        staged = rng.standard_normal((4, 64)).astype(np.float32)
        program.run({"x": staged})  # staged instead of bound: another key, another capture
        assert (c.captures, c.specializations) == (2, 1)
        wide = rng.standard_normal((8, 64)).astype(np.float32)
        assert program.run({"x": wide})["y"].shape == (8, 64)
        assert (c.captures, c.specializations) == (3, 2)
        program.run({"x": staged})  # the first variant and its graph are still there
        assert (c.captures, c.specializations, c.replays) == (3, 2, 3)
        assert program.plan().types["x"].shape == (4, 64)
        program.close()


def test_weights_are_uploaded_once_per_set_of_arrays(monkeypatch) -> None:
    with fake_cupy(monkeypatch):
        graph = _planned("mlp")
        inputs, weights = random_inputs(graph), random_weights(graph)
        program = cuda_program(graph, weights=weights)
        program.run(inputs)
        program.run(inputs, weights)
        program.run(inputs, dict(weights))  # a new dict, the same arrays
        assert program.counters.weight_uploads == 1
        base = program.weights_ptr()
        plan = program.plan()
        for name, offset in plan.weight_offsets.items():
            raw = (np.ctypeslib.as_array((np.ctypeslib.ctypes.c_uint8 * weights[name].nbytes)
                   .from_address(base + offset)))  # fmt: skip
            assert raw.tobytes() == weights[name].tobytes(), name
        program.run(inputs, {k: v.copy() for k, v in weights.items()})
        assert program.counters.weight_uploads == 2
        with pytest.raises(InputError, match="missing weight"):
            program.run(inputs, {})
        program.close()


def test_weights_are_required_when_the_graph_has_some(monkeypatch) -> None:
    with fake_cupy(monkeypatch):
        graph = _planned("mlp")
        with pytest.raises(InputError, match="has weights but none were given"):
            cuda_program(graph).run(random_inputs(graph))


def test_capture_forbids_allocation_and_dot_has_the_plans_kernels(monkeypatch) -> None:
    with fake_cupy(monkeypatch):
        from optgraph.runtime.cuda.runner import AllocationDuringCapture

        graph = _planned("mlp")
        inputs, weights = random_inputs(graph), random_weights(graph)
        program = cuda_program(graph, weights=weights)
        program.run(inputs)
        with pytest.raises(AllocationDuringCapture), program.allocation_forbidden():
            __import__("cupy").cuda.alloc(1024)
        assert program.counters.allocations_refused == 1
        nodes = count_dot_nodes(program.debug_dot_str())
        assert sorted(k for k in nodes.kernels if k) == sorted(_kernels(program))
        assert nodes.kinds["MEMCPY"] == 2  # staged input, output
        program.close()


def test_eager_programs_never_capture(monkeypatch) -> None:
    with fake_cupy(monkeypatch) as fake:
        graph = _planned("diamond")
        program = cuda_program(graph, options=LoweringOptions(use_graph=False))
        x = random_inputs(graph)["x"]
        program.run({"x": x})
        program.run({"x": x})
        c = program.counters
        assert (c.eager_runs, c.captures, c.replays) == (2, 0, 0)
        assert not fake.graphs and len(fake.launches) == 2 * len(_kernels(program))


def test_buffers_the_offload_tests_measure_exist(monkeypatch) -> None:
    """tests/gpu/test_offload.py and benchmarks/bench_offload.py read these attributes."""
    with fake_cupy(monkeypatch):
        graph = _planned("mlp")
        program = cuda_program(graph, weights=random_weights(graph))
        program.run(random_inputs(graph))
        (variant,) = program._variants.values()
        assert variant.arena.mem.size >= variant.plan.arena_bytes
        assert variant.in_dev.mem.size >= 1 and not variant.values
        assert variant.graph.name == graph.name
        assert program._cache.get(program.last_key).exec
        assert program.stream is program.stream_for(0)
        assert variant.pointer(variant.plan.locations["x"], {}) == variant.in_dev.ptr
        assert program.weights.buffer.mem.size >= variant.plan.weights_bytes
        assert all(w.mem.size for w in program.streams.workspaces.values())
        assert set(program.streams.workspaces) == {s.stream for s in variant.plan.steps
                                                   if type(s).__name__ == "GemmStep"}  # fmt: skip


def test_importing_the_runtime_imports_no_cupy() -> None:
    """CuPy is imported lazily, on first use: every runtime module imports where it is absent."""
    modules = "runner, blas, capture, device, graph_cache, launch, memory, offload, pdl"
    code = (
        f"from optgraph.runtime.cuda import {modules}\n"
        "import sys\n"
        "assert not [m for m in sys.modules if m.split('.')[0] in ('cupy', 'cupy_backends')]\n"
    )
    root = Path(__file__).resolve().parents[2]
    command = [sys.executable, "-c", code]
    done = subprocess.run(command, check=False, cwd=root, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
