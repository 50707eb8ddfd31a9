"""gpt-oss's experts in the moe kernels (`codegen/kernels/moe.py`), run in the CPU emulator
against the reference: a bias after each stack (gate's, up's and down's, or gate_up's and
down's), `act = "swiglu_oai"` with a `limit` small enough that both clamps bite, float and
quantized stacks (mxfp4 as gpt-oss ships), decode and prefill, and a node holding some of the
experts (its biases the rows of those experts). Bounds: the GPU op tests' NMSE by dtype."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.support import cuda_emulator
from tests.support.gpu_support import BOUNDS

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")

E = 6


def _graph(
    tokens: int, x: str, stacks: tuple[str, ...], hidden: int, ffn: int, attrs: str
) -> og.Graph:
    """One moe with biases over inputs x and logits."""
    if len(stacks) == 3:
        shapes = {"gate": (ffn, hidden), "up": (ffn, hidden), "down": (hidden, ffn)}
        biases = {"gate_b": ffn, "up_b": ffn, "down_b": hidden}
    else:
        shapes = {"gate_up": (2 * ffn, hidden), "down": (hidden, ffn)}
        biases = {"gate_up_b": 2 * ffn, "down_b": hidden}
    lo_hi = attrs.split("experts = [")[1].split("]")[0] if "experts" in attrs else f"0, {E}"
    held = int(lo_hi.split(",")[1]) - int(lo_hi.split(",")[0])
    weights = "".join(
        f"  weight %{name} : {dtype}[{held},{rows},{cols}]\n"
        for (name, (rows, cols)), dtype in zip(shapes.items(), stacks)
    )
    weights += "".join(f"  weight %{name} : f32[{held},{n}]\n" for name, n in biases.items())
    operands = ", ".join(f"%{name}" for name in (*shapes, *biases))
    graph = og.parse(
        f"graph m {{\n  input %x : {x}[{tokens},{hidden}]\n  input %logits : f32[{tokens},{E}]\n"
        f"{weights}  %y = moe(%x, %logits, {operands}) {{{attrs}}} : {x}[{tokens},{hidden}]\n"
        "  output %y\n}\n"
    )
    og.verify(graph)
    return graph


OAI = 'act = "swiglu_oai", limit = 0.3, routing = "topk_softmax"'
CASES = [
    # tokens, x, stacks, hidden, ffn, attrs
    (1, "f32", ("f32", "f32", "f32"), 64, 32, f"{OAI}, k = 2"),
    (5, "f32", ("mxfp4", "mxfp4", "mxfp4"), 64, 64, f"{OAI}, k = 3"),
    (3, "f16", ("mxfp4", "f16"), 64, 32, f"{OAI}, k = 2"),
    (2, "bf16", ("q8_0", "bf16", "q8_0"), 64, 32, "k = 2, norm_topk = true"),
    (4, "f32", ("mxfp4", "mxfp4", "mxfp4"), 64, 64, f"{OAI}, experts = [2, 5], k = 2"),
]


@pytest.mark.parametrize(("tokens", "x", "stacks", "hidden", "ffn", "attrs"), CASES)
def test_biased_kernels_match_the_reference(
    tokens: int, x: str, stacks: tuple[str, ...], hidden: int, ffn: int, attrs: str
) -> None:
    graph = _graph(tokens, x, stacks, hidden, ffn, attrs)
    inputs, weights = random_inputs(graph, tokens), random_weights(graph, tokens)
    rng = np.random.default_rng(tokens)
    for name in [w.name for w in graph.weights if w.name.endswith("_b")]:
        weights[name] = rng.standard_normal(weights[name].shape).astype(np.float32) * 0.5
    want = run_reference(graph, inputs, weights)
    got = cuda_emulator.run_plan(lower_cuda(graph), inputs, weights, graph)
    value = want["y"].astype(np.float32)
    assert got["y"].dtype == want["y"].dtype and np.abs(value).max() > 0.0
    err = nmse(got["y"].astype(np.float32), value)
    assert err <= BOUNDS[x], err
    # The biases count: without them the reference differs by far more than the bound.
    zeroed = {n: (0 * a if n.endswith("_b") else a) for n, a in weights.items()}
    assert nmse(run_reference(graph, inputs, zeroed)["y"].astype(np.float32), value) > 100 * err
