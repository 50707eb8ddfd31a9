"""gpt-oss's experts (a bias after each stack, `act = "swiglu_oai"`) on the CPU kernels
(`runtime/cpu/quantized_nodes.py`): each selected expert's products by `quantized_matmul` on its
stored mxfp4 (or q8_0) rows, no expert decoded, the biases and the clamped SwiGLU as the
reference's; within the products' f32 round-off of the reference."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import optgraph as og
from optgraph.reference import moe as reference_moe
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from optgraph.runtime.cpu.quantized_nodes import evaluate_quantized

BOUND = 1e-4


@pytest.mark.parametrize(
    ("stacks", "attrs"),
    [
        (("mxfp4", "mxfp4", "mxfp4"), 'act = "swiglu_oai", k = 2, limit = 0.3'),
        (("mxfp4", "q8_0"), 'act = "swiglu_oai", k = 3'),
        (("q8_0", "q8_0", "mxfp4"), "experts = [2, 5], k = 2"),
    ],
)
def test_biased_experts_on_the_cpu_kernels(
    monkeypatch: pytest.MonkeyPatch, stacks: tuple[str, ...], attrs: str
) -> None:
    held = 3 if "experts" in attrs else 6
    if len(stacks) == 3:
        shapes = {"gate": "[{e},64,128]", "up": "[{e},64,128]", "down": "[{e},128,64]"}
        biases = {"gate_b": "[{e},64]", "up_b": "[{e},64]", "down_b": "[{e},128]"}
    else:
        shapes = {"gate_up": "[{e},128,128]", "down": "[{e},128,64]"}
        biases = {"gate_up_b": "[{e},128]", "down_b": "[{e},128]"}
    declared = {n: f"{d}{s}" for (n, s), d in zip(shapes.items(), stacks)}
    declared |= {n: f"f32{s}" for n, s in biases.items()}
    text = "".join(f"  weight %{n} : {t.format(e=held)}\n" for n, t in declared.items())
    operands = ", ".join(f"%{n}" for n in declared)
    routing = ', routing = "topk_softmax"' if "swiglu" in attrs else ""
    graph = og.parse(
        f"graph m {{\n  input %x : f32[5,128]\n  input %logits : f32[5,6]\n{text}"
        f"  %y = moe(%x, %logits, {operands}) {{{attrs}{routing}}} : f32[5,128]\n"
        "  output %y\n}\n"
    )
    og.verify(graph)
    inputs, weights = random_inputs(graph, seed=3), random_weights(graph, seed=4)
    rng = np.random.default_rng(5)
    for name in biases:
        weights[name] = rng.standard_normal(weights[name].shape).astype(np.float32)
    want = run_reference(graph, inputs, weights)["y"]
    zeroed = {n: (0 * a if n in biases else a) for n, a in weights.items()}
    assert np.abs(run_reference(graph, inputs, zeroed)["y"] - want).max() > 0.1  # biases count
    node = graph.nodes[0]
    types = graph.value_types()
    args = [inputs.get(o, weights.get(o)) for o in node.operands]

    def refuse(*_: Any) -> None:
        raise AssertionError("an expert's matrix was decoded")

    monkeypatch.setattr(reference_moe, "expert_matrix", refuse)
    got = evaluate_quantized(node, args, [types[o] for o in node.operands], threads=2)
    a, b = np.asarray(got, np.float64), np.asarray(want, np.float64)
    assert a.shape == b.shape and np.abs(b).max() > 0.0
    assert np.abs(a - b).max() <= BOUND * max(1.0, np.abs(b).max())
