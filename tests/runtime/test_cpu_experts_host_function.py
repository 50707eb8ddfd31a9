"""The CUDA runtime's host function of a moe part that split-experts and split-backends put on
the CPU (its pieces in the pinned host weights, x and the logits in the pinned arena) computes
the reference bits of that node for f32 stacks, within the CPU kernels' round-off for q8_0;
the GPU part's kernels are checked in the emulator (tests/codegen/test_moe_kernels_emulated.py).
On the CUDA runtime (fake CuPy), in both ways of running CPU nodes, the GPU part's kernels are
launched before the host starts its part."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.codegen.plan.steps import HostStep
from optgraph.ir.graph import Node
from optgraph.passes.manager import run_pipeline
from optgraph.passes.split_experts import expert_weights
from optgraph.reference.interpreter import evaluate_node, random_inputs, random_weights
from optgraph.runtime.cuda import offload
from optgraph.runtime.cuda.offload import HostErrors, HostFunction, HostMemory, HostWeights
from tests.passes.test_split_experts import moe_model
from tests.support.fake_cupy import fake_cupy

PIPELINE = "split-experts{cpu-experts=3},split-backends,insert-sync,analyze-lifetimes,plan-memory"


@pytest.mark.parametrize("stacks", [("f32", "f32", "f32"), ("q8_0", "q8_0", "q8_0")])
def test_the_cpu_part_computes_its_reference_bits(stacks: tuple[str, str, str]) -> None:
    source = moe_model(layers=1, tokens=3, stacks=stacks)
    split = run_pipeline(source, PIPELINE)
    plan = lower_cuda(split)
    inputs, weights = random_inputs(source, seed=5), random_weights(source, seed=6)
    pieces = expert_weights(source, split, weights)
    host_weights = HostWeights(plan, bytearray)
    for name in host_weights.offsets:
        host_weights.set(name, pieces[name])
    assert set(host_weights.offsets) == {"l0.gate.e5_8", "l0.up.e5_8", "l0.down.e5_8"}
    memory = HostMemory(plan, host_weights, bytearray)
    staged = {n: np.ascontiguousarray(a).reshape(-1).view(np.uint8) for n, a in inputs.items()}
    values = dict(inputs) | dict(pieces)
    types = split.value_types()
    for node in split.nodes:
        if not node.is_event:
            args = [values[o] for o in node.operands]
            values[node.name] = evaluate_node(node, args, [types[o] for o in node.operands])
    steps = [s for s in plan.steps if isinstance(s, HostStep)]
    assert [split.nodes[s.index].name for s in steps] == ["l0.m.e5_8"]
    fn = HostFunction(split, steps[0], plan, memory, staged, HostErrors())
    for operand, view in zip(fn.node.operands, fn.args):
        if operand not in pieces and operand not in inputs:
            view[...] = values[operand]  # x and the logits as their copies left them
    fn._call(None)
    fn.errors.raise_first()
    want = values["l0.m.e5_8"]
    assert np.abs(want).max() > 0.0
    if stacks[0] == "f32":
        assert fn.out.tobytes() == want.tobytes()
    else:  # the products on the CPU kernels (runtime/cpu/quantized_nodes.py): their round-off
        assert np.abs(fn.out - want).max() <= 1e-4 * np.abs(want).max()


@pytest.mark.parametrize("cpu_nodes", ["calling-thread", "graph"])
def test_the_gpu_part_is_launched_before_the_host_runs_its_part(
    monkeypatch: pytest.MonkeyPatch, cpu_nodes: str
) -> None:
    """On the CUDA runtime (fake CuPy: kernels recorded, not computed), `og.compile(...,
    target="cuda").run` on the model's whole arrays: when the host starts the CPU part, the GPU
    part's three moe kernels are launched already, so they run while it works."""
    source = moe_model(layers=1, tokens=1, stacks=("q8_0", "q8_0", "q8_0"))
    pipeline = "split-experts{cpu-experts=2},split-backends,insert-sync"
    inputs, weights = random_inputs(source, seed=1), random_weights(source, seed=2)
    started: list[tuple[str, list[str]]] = []
    with fake_cupy(monkeypatch) as fake:
        real = offload.write_quantized

        def spy(node: Node, *args: Any, **kwargs: Any) -> bool:
            started.append((node.name, list(fake.launches)))
            return real(node, *args, **kwargs)

        monkeypatch.setattr(offload, "write_quantized", spy)
        options = LoweringOptions(cpu_nodes=cpu_nodes)
        program = og.compile(source, pipeline, target="cuda", options=options)
        outputs = program.run(inputs, weights)
        program.close()
    assert set(outputs) == {"l0.y"}
    ((name, launched),) = started
    assert name == "l0.m.e6_8"
    assert [k.split("_")[2] for k in launched if k.startswith("og_moe_")] == [
        "route", "gate", "down"
    ]  # fmt: skip


def test_host_functions_run_by_the_driver_pause_the_cycle_collector(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A cycle collection on the driver's thread would finalize CuPy streams and events whose
    destructors call CUDA, not permitted in a host function (their handles leaked on the H200):
    the callbacks the driver runs hold the collector off, and restore it after."""
    import gc

    source = moe_model(layers=1, tokens=1, stacks=("q8_0", "q8_0", "q8_0"))
    pipeline = "split-experts{cpu-experts=2},split-backends,insert-sync"
    inputs, weights = random_inputs(source, seed=1), random_weights(source, seed=2)
    seen: list[bool] = []
    with fake_cupy(monkeypatch):
        real = offload.write_quantized

        def spy(node: Node, *args: Any, **kwargs: Any) -> bool:
            seen.append(gc.isenabled())
            return real(node, *args, **kwargs)

        monkeypatch.setattr(offload, "write_quantized", spy)
        options = LoweringOptions(cpu_nodes="graph")
        program = og.compile(source, pipeline, target="cuda", options=options)
        assert gc.isenabled()
        program.run(inputs, weights)
        program.run(inputs, weights)  # the replay calls the same callbacks
        program.close()
    assert seen and not any(seen)
    assert gc.isenabled()
