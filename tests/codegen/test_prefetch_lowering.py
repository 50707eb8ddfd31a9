"""How split and streamed programs lower for the CUDA runtime, checked without a GPU: copies from
pinned host memory, host steps for CPU nodes, the device weight buffer holding only resident
weights, the host function of a CPU node, and the arena allocation fallback."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from optgraph.analysis.arena_packing import align_up
from optgraph.analysis.segments import device_memory, device_resident_weights
from optgraph.codegen.lower_cuda import CopyStep, HostStep, lower_cuda, lower_variant
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import (
    evaluate_node,
    random_inputs,
    random_weights,
)
from optgraph.runtime.cuda.offload import (
    HostErrors,
    HostFunction,
    HostMemory,
    HostWeights,
    allocate_arena,
)
from tests.support.offload_models import assert_runs_equal_reference, llama

PLAN = "assign-streams{max-streams=2},split-backends,insert-sync,analyze-lifetimes,plan-memory"


def _streamed(batch: int = 1) -> tuple[Graph, Graph, int]:
    g = llama(layers=3, batch=batch, host_weights=("embed", "lm_head"))
    planned = run_pipeline(g, PLAN)
    budget = device_memory(planned).peak // 2
    return g, run_pipeline(planned, f"plan-prefetch{{budget={budget}}}"), budget


def test_streamed_and_split_steps() -> None:
    _, streamed, _ = _streamed()
    plan = lower_cuda(streamed)
    nodes = {n.name: n for n in streamed.nodes}
    copies = {s.node: s for s in plan.steps if isinstance(s, CopyStep)}
    hosts = {s.node for s in plan.steps if isinstance(s, HostStep)}
    cpu_nodes = {n.name for n in streamed.nodes if n.ann.backend == "cpu" and not n.is_event}
    assert hosts == cpu_nodes != set()
    prefetches = [n for n in streamed.nodes if n.op == "prefetch"]
    assert prefetches
    for n in prefetches:
        step = copies[n.name]
        assert step.kind == "h2d" and step.src.space == "host_weights"
        assert step.dst.space == "arena" and step.dst.offset == n.ann.offset
    for n in streamed.nodes:
        if n.op == "copy":
            assert copies[n.name].kind == ("d2h" if n.attrs["to"] == "cpu" else "h2d")
    resident = device_resident_weights(streamed)
    assert plan.weights_bytes == sum(
        align_up(w.type.nbytes) for w in streamed.weights if w.name in resident
    )
    streamed_names = {w.name for w in streamed.weights if w.ann.segment is not None}
    assert streamed_names <= set(plan.host_weight_offsets)
    assert not streamed_names & set(plan.weight_offsets)
    assert nodes  # the plan covers every node of the graph


def test_host_function_computes_its_node() -> None:
    g, streamed, _ = _streamed(batch=2)
    plan = lower_cuda(streamed)
    inputs, weights = random_inputs(g), random_weights(g)
    host_weights = HostWeights(plan, bytearray)
    for name in host_weights.offsets:
        host_weights.set(name, weights[name])
    memory = HostMemory(plan, host_weights, bytearray)
    staged = {n: np.ascontiguousarray(a).reshape(-1).view(np.uint8) for n, a in inputs.items()}
    errors = HostErrors()
    values = dict(inputs) | dict(weights)
    for node in streamed.nodes:  # the values every CPU node reads, from the reference
        if not node.is_event:
            values[node.name] = evaluate_node(node, [values[o] for o in node.operands])
    steps = [s for s in plan.steps if isinstance(s, HostStep)]
    for step in steps:
        fn = HostFunction(streamed, step, plan, memory, staged, errors)
        for operand, view in zip(fn.node.operands, fn.args):
            if operand not in weights and operand not in inputs:
                view[...] = values[operand]
        fn._call(None)
        errors.raise_first()
        assert np.array_equal(fn.out, values[fn.node.name])
    assert steps


def test_arena_that_does_not_fit_falls_back_to_synchronous_copies() -> None:
    g, streamed, _ = _streamed()
    lowered = lower_variant(streamed, LoweringOptions())
    plan = lowered.plan

    class OutOfMemory(Exception):
        pass

    limit = plan.arena_bytes - 1

    def alloc(nbytes: int) -> bytearray:
        if nbytes > limit:
            raise OutOfMemory(nbytes)
        return bytearray(nbytes)

    with pytest.warns(RuntimeWarning, match="synchronous"):
        fallback, arena = allocate_arena(lowered, alloc, OutOfMemory)
    sync, sync_plan = fallback.graph, fallback.plan
    assert fallback is lowered.fallback
    assert len(arena) == sync_plan.arena_bytes < plan.arena_bytes
    assert {n.ann.slot for n in sync.nodes if n.op == "prefetch"} == {0}
    assert [w.ann.segment for w in sync.weights] == [w.ann.segment for w in streamed.weights]
    assert_runs_equal_reference(sync, g, interleavings=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        same = allocate_arena(lowered, bytearray, OutOfMemory)
    assert same[0] is lowered


def test_arena_failure_without_streaming_is_not_hidden() -> None:
    planned = run_pipeline(llama(layers=1), "analyze-lifetimes,plan-memory")

    def alloc(nbytes: int) -> bytearray:
        raise MemoryError(nbytes)

    lowered = lower_variant(planned, LoweringOptions())
    assert lowered.fallback is None
    with pytest.raises(MemoryError):
        allocate_arena(lowered, alloc, MemoryError)
