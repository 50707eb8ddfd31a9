"""The CUDA runtime's host function of a moe part that split-experts and split-backends put on
the CPU (its pieces in the pinned host weights, x and the logits in the pinned arena) computes
the reference bits of that node for f32 stacks, within the CPU kernels' round-off for q8_0;
the GPU part's kernels are checked in the emulator (tests/codegen/test_moe_kernels_emulated.py)."""

from __future__ import annotations

import numpy as np
import pytest

from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.codegen.plan.steps import HostStep
from optgraph.passes.manager import run_pipeline
from optgraph.passes.split_experts import expert_weights
from optgraph.reference.interpreter import evaluate_node, random_inputs, random_weights
from optgraph.runtime.cuda.offload import HostErrors, HostFunction, HostMemory, HostWeights
from tests.passes.test_split_experts import moe_model

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
