"""The CUDA-graph cache on the GPU: replay, update on new pointers, recapture on new shapes; no
allocation during capture; the captured graph has exactly the program's nodes.

Behaviour is asserted through `CudaProgram.counters`, never through timing.
"""

from __future__ import annotations

import gc
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.lower_cuda import CopyStep, GemmStep, KernelStep
from optgraph.ir.graph import TensorType
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import run_reference
from optgraph.runtime.cuda.graph_cache import count_dot_nodes, retype_graph
from tests.support.gpu_support import assert_close, reference, require_gpu

pytestmark = pytest.mark.gpu
cupy = require_gpu()

from optgraph.api.programs import cuda_program
from optgraph.runtime.cuda.runner import AllocationDuringCapture

ROOT = Path(__file__).resolve().parents[2]
PIPELINE = (
    "verify,dce,cse,assign-streams{max-streams=2,min-branch-us=0},insert-sync,"
    "analyze-lifetimes,plan-memory"
)


def _planned(name: str) -> og.Graph:
    return run_pipeline(og.parse_file(ROOT / "examples" / f"{name}.ir"), PIPELINE)


def test_pointer_change_updates_the_graph_instead_of_capturing() -> None:
    graph = _planned("diamond")
    program = cuda_program(graph)
    x1 = cupy.asarray(np.random.default_rng(1).standard_normal((4, 64)).astype(np.float32))
    x2 = cupy.asarray(np.random.default_rng(2).standard_normal((4, 64)).astype(np.float32))
    y1 = cupy.empty((4, 64), cupy.float32)
    y2 = cupy.empty((4, 64), cupy.float32)
    program.run({"x": x1}, out={"y": y1})  # eager + capture
    program.run({"x": x1}, out={"y": y1})  # replay
    c = program.counters
    assert (c.captures, c.updates, c.replays) == (1, 0, 1)
    program.run({"x": x2}, out={"y": y1})  # input pointer changed
    assert (c.captures, c.updates, c.replays) == (1, 1, 2)
    want = run_reference(graph, {"x": cupy.asnumpy(x2)}, {})["y"]
    assert_close(graph, {"y": cupy.asnumpy(y1)}, {"y": want})
    program.run({"x": x2}, out={"y": y2})  # output pointer changed
    assert (c.captures, c.updates, c.replays) == (1, 2, 3)
    assert_close(graph, {"y": cupy.asnumpy(y2)}, {"y": want})
    program.run({"x": x2}, out={"y": y2})  # same pointers again: a plain replay
    assert (c.captures, c.updates, c.replays) == (1, 2, 4)
    assert c.update_fallbacks == 0


def test_shape_change_captures_a_new_graph_and_keeps_the_old_one() -> None:
    graph = _planned("diamond")
    program = cuda_program(graph)
    small = np.random.default_rng(3).standard_normal((4, 64)).astype(np.float32)
    large = np.random.default_rng(4).standard_normal((8, 64)).astype(np.float32)
    program.run({"x": small})
    program.run({"x": small})
    c = program.counters
    assert (c.captures, c.specializations) == (1, 1)
    got = program.run({"x": large})
    assert (c.captures, c.specializations) == (2, 2)
    retyped = retype_graph(graph, {"x": TensorType("f32", (8, 64))})
    assert_close(retyped, got, run_reference(retyped, {"x": large}, {}))
    again = program.run({"x": small})  # the first graph is still cached
    assert (c.captures, c.specializations) == (2, 2)
    assert_close(graph, again, run_reference(graph, {"x": small}, {}))


def test_no_allocation_during_capture() -> None:
    graph = _planned("llama_decode")
    inputs, weights, _ = reference(graph)
    program = cuda_program(graph, weights=weights)
    program.run(inputs)  # variant, buffers, kernels, cuBLAS handles all exist now
    pool = cupy.get_default_memory_pool()
    # Earlier tests' arrays freed by a garbage collection in between would lower `used_bytes`
    # and hide (or fake) an allocation: collect first, and none while measuring.
    gc.collect()
    gc.disable()
    try:
        before = pool.used_bytes()
        device_inputs = {k: cupy.asarray(v) for k, v in inputs.items()}  # a new key: a capture
        after_inputs = pool.used_bytes()
        program.run(device_inputs)
        used = pool.used_bytes()
    finally:
        gc.enable()
    assert program.counters.captures == 2
    assert program.counters.allocations_refused == 0
    assert used == after_inputs >= before
    with pytest.raises(AllocationDuringCapture), program.allocation_forbidden():
        cupy.empty(1024, cupy.float32)
    assert program.counters.allocations_refused == 1


@pytest.mark.parametrize("name", ["moe_block", "llama_decode", "inception_block"])
def test_cuda_graph_has_the_programs_nodes(name: str) -> None:
    graph = run_pipeline(
        og.parse_file(ROOT / "examples" / f"{name}.ir"),
        PIPELINE.replace("max-streams=2", "max-streams=4"),
    )
    inputs, weights, _ = reference(graph)
    program = cuda_program(graph, weights=weights)
    program.run(inputs)
    plan = program.plan()
    dot = program.debug_dot_str()
    nodes = count_dot_nodes(dot)
    ours = [s for s in plan.steps if isinstance(s, KernelStep)]
    gemms = plan.count(GemmStep)
    staged_inputs = 1 if any(plan.types[n].nbytes for n in plan.inputs) else 0
    outputs = sum(1 for n in dict.fromkeys(plan.outputs) if plan.types[n].nbytes)
    memcpys = staged_inputs + outputs + plan.count(CopyStep)
    named = [k for k in nodes.kernels if k.startswith("og_")]
    assert nodes.total > 0, dot[:2000]
    assert sorted(named) == sorted(s.kernel for s in ours), dot[:2000]
    assert nodes.kinds.get("MEMCPY", 0) == memcpys, nodes
    cublas = nodes.kinds.get("KERNEL", 0) - len(named)
    assert gemms <= cublas <= 2 * gemms, nodes
    assert nodes.total == len(named) + cublas + memcpys, nodes
