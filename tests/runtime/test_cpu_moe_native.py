"""A moe reading quantized stacks on the CPU kernels (`runtime/cpu/quantized_nodes.py`): each
selected expert's three products by `quantized_matmul` on its stored rows, no expert decoded
(`expert_matrix`, the reference's decoding, raises if called); within the products' f32
round-off of the reference (the bound of tests/runtime/test_cpu_quantized_runs.py). With
split-experts the CPU part runs so in a compiled program, x and the parts as the reference's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import optgraph as og
from optgraph.reference import moe as reference_moe
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from optgraph.runtime.cpu.quantized_nodes import evaluate_quantized
from tests.passes.test_split_experts import moe_model

BOUND = 1e-4


def _refuse_decoding(monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(*_: Any) -> None:
        raise AssertionError("an expert's matrix was decoded")

    monkeypatch.setattr(reference_moe, "expert_matrix", refuse)


def _close(got: np.ndarray, want: np.ndarray) -> None:
    a, b = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert a.shape == b.shape and np.abs(b).max() > 0.0
    assert np.abs(a - b).max() <= BOUND * max(1.0, np.abs(b).max())


@pytest.mark.parametrize(
    ("x", "stacks", "attrs"),
    [
        ("f32", ("q4_k", "q4_k", "q8_0"), "k = 2, norm_topk = true"),
        ("f16", ("q8_0", "f16", "q4_0"), 'act = "gelu", k = 3'),
        ("f32", ("q5_k", "q8_0"), "experts = [2, 5], k = 2"),
    ],
)
def test_quantized_experts_on_the_cpu_kernels(
    monkeypatch: pytest.MonkeyPatch, x: str, stacks: tuple[str, ...], attrs: str
) -> None:
    held = 3 if "experts" in attrs else 6
    shapes = (
        {"gate": "[{e},32,256]", "up": "[{e},32,256]", "down": "[{e},256,32]"}
        if len(stacks) == 3
        else {"gate_up": "[{e},64,256]", "down": "[{e},256,32]"}
    )
    weights_text = "".join(
        f"  weight %{name} : {dtype}{shape.format(e=held)}\n"
        for (name, shape), dtype in zip(shapes.items(), stacks)
    )
    operands = ", ".join(f"%{name}" for name in shapes)
    graph = og.parse(
        f"graph m {{\n  input %x : {x}[5,256]\n  input %logits : f32[5,6]\n{weights_text}"
        f"  %y = moe(%x, %logits, {operands}) {{{attrs}}} : {x}[5,256]\n  output %y\n}}\n"
    )
    og.verify(graph)
    inputs, weights = random_inputs(graph, seed=7), random_weights(graph, seed=8)
    want = run_reference(graph, inputs, weights)["y"]
    node = graph.nodes[0]
    types = graph.value_types()
    args = [inputs.get(o, weights.get(o)) for o in node.operands]
    _refuse_decoding(monkeypatch)
    got = evaluate_quantized(node, args, [types[o] for o in node.operands], threads=2)
    assert got.dtype == want.dtype
    _close(got, want)


def test_a_compiled_split_program_runs_its_cpu_part_on_the_kernels(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    source = moe_model(layers=2, tokens=3, stacks=("q4_k", "q4_k", "q8_0"), hidden=256)
    pipeline = "split-experts{cpu-experts=3},assign-streams,split-backends,insert-sync"
    inputs, weights = random_inputs(source, seed=1), random_weights(source, seed=2)
    want = run_reference(source, inputs, weights)
    program = og.compile(source, pipeline, target="cpu")
    _refuse_decoding(monkeypatch)
    for seed in (None, 1):
        got = program.run(inputs, weights, seed=seed)
        _close(got["l1.y"], want["l1.y"])
