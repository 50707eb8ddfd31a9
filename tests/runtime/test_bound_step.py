"""`program.bind(inputs, out) -> step` on the fake CuPy (tests/support/fake_cupy.py): the arrays
are checked once, at bind time; a call of the step only launches (its first call runs eagerly
and captures, later ones replay the CUDA graph). Counters and the fake's records only: kernels do
not compute on the fake."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.api.programs import cuda_program
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.codegen.plan.steps import KernelStep
from optgraph.errors import InputError, OptGraphError
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights
from tests.support.fake_cupy import fake_cupy

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
PIPELINE = (
    "verify,dce,cse,assign-streams{max-streams=2,min-branch-us=0},insert-sync,"
    "analyze-lifetimes,plan-memory"
)


def _planned(name: str) -> og.Graph:
    return run_pipeline(og.parse_file(EXAMPLES / f"{name}.ir"), PIPELINE)


def test_a_bound_step_checks_once_and_a_call_only_launches(monkeypatch) -> None:
    with fake_cupy(monkeypatch) as fake:
        from optgraph.runtime.cuda import runner as cuda

        graph = _planned("diamond")
        program = cuda_program(graph)
        kernels = [s.kernel for s in program.plan().steps if isinstance(s, KernelStep)]
        x = fake.asarray(random_inputs(graph)["x"])
        y = fake.asarray(np.zeros((4, 64), np.float32))
        step = program.bind({"x": x}, out={"y": y})
        c = program.counters
        assert fake.launches == [] and (c.eager_runs, c.captures, c.specializations) == (0, 0, 1)

        def refuse(*args: object, **kwargs: object) -> None:
            raise AssertionError("a bound step checked its arrays again")

        monkeypatch.setattr(program, "_classify", refuse)
        monkeypatch.setattr(program, "_variant", refuse)
        monkeypatch.setattr(cuda, "check_array", refuse)
        assert step()["y"] is y  # eager run, then captured
        assert (c.eager_runs, c.captures, c.replays) == (1, 1, 0)
        assert fake.launches == kernels
        copies = fake.memcpys
        for _ in range(3):
            step()
        assert (c.eager_runs, c.captures, c.updates, c.replays) == (1, 1, 0, 3)
        assert fake.graph_launches == 3 and fake.launches == kernels * 4
        assert fake.memcpys - copies == 3  # per replay: the output into `y`, nothing staged
        program.close()


def test_bind_takes_device_arrays_only(monkeypatch) -> None:
    with fake_cupy(monkeypatch) as fake:
        graph = _planned("diamond")
        program = cuda_program(graph)
        x = random_inputs(graph)["x"]
        y = fake.asarray(np.zeros((4, 64), np.float32))
        with pytest.raises(InputError, match=r"bind: .*input '%x' must be a CuPy array"):
            program.bind({"x": x}, out={"y": y})
        with pytest.raises(InputError, match=r"bind: .*output '%y' must be a CuPy array"):
            program.bind({"x": fake.asarray(x)}, out={})
        with pytest.raises(InputError, match=r"expected f32\[4,64\]"):
            program.bind({"x": fake.asarray(x)}, out={"y": fake.asarray(np.zeros((4, 8)))})
        assert program.counters.eager_runs == 0 and fake.launches == []


def test_an_eager_bound_step_issues_the_calls_each_time(monkeypatch) -> None:
    with fake_cupy(monkeypatch) as fake:
        graph = _planned("mlp")
        options = LoweringOptions(use_graph=False)
        program = cuda_program(graph, weights=random_weights(graph), options=options)
        x = fake.asarray(random_inputs(graph)["x"])
        logits = fake.asarray(np.zeros(graph.value_types()["logits"].shape, np.float32))
        step = program.bind({"x": x}, out={"logits": logits})
        step()
        step()
        c = program.counters
        assert (c.eager_runs, c.captures, c.replays) == (2, 0, 0) and not fake.graphs


def test_compiled_program_bind_uses_default_weights_and_is_cuda_only(monkeypatch) -> None:
    source = og.parse_file(EXAMPLES / "mlp.ir")
    with pytest.raises(OptGraphError, match="bind: target 'cpu'"):
        og.compile(source).bind({}, {})
    with fake_cupy(monkeypatch) as fake:
        program = og.compile(source, PIPELINE, target="cuda")
        x = fake.asarray(random_inputs(source)["x"])
        logits = fake.asarray(np.zeros(program.graph.value_types()["logits"].shape, np.float32))
        step = program.bind({"x": x}, {"logits": logits})
        for _ in range(3):
            step()
        c = program._cuda.counters
        assert (c.weight_uploads, c.captures, c.replays) == (1, 1, 2)


def test_a_bound_step_replays_directly_until_the_graph_cache_changes(monkeypatch) -> None:
    """Two steps of one key on different arrays: each captures its own graph (its pointers are
    part of its key); a call after the cache changed is a full call (the graph cache decides:
    a replay, nothing updated), calls in a row are bare graph launches."""
    with fake_cupy(monkeypatch) as fake:
        graph = _planned("diamond")
        program = cuda_program(graph)
        x = random_inputs(graph)["x"]
        first = program.bind(
            {"x": fake.asarray(x)}, out={"y": fake.asarray(np.zeros((4, 64), np.float32))}
        )
        second = program.bind(
            {"x": fake.asarray(x)}, out={"y": fake.asarray(np.zeros((4, 64), np.float32))}
        )
        decided: list[object] = []
        decide = program._cache.decide

        def counted(*args: object) -> object:
            decided.append(args[0])
            return decide(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(program._cache, "decide", counted)
        c = program.counters
        first()  # eager run and capture
        first()
        first()  # both bare launches of the captured graph
        assert len(decided) == 1 and (c.captures, c.replays) == (1, 2)
        second()  # the same types and names on other pointers: a graph of its own
        assert len(decided) == 2 and c.captures == 2 and c.updates == 0
        first()  # the cache changed: a full call, which finds its graph as it was
        assert len(decided) == 3 and c.updates == 0 and c.replays == 3
        first()
        assert len(decided) == 3 and c.replays == 4 and fake.graph_launches == 4
        program.close()  # destroys the graphs: the next call captures anew, never launches blind
        first()
        assert len(decided) == 4 and c.captures == 3 and fake.graph_launches == 4
        program.close()


def test_a_bound_step_holds_the_arrays_it_was_bound_to(monkeypatch) -> None:
    """The graph bakes the arrays' addresses in: they must outlive every launch of the step,
    even when the caller keeps no reference (CuPy's pool would hand their memory out again)."""
    import gc
    import weakref

    with fake_cupy(monkeypatch) as fake:
        graph = _planned("diamond")
        program = cuda_program(graph)
        x = fake.asarray(random_inputs(graph)["x"])
        y = fake.asarray(np.zeros((4, 64), np.float32))
        refs = [weakref.ref(x), weakref.ref(y)]
        step = program.bind({"x": x}, out={"y": y})
        del x, y
        gc.collect()
        assert all(r() is not None for r in refs)
        del step
        program._in_flight = None
        gc.collect()
        assert all(r() is None for r in refs)


def test_an_output_sharing_an_inputs_array_is_refused(monkeypatch) -> None:
    with fake_cupy(monkeypatch) as fake:
        graph = _planned("diamond")
        program = cuda_program(graph)
        x = fake.asarray(random_inputs(graph)["x"])
        with pytest.raises(InputError, match=r"input '%x' and out '%y' share memory"):
            program.bind({"x": x}, out={"y": x})
        with pytest.raises(InputError, match=r"input '%x' and out '%y' share memory"):
            program.run({"x": x}, out={"y": x})
        assert fake.launches == []


def test_check_apart_allows_in_place_pairs_and_inputs_sharing_bytes() -> None:
    from optgraph.runtime.cuda.bound import check_apart

    cache, pos = (1000, 256), (2000, 4)
    check_apart({"cache": cache, "pos": pos, "p2": (2000, 4)}, {"new": cache}, {"new": "cache"})
    check_apart({"a": (0, 16)}, {"b": (16, 16), "c": (32, 0)}, {})  # adjacent, empty
    with pytest.raises(InputError, match=r"input '%cache' and out '%new' share memory"):
        check_apart({"cache": cache}, {"new": (1200, 64)}, {})  # not declared in place
    with pytest.raises(InputError, match=r"input '%alias' and out '%new' share memory"):
        # in place in `cache`, but also over another input's bytes
        check_apart({"cache": cache, "alias": (1100, 8)}, {"new": cache}, {"new": "cache"})
    with pytest.raises(InputError, match=r"out '%a' and out '%b' share memory"):
        check_apart({}, {"a": (0, 32), "b": (8, 8)}, {})


def test_bound_steps_of_one_program_each_keep_their_graph(monkeypatch) -> None:
    """A decode loop's two bound steps (each reading what the other wrote) called in turn: one
    capture each, then replays only; `run` with arrays that change in turn still updates one
    graph's pointers rather than capturing a graph per array."""
    with fake_cupy(monkeypatch) as fake:
        graph = _planned("diamond")
        program = cuda_program(graph)
        xs = [fake.asarray(random_inputs(graph, seed)["x"]) for seed in (1, 2)]
        ys = [fake.asarray(np.zeros((4, 64), np.float32)) for _ in range(2)]
        steps = [program.bind({"x": x}, out={"y": y}) for x, y in zip(xs, ys)]
        for _ in range(5):
            for step in steps:
                step()
        c = program.counters
        assert (c.captures, c.updates, c.replays) == (2, 0, 8)
        assert fake.graph_launches == 8  # a step's first call runs eagerly and captures
        for _ in range(3):
            for x, y in zip(xs, ys):
                program.run({"x": x}, out={"y": y})
        assert c.captures == 3 and c.updates == 5  # one graph for `run`, its pointers updated
        program.close()
