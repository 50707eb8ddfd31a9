"""The moe kernels (`codegen/kernels/moe.py`) in the CPU emulator against the reference: decode
(one token) and prefill (several), f32/f16/bf16 activations, float and quantized expert stacks
(every block decoder through `og_dq32_<type>`), both routings and the activations, the fused
gate_up form; the rows of unselected experts are never read (NaN there changes nothing); the
default pipeline leaves a moe out of every region and runs planned; k beyond the route kernel's
limit is a CodegenError naming it. Bounds: the GPU op tests' NMSE by dtype."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.api.programs import plan_graph
from optgraph.codegen.cuda_dispatch import node_code, scratch_bytes
from optgraph.codegen.cuda_source import CodegenError, Launch
from optgraph.codegen.kernels import moe as moe_kernels
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.ir.graph import QUANT_BLOCKS, TensorType
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from optgraph.reference.moe import route
from tests.support import cuda_emulator
from tests.support.gpu_support import BOUNDS

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")

E = 6


def _graph(
    tokens: int,
    x: str,
    stacks: tuple[str, ...],
    hidden: int,
    ffn: int,
    attrs: str = "k = 2, norm_topk = true",
) -> og.Graph:
    """One moe over inputs x and logits; three stacks (gate, up, down) or two (gate_up, down)."""
    if len(stacks) == 3:
        shapes = {"gate": (ffn, hidden), "up": (ffn, hidden), "down": (hidden, ffn)}
    else:
        shapes = {"gate_up": (2 * ffn, hidden), "down": (hidden, ffn)}
    weights = "".join(
        f"  weight %{name} : {dtype}[{E},{rows},{cols}]\n"
        for (name, (rows, cols)), dtype in zip(shapes.items(), stacks)
    )
    operands = ", ".join(f"%{name}" for name in shapes)
    graph = og.parse(
        f"graph m {{\n  input %x : {x}[{tokens},{hidden}]\n  input %logits : f32[{tokens},{E}]\n"
        f"{weights}  %y = moe(%x, %logits, {operands}) {{{attrs}}} : {x}[{tokens},{hidden}]\n"
        "  output %y\n}\n"
    )
    og.verify(graph)
    return graph


def _check(graph: og.Graph, seed: int = 0, planned: bool = False) -> dict[str, np.ndarray]:
    inputs, weights = random_inputs(graph, seed), random_weights(graph, seed)
    want = run_reference(graph, inputs, weights)
    source = plan_graph(graph, "default") if planned else graph
    got = cuda_emulator.run_plan(lower_cuda(source), inputs, weights, source)
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape
        err = nmse(got[name].astype(np.float32), value.astype(np.float32))
        assert err <= BOUNDS[str(graph.value_types()[name].dtype)], (name, err)
        assert np.abs(value.astype(np.float32)).max() > 0.0
    return got


CASES = [
    # tokens, x, stacks, hidden, ffn, attrs
    (1, "f32", ("f32", "f32", "f32"), 64, 32, "k = 2, norm_topk = true"),
    (1, "f16", ("f16", "f16", "f16"), 96, 40, "k = 3"),
    (5, "bf16", ("bf16", "f32", "bf16"), 64, 24, 'act = "gelu", k = 2, routing = "topk_softmax"'),
    (1, "f16", ("q4_k", "q5_k", "q6_k"), 256, 256, "k = 2, norm_topk = true"),
    (3, "f32", ("q8_0", "q4_0", "q4_1"), 64, 32, 'act = "gelu_tanh", k = 2'),
    (4, "f16", ("q5_0", "mxfp4"), 64, 32, 'k = 4, routing = "topk_softmax"'),
    (2, "f32", ("f16", "q8_0"), 64, 64, "k = 1"),
]


@pytest.mark.parametrize(("tokens", "x", "stacks", "hidden", "ffn", "attrs"), CASES)
def test_kernels_match_the_reference(
    tokens: int, x: str, stacks: tuple[str, ...], hidden: int, ffn: int, attrs: str
) -> None:
    graph = _graph(tokens, x, stacks, hidden, ffn, attrs)
    node = graph.nodes[0]
    types = graph.value_types()
    operand_types = [types[o] for o in node.operands]
    work = node_code(node, operand_types)
    assert [w.kernel.name.split("_")[2] for w in work if isinstance(w, Launch)] == [
        "route", "gate", "down"
    ]  # fmt: skip
    k = int(attrs.split("k = ")[1].split(",")[0])
    assert scratch_bytes(node, operand_types) >= tokens * k * (8 + 4 * ffn)
    for dtype in set(stacks) & set(QUANT_BLOCKS):  # the existing block decoders, declared once
        source = "".join(w.kernel.source for w in work if isinstance(w, Launch))
        assert f"og_dq32_{dtype}(" in source
    _check(graph, seed=tokens)


def test_grid_y_strides_past_its_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    """More (token, slot) pairs and tokens than grid.y holds (CUDA: 65535) loop over grid.y."""
    monkeypatch.setattr(moe_kernels, "MAX_GRID_Y", 2)
    graph = _graph(5, "f32", ("q8_0", "f32", "f16"), 64, 32, "k = 3")
    types = graph.value_types()
    work = node_code(graph.nodes[0], [types[o] for o in graph.nodes[0].operands])
    assert [w.grid[1] for w in work if isinstance(w, Launch)] == [1, 2, 2]
    _check(graph, seed=8)


def test_unselected_experts_are_never_read() -> None:
    """Every expert but the decode token's two holds NaN (float rows) or NaN scales (q8_0
    blocks): the result is still the reference's of the two."""
    graph = _graph(1, "f32", ("f32", "q8_0", "f32"), 64, 32)
    inputs, weights = random_inputs(graph, 3), random_weights(graph, 3)
    ids, _ = route(inputs["logits"], 2, "softmax_topk", True)
    others = [e for e in range(E) if e not in ids[0]]
    want = run_reference(graph, inputs, weights)["y"]
    poisoned = {name: a.copy() for name, a in weights.items()}
    poisoned["gate"][others] = np.nan
    poisoned["down"][others] = np.nan
    blocks = poisoned["up"].reshape(E, -1, QUANT_BLOCKS["q8_0"][1])
    blocks[others, :, 0:2] = np.frombuffer(np.float16(np.nan).tobytes(), np.uint8)
    got = cuda_emulator.run_plan(lower_cuda(graph), inputs, poisoned)["y"]
    assert not np.isnan(got).any()
    assert nmse(got, want) <= BOUNDS["f32"]


def test_the_default_pipeline_leaves_moe_alone_and_runs_planned() -> None:
    graph = og.parse(
        f"""graph block {{
  input %x : f16[2,64]
  weight %router : f16[{E},64]
  weight %gate : q8_0[{E},32,64]
  weight %up : q8_0[{E},32,64]
  weight %down : f16[{E},64,32]
  weight %norm : f16[64]
  %h = rms_norm(%x, %norm) : f16[2,64]
  %logits = matmul(%h, %router) {{transpose_b = true}} : f16[2,{E}]
  %m = moe(%h, %logits, %gate, %up, %down) {{k = 2, norm_topk = true}} : f16[2,64]
  %s = scale(%m) {{factor = 0.5}} : f16[2,64]
  %y = add(%x, %s) : f16[2,64]
  output %y
}}
"""
    )
    og.verify(graph)
    fused = run_pipeline(graph, "default")
    moes = [n for n in fused.nodes if n.op == "moe"]
    assert len(moes) == 1 and moes[0].operands[0] == "h"
    bodies = [n.body for n in fused.nodes if n.body is not None]
    assert all(inner.op != "moe" for body in bodies for inner in body.nodes)
    _check(graph, seed=1, planned=True)


def test_more_experts_a_token_than_the_route_kernel_takes() -> None:
    k = moe_kernels.MAX_K + 1
    graph = og.parse(
        f"graph m {{\n  input %x : f32[1,32]\n  input %l : f32[1,{k}]\n"
        f"  weight %gu : f32[{k},64,32]\n  weight %d : f32[{k},32,32]\n"
        f"  %y = moe(%x, %l, %gu, %d) {{k = {k}}} : f32[1,32]\n  output %y\n}}\n"
    )
    og.verify(graph)
    types = graph.value_types()
    node = graph.nodes[0]
    with pytest.raises(CodegenError, match=f"moe: k = {k} experts a token; the CUDA kernels"):
        node_code(node, [types[o] for o in node.operands])
    assert TensorType("f32", (1, 32)) == types["y"]


def _parts_graph(tokens: int, x: str, stacks: tuple[str, ...], hidden: int, ffn: int,
                 cut: int, attrs: str) -> og.Graph:  # fmt: skip
    """The moe of `_graph` as two parts, experts [0, cut) and [cut, E), added."""
    if len(stacks) == 3:
        shapes = {"gate": (ffn, hidden), "up": (ffn, hidden), "down": (hidden, ffn)}
    else:
        shapes = {"gate_up": (2 * ffn, hidden), "down": (hidden, ffn)}
    lines = [f"  input %x : {x}[{tokens},{hidden}]", f"  input %logits : f32[{tokens},{E}]"]
    result = f"{x}[{tokens},{hidden}]"
    for lo, hi in ((0, cut), (cut, E)):
        lines += [
            f"  weight %{name}.e{lo}_{hi} : {dtype}[{hi - lo},{rows},{cols}]"
            for (name, (rows, cols)), dtype in zip(shapes.items(), stacks)
        ]
    for lo, hi in ((0, cut), (cut, E)):
        operands = ", ".join(f"%{name}.e{lo}_{hi}" for name in shapes)
        lines.append(
            f"  %y.e{lo}_{hi} = moe(%x, %logits, {operands}) "
            f"{{experts = [{lo}, {hi}], {attrs}}} : {result}"
        )
    lines.append(f"  %y = add(%y.e0_{cut}, %y.e{cut}_{E}) : {result}")
    graph = og.parse("graph parts {\n" + "\n".join(lines) + "\n  output %y\n}\n")
    og.verify(graph)
    return graph


@pytest.mark.parametrize(
    ("tokens", "x", "stacks", "cut", "attrs"),
    [
        (1, "f32", ("f32", "f32", "f32"), 4, "k = 2, norm_topk = true"),
        (5, "f32", ("q4_k", "q4_k", "q8_0"), 2, "k = 3"),
        (3, "f16", ("q8_0", "q8_0"), 5, 'k = 2, routing = "topk_softmax"'),
    ],
)
def test_parts_of_the_experts_match_the_reference(
    tokens: int, x: str, stacks: tuple[str, ...], cut: int, attrs: str
) -> None:
    """Each part's kernels skip the other part's experts (their slots add nothing) and index
    the part's stacks from its first expert; parts on [0, cut) and [cut, E) add up to the
    reference of the parts (and that of the whole, checked in tests/reference)."""
    hidden = 256 if "q4_k" in stacks else 64
    graph = _parts_graph(tokens, x, stacks, hidden, 32, cut, attrs)
    types = graph.value_types()
    for node in graph.nodes[:2]:
        source = "".join(
            w.kernel.source
            for w in node_code(node, [types[o] for o in node.operands])
            if isinstance(w, Launch)
        )
        lo = 0 if node.name == f"y.e0_{cut}" else cut
        hi = cut if lo == 0 else E
        assert f"if (e < {lo} || e >= {hi}) continue;" in source
    got = _check(graph, seed=tokens)
    # Against the whole node: one moe over the joined stacks.
    whole = _graph(tokens, x, stacks, hidden, 32, attrs)
    inputs, weights = random_inputs(graph, tokens), random_weights(graph, tokens)
    joined = {
        name: np.concatenate([weights[f"{name}.e0_{cut}"], weights[f"{name}.e{cut}_{E}"]])
        for name in ("gate", "up", "down", "gate_up")
        if f"{name}.e0_{cut}" in weights
    }
    want = run_reference(whole, inputs, joined)["y"]
    assert nmse(got["y"].astype(np.float32), want.astype(np.float32)) <= BOUNDS[x]
