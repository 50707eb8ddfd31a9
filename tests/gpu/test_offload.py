"""Split and streamed programs on the GPU: a streamed decode equals the resident decode exactly,
replays copy whatever is in the pinned host weights, device memory stays within the budget, CPU
nodes run as host functions inside the one CUDA graph, and an arena that cannot be allocated falls
back to synchronous copies."""

from __future__ import annotations

import gc
import warnings

import numpy as np
import pytest

from optgraph.analysis.segments import device_memory
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.support.gpu_support import require_gpu
from tests.support.offload_models import llama

pytestmark = pytest.mark.gpu
cupy = require_gpu()

from optgraph.api.programs import cuda_program
from optgraph.runtime.cuda.runner import CHECK_BOUNDS, CudaProgram

PLAN = "verify,dce,cse,fuse,assign-streams{max-streams=2},insert-sync,analyze-lifetimes,plan-memory"
SPLIT = (
    "verify,dce,cse,fuse,assign-streams{max-streams=2},split-backends,insert-sync,"
    "analyze-lifetimes,plan-memory"
)
SIZES = {"hidden": 256, "heads": 4, "kv_heads": 2, "ffn": 512, "vocab": 1024}


def _model(dtype: str = "f16", batch: int = 1, host: tuple[str, ...] = ()) -> Graph:
    return llama(layers=4, batch=batch, dtype=dtype, host_weights=host, **SIZES)


def _streamed(planned: Graph, fraction: float = 0.4, options: str = "") -> tuple[Graph, int]:
    budget = int(device_memory(planned).peak * fraction)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return run_pipeline(planned, f"plan-prefetch{{budget={budget}{options}}}"), budget


def _runs(graph: Graph, inputs, weights, n: int = 3) -> tuple[list[dict], CudaProgram]:
    program = cuda_program(graph, weights=weights)
    outs = [program.run(inputs) for _ in range(n)]  # eager + capture, then replays
    assert program.counters.replays >= n - 1
    return outs, program


def _equal(a: dict, b: dict) -> bool:
    return all(np.asarray(a[k]).tobytes() == np.asarray(b[k]).tobytes() for k in a)


def _close_to_reference(graph: Graph, got: dict, inputs: dict, weights: dict) -> None:
    """Whole-graph bounds of `optgraph run --check` (per-op bounds compound over a model)."""
    want = run_reference(graph, inputs, weights)
    types = graph.value_types()
    for name in graph.output_names():
        bound = CHECK_BOUNDS.get(types[name].dtype)
        if bound is None:
            assert np.array_equal(got[name], want[name]), name
        else:
            assert nmse(got[name], want[name]) <= bound, name


@pytest.mark.parametrize("dtype, batch", [("f16", 1), ("f32", 1), ("f16", 3)])
# segment-bytes=64KiB: one weight a segment, of five sizes, in the prefetch ring.
@pytest.mark.parametrize(
    "options", ["", ",depth=1", ",depth=3", ",sync=true", ",segment-bytes=64KiB"]
)
def test_streamed_decode_equals_resident_exactly(dtype: str, batch: int, options: str) -> None:
    g = _model(dtype, batch)
    planned = run_pipeline(g, PLAN)
    streamed, budget = _streamed(planned, 0.4, options)
    assert device_memory(streamed).streamed_weights > 0 and device_memory(streamed).peak <= budget
    inputs, weights = random_inputs(g), random_weights(g)
    resident, p1 = _runs(planned, inputs, weights)
    got, p2 = _runs(streamed, inputs, weights)
    for out in got + resident[1:]:
        assert _equal(out, resident[0])
    _close_to_reference(g, got[-1], inputs, weights)
    p1.close()
    p2.close()


def test_replays_copy_the_new_host_weights() -> None:
    g = _model()
    planned = run_pipeline(g, PLAN)
    streamed, _ = _streamed(planned)
    inputs = random_inputs(g)
    a, b = random_weights(g, seed=0), random_weights(g, seed=1)
    program = cuda_program(streamed, weights=a)
    program.run(inputs)
    program.run(inputs)
    captures = program.counters.captures
    got_b = program.run(inputs, weights=b)  # new arrays: written into the pinned host buffers
    resident_b, _ = _runs(planned, inputs, b, n=1)
    assert _equal(got_b, resident_b[0])
    names = [w.name for w in streamed.weights if w.ann.segment is not None]
    mixed = dict(b)
    for name in names:  # write straight into the pinned buffer a replay copies from
        mixed[name] = a[name]
        program.host_weights.view(name)[...] = a[name]
    got_mixed = program.run(inputs)
    resident_mixed, _ = _runs(planned, inputs, mixed, n=1)
    assert _equal(got_mixed, resident_mixed[0])
    assert not _equal(got_mixed, got_b)
    assert program.counters.captures == captures  # the same graph, replayed
    program.close()


def test_device_memory_measured_within_budget() -> None:
    """The program's device buffers, as allocated, and the pool's growth both fit the budget."""
    g = llama(layers=6, dtype="f16", hidden=512, heads=8, kv_heads=2, ffn=1536, vocab=4096)
    planned = run_pipeline(g, PLAN)
    streamed, budget = _streamed(planned, 0.35)
    pool = cupy.get_default_memory_pool()
    gc.collect()  # earlier tests' programs must not be freed while this one is measured
    pool.free_all_blocks()
    before = pool.used_bytes()
    program = cuda_program(streamed, weights=random_weights(g))
    program.run(random_inputs(g))
    program.run(random_inputs(g))
    (variant,) = program._variants.values()
    buffers = [variant.arena, program.weights.buffer, variant.in_dev, *variant.values.values()]
    allocated = sum(b.mem.size for b in buffers)
    workspaces = sum(w.mem.size for w in program.streams.workspaces.values())
    grown = pool.used_bytes() - before - workspaces
    planned_peak = device_memory(streamed).peak
    print(
        f"budget {budget:,} B, planned {planned_peak:,} B, "
        f"allocated {allocated:,} B, pool {grown:,} B"
    )
    assert allocated <= planned_peak <= budget
    assert grown <= budget
    program.close()


@pytest.mark.parametrize("batch", [1, 2])
def test_split_program_runs_cpu_nodes_as_host_functions(batch: int) -> None:
    g = _model("f32", batch, host=("embed", "lm_head"))
    split = run_pipeline(g, SPLIT)
    assert any(n.ann.backend == "cpu" for n in split.nodes)
    inputs, weights = random_inputs(g), random_weights(g)
    outs, program = _runs(split, inputs, weights)
    assert all(_equal(o, outs[0]) for o in outs)
    _close_to_reference(g, outs[-1], inputs, weights)
    streamed, _ = _streamed(split, 0.5)
    outs2, program2 = _runs(streamed, inputs, weights)
    assert all(_equal(o, outs[0]) for o in outs2)
    program.close()
    program2.close()


def test_arena_allocation_failure_falls_back_to_synchronous_copies(monkeypatch) -> None:
    g = _model()
    planned = run_pipeline(g, PLAN)
    streamed, _ = _streamed(planned)
    full = max(lower_cuda(streamed).arena_bytes, 1)
    real = cupy.cuda.alloc

    def alloc(nbytes: int):
        if nbytes == full:
            raise cupy.cuda.memory.OutOfMemoryError(nbytes, 0)
        return real(nbytes)

    monkeypatch.setattr(cupy.cuda, "alloc", alloc)
    inputs, weights = random_inputs(g), random_weights(g)
    program = cuda_program(streamed, weights=weights)
    with pytest.warns(RuntimeWarning, match="synchronous"):
        got = program.run(inputs)
    (variant,) = program._variants.values()
    assert {n.ann.slot for n in variant.graph.nodes if n.op == "prefetch"} == {0}
    monkeypatch.undo()
    resident, _ = _runs(planned, inputs, weights, n=1)
    assert _equal(got, resident[0])
    program.close()
