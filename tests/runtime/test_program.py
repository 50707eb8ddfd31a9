"""`optgraph.compile`'s program: default weights made once and reused, and re-specialization for
new input shapes (the same pipeline, a memory plan, a clear error where a graph cannot take them).

The CUDA side runs on the fake CuPy of tests/fake_cupy.py (counters only; tests/gpu has values).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.api.programs import CompiledProgram
from optgraph.codegen.plan.lower_arena import lower
from optgraph.errors import InputError, OptGraphError
from optgraph.ir.graph import TensorType
from optgraph.passes.facts import FACTS
from optgraph.reference import interpreter as reference
from optgraph.runtime.cpu.planned_executor import execute
from optgraph.runtime.cuda.graph_cache import GraphKey, retype_graph
from tests.support.fake_cupy import fake_cupy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PIPELINE = "verify,dce,cse,assign-streams{max-streams=2,min-branch-us=0},insert-sync"
WIDE = {"x": TensorType("f32", (8, 64))}


def _wide_x(rows: int = 8) -> np.ndarray:
    return np.random.default_rng(5).standard_normal((rows, 64)).astype(np.float32)


class _Recorder:
    """A stand-in for the CUDA runtime that keeps what `run` hands it."""

    def __init__(self) -> None:
        self.weights: list[object] = []

    def run(self, inputs: object, weights: object) -> dict:
        self.weights.append(weights)
        return {}


# -- default weights ----------------------------------------------------------------------------


def test_default_weights_are_made_once_and_are_seed_0(monkeypatch) -> None:
    calls = []
    real = reference.random_weights

    def counted(graph, seed=0):
        calls.append(seed)
        return real(graph, seed=seed)

    monkeypatch.setattr(reference, "random_weights", counted)
    graph = og.parse_file(EXAMPLES / "mlp.ir")
    program = og.compile(graph)
    x = reference.random_inputs(graph)
    first = program.run(x)
    second = program.run(x)
    assert calls == [0]
    explicit = program.run(x, real(program.graph, seed=0))
    assert first["logits"].tobytes() == second["logits"].tobytes() == explicit["logits"].tobytes()
    weights = program.default_weights()
    assert weights is program.default_weights()
    with pytest.raises(ValueError, match="read-only"):
        weights["fc1.w"][0, 0] = 1.0


def test_the_runtime_gets_the_same_weight_arrays_every_run() -> None:
    graph = og.compile(og.parse_file(EXAMPLES / "mlp.ir")).graph
    runtime = _Recorder()
    program = CompiledProgram(graph, lower(graph), "cuda", _cuda=runtime)
    x = reference.random_inputs(graph)
    program.run(x)
    program.run(x)
    first, second = runtime.weights
    assert first is second
    assert [id(a) for a in first.values()] == [id(a) for a in second.values()]
    given = reference.random_weights(graph, seed=1)
    program.run(x, given)
    assert runtime.weights[-1] is given


def test_cuda_uploads_default_weights_once(monkeypatch) -> None:
    with fake_cupy(monkeypatch):
        graph = og.parse_file(EXAMPLES / "mlp.ir")
        program = og.compile(graph, PIPELINE, target="cuda")
        x = reference.random_inputs(graph)
        for _ in range(3):
            program.run(x)
        c = program._cuda.counters
        assert (c.weight_uploads, c.captures, c.replays) == (1, 1, 2)


# -- re-specialization --------------------------------------------------------------------------


def test_specialize_reruns_the_pipeline_and_plans_memory() -> None:
    source = og.parse_file(EXAMPLES / "diamond.ir")
    program = og.compile(source, PIPELINE)
    wide = program.specialize(WIDE)
    assert FACTS["memory-planned"].holds(wide) and FACTS["lifetimes-analyzed"].holds(wide)
    assert wide.value_types()["y"] == TensorType("f32", (8, 64))
    assert {n.stream for n in wide.nodes} == {n.stream for n in program.graph.nodes} == {0, 1}
    assert sum(n.is_event for n in wide.nodes) == sum(n.is_event for n in program.graph.nodes)
    # The specialized plan computes what the reference computes on the re-typed source.
    x = _wide_x()
    want = reference.run_reference(retype_graph(source, WIDE), {"x": x}, {})
    for seed in (0, 1, 2):
        got = execute(lower(wide), {"x": x}, {}, seed=seed).outputs
        assert got["y"].tobytes() == want["y"].tobytes()


def test_specialize_names_the_input_and_both_shapes() -> None:
    program = og.compile(og.parse_file(EXAMPLES / "gpt2_block.ir"))
    with pytest.raises(InputError) as err:
        program.specialize({"x": TensorType("f32", (9, 64))})  # a reshape to 8 tokens
    assert "input '%x' as f32[9,64] (was f32[8,64])" in err.value.message
    assert "reshape" in err.value.message


def test_a_program_without_source_cannot_specialize() -> None:
    graph = og.compile(og.parse_file(EXAMPLES / "diamond.ir")).graph
    with pytest.raises(OptGraphError, match="no source graph"):
        CompiledProgram(graph, lower(graph), "cpu").specialize(WIDE)


def test_cuda_runtime_plans_each_new_shape_and_keeps_the_old(monkeypatch) -> None:
    with fake_cupy(monkeypatch):
        source = og.parse_file(EXAMPLES / "diamond.ir")
        program = og.compile(source, PIPELINE, target="cuda")
        runtime = program._cuda
        small = reference.random_inputs(source)
        program.run(small)
        program.run(small)
        c = runtime.counters
        assert (c.specializations, c.captures, c.replays) == (1, 1, 1)
        assert program.run({"x": _wide_x()})["y"].shape == (8, 64)
        assert (c.specializations, c.captures) == (2, 2)
        variant = runtime._variants[GraphKey.of(WIDE)]
        assert variant.plan.is_planned and not variant.values
        assert variant.plan.arena_bytes >= 8 * 64 * 4
        assert {n.stream for n in variant.graph.nodes} == {0, 1}
        program.run(small)  # the compiled shape: its variant and graph are still there
        program.run({"x": _wide_x()})
        assert (c.specializations, c.captures, c.replays) == (2, 2, 3)


def test_cuda_runtime_refuses_a_shape_the_graph_cannot_take(monkeypatch) -> None:
    with fake_cupy(monkeypatch) as fake:
        source = og.parse_file(EXAMPLES / "gpt2_block.ir")
        program = og.compile(source, target="cuda")
        program.run(reference.random_inputs(source))
        with pytest.raises(InputError, match=r"input '%x' as f32\[9,64\] \(was f32\[8,64\]\)"):
            program.run({"x": _wide_x(9)})
        c = program._cuda.counters
        assert (c.specializations, c.captures, c.eager_runs) == (1, 1, 1)
        assert len(program._cuda._variants) == 1 and len(fake.graphs) == 1


def test_cuda_runtime_refuses_a_specialization_that_moves_weights(monkeypatch) -> None:
    with fake_cupy(monkeypatch):
        from optgraph.api.programs import cuda_program

        program = og.compile(og.parse_file(EXAMPLES / "mlp.ir"), PIPELINE)
        graph = program.graph

        def host_fc1(types):
            wide = program.specialize(types)
            weights = tuple(
                replace(w, placement="host") if w.name == "fc1.w" else w for w in wide.weights
            )
            return replace(wide, weights=weights)

        runtime = cuda_program(graph, weights=program.default_weights(), specialize=host_fc1)
        moved = r"input '%x' as f32\[16,64\] \(was f32\[4,64\]\) places weights '%fc1.b'"
        with pytest.raises(OptGraphError, match=moved):
            runtime.run({"x": np.zeros((16, 64), np.float32)})
        assert runtime.counters.specializations == 0
        runtime.run(reference.random_inputs(graph))
        assert runtime.counters.specializations == 1
