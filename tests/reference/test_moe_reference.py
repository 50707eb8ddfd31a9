"""The reference semantics of `moe` (optgraph/reference/moe.py): against a float64 loop written
from docs/ir.md, against transformers' own Qwen3-MoE and Mixtral sparse blocks, routing's ties
and NaNs, quantized and f16 expert stacks (only the selected experts decoded), the fused gate_up
form, and the planned CPU executor (bit for bit the reference; its CPU kernels within their
round-off)."""

from __future__ import annotations

import itertools
import math
from typing import Any

import numpy as np
import pytest

import optgraph as og
from optgraph.reference import moe as moe_module
from optgraph.reference.dequantize import dequantize
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from optgraph.reference.moe import route
from optgraph.runtime.cpu.planned_executor import execute

E, F, H = 6, 32, 64


def _graph(
    tokens: int,
    k: int,
    attrs: str = "",
    stacks: tuple[str, str, str] = ("f32",) * 3,
    x: str = "f32",
    hidden: int = H,
) -> og.Graph:
    g, u, d = stacks
    extra = f", {attrs}" if attrs else ""
    return og.parse(
        f"""graph moe {{
  input %x : {x}[{tokens},{hidden}]
  input %logits : f32[{tokens},{E}]
  weight %gate : {g}[{E},{F},{hidden}]
  weight %up : {u}[{E},{F},{hidden}]
  weight %down : {d}[{E},{hidden},{F}]
  %y = moe(%x, %logits, %gate, %up, %down) {{k = {k}{extra}}} : {x}[{tokens},{hidden}]
  output %y
}}
"""
    )


def _act(g: np.ndarray, act: str) -> np.ndarray:
    if act == "silu":
        return g / (1.0 + np.exp(-g))
    if act == "gelu":
        return 0.5 * g * (1.0 + np.vectorize(math.erf)(g / math.sqrt(2.0)))
    return 0.5 * g * (1.0 + np.tanh(math.sqrt(2.0 / math.pi) * (g + 0.044715 * g**3)))


def _oracle(
    x: np.ndarray, logits: np.ndarray, w: dict[str, np.ndarray], k: int, routing: str,
    norm: bool, act: str,
) -> np.ndarray:  # fmt: skip
    """docs/ir.md's formula, token by token, in float64."""
    x, logits = x.astype(np.float64), logits.astype(np.float64)
    out = np.zeros_like(x)
    for t in range(len(x)):
        if routing == "softmax_topk":
            p = np.exp(logits[t] - logits[t].max())
            p /= p.sum()
            ids = sorted(range(E), key=lambda e: (-p[e], e))[:k]
            weights = p[ids] / (p[ids].sum() if norm else 1.0)
        else:
            ids = sorted(range(E), key=lambda e: (-logits[t][e], e))[:k]
            z = np.exp(logits[t][ids] - logits[t][ids].max())
            weights = z / z.sum()
        for e, weight in zip(ids, weights):
            gate, up, down = (w[name][e].astype(np.float64) for name in ("gate", "up", "down"))
            h = _act(gate @ x[t], act) * (up @ x[t])
            out[t] += weight * (down @ h)
    return out


@pytest.mark.parametrize(
    ("routing", "norm", "act", "tokens", "k"),
    [
        ("softmax_topk", False, "silu", 1, 2),
        ("softmax_topk", True, "silu", 5, 2),
        ("softmax_topk", True, "gelu", 3, 6),
        ("topk_softmax", False, "gelu_tanh", 4, 3),
        ("topk_softmax", False, "silu", 2, 1),
    ],
)
def test_matches_the_formula_in_float64(
    routing: str, norm: bool, act: str, tokens: int, k: int
) -> None:
    attrs = f'act = "{act}", norm_topk = {str(norm).lower()}, routing = "{routing}"'
    graph = _graph(tokens, k, attrs)
    og.verify(graph)
    inputs, weights = random_inputs(graph, 1), random_weights(graph, 1)
    got = run_reference(graph, inputs, weights)["y"]
    want = _oracle(inputs["x"], inputs["logits"], weights, k, routing, norm, act)
    assert got.dtype == np.float32
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_topk_softmax_equals_softmax_topk_renormalised() -> None:
    """Mixtral's top-k-then-softmax and Qwen3-MoE's softmax-top-k-renormalised are one
    function (the selection is monotone): equal within float32 rounding."""
    logits = np.random.default_rng(3).standard_normal((50, 16)).astype(np.float32)
    ids_a, w_a = route(logits, 4, "topk_softmax", False)
    ids_b, w_b = route(logits, 4, "softmax_topk", True)
    np.testing.assert_array_equal(ids_a, ids_b)
    np.testing.assert_allclose(w_a, w_b, rtol=1e-6)
    _, w_c = route(logits, 4, "softmax_topk", False)
    assert np.all(w_c.sum(axis=1) < 1.0) and np.all(w_c[:, 0] >= w_c[:, 1])


def test_ties_take_the_lower_expert_and_nan_counts_as_smallest() -> None:
    logits = np.array(
        [[0.5, 2.0, 2.0, 1.0, 2.0], [np.nan, 1.0, 3.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0, 1.0]],
        np.float32,
    )
    ids, weights = route(logits, 3, "topk_softmax", False)
    assert ids.tolist() == [[1, 2, 4], [2, 1, 3], [0, 1, 2]]
    np.testing.assert_allclose(weights[2], [1 / 3] * 3, rtol=1e-6)
    ids, _ = route(logits[[0, 2]], 2, "softmax_topk", True)
    assert ids.tolist() == [[1, 2], [0, 1]]


def _hf_block(arch: str, norm: bool) -> Any:
    transformers = pytest.importorskip("transformers")
    torch = pytest.importorskip("torch")
    if arch == "qwen3_moe":
        config = transformers.Qwen3MoeConfig(
            hidden_size=H, moe_intermediate_size=F, num_experts=E, num_experts_per_tok=2,
            norm_topk_prob=norm,
        )  # fmt: skip
        from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeSparseMoeBlock

        block = Qwen3MoeSparseMoeBlock(config)
    else:
        config = transformers.MixtralConfig(
            hidden_size=H, intermediate_size=F, num_local_experts=E, num_experts_per_tok=2
        )
        from transformers.models.mixtral.modeling_mixtral import MixtralSparseMoeBlock

        block = MixtralSparseMoeBlock(config)
    torch.manual_seed(0)
    with torch.no_grad():
        for p in block.parameters():
            p.copy_(torch.randn_like(p) * 0.2)
    return block.eval()


@pytest.mark.parametrize(
    ("arch", "norm", "routing"),
    [("qwen3_moe", True, "softmax_topk"), ("qwen3_moe", False, "softmax_topk"),
     ("mixtral", True, "softmax_topk"), ("mixtral", True, "topk_softmax")],
)  # fmt: skip
def test_matches_transformers_sparse_blocks(arch: str, norm: bool, routing: str) -> None:
    torch = pytest.importorskip("torch")
    block = _hf_block(arch, norm)
    gate_up = block.experts.gate_up_proj.detach().numpy()
    weights = {
        "router": block.gate.weight.detach().numpy(),
        "gate_up": gate_up,
        "down": block.experts.down_proj.detach().numpy(),
    }
    x = np.random.default_rng(2).standard_normal((7, H)).astype(np.float32)
    norm_attr = ", norm_topk = true" if norm and routing == "softmax_topk" else ""
    graph = og.parse(
        f"""graph hf {{
  input %x : f32[7,{H}]
  weight %router : f32[{E},{H}]
  weight %gate_up : f32[{E},{2 * F},{H}]
  weight %down : f32[{E},{H},{F}]
  %logits = matmul(%x, %router) {{transpose_b = true}} : f32[7,{E}]
  %y = moe(%x, %logits, %gate_up, %down) {{k = 2{norm_attr}, routing = "{routing}"}} : f32[7,{H}]
  output %y
}}
"""
    )
    got = run_reference(graph, {"x": x}, weights)["y"]
    with torch.no_grad():
        want = block(torch.from_numpy(x)[None])[0].numpy()
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_quantized_stacks_decode_only_the_selected_experts(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bit for bit the moe of the dequantized stacks, while decoding only the k experts' three
    matrices of a decode token (never all E)."""
    graph = _graph(1, 2, "norm_topk = true", ("q4_k", "q8_0", "mxfp4"), hidden=256)
    og.verify(graph)
    inputs, weights = random_inputs(graph, 4), random_weights(graph, 4)
    calls: list[tuple[str, tuple[int, ...]]] = []

    def counting(data: np.ndarray, dtype: str, shape: Any) -> np.ndarray:
        calls.append((dtype, tuple(shape)))
        return dequantize(data, dtype, shape)

    monkeypatch.setattr(moe_module, "dequantize", counting)
    got = run_reference(graph, inputs, weights)["y"]
    assert sorted(calls) == sorted(
        [("q4_k", (F, 256))] * 2 + [("q8_0", (F, 256))] * 2 + [("mxfp4", (256, F))] * 2
    )
    types = graph.value_types()
    plain = _graph(1, 2, "norm_topk = true", hidden=256)
    decoded = {
        name: dequantize(weights[name], types[name].dtype, types[name].shape)
        for name in ("gate", "up", "down")
    }
    want = run_reference(plain, inputs, decoded)["y"]
    np.testing.assert_array_equal(got, want)


def test_f16_stacks_and_an_f16_step() -> None:
    """f16 experts are widened expert by expert: the same bits as their f32 copies; an f16 x
    gives the f32 result rounded once."""
    graph = _graph(3, 2, "", ("f16", "bf16", "f16"), x="f16")
    og.verify(graph)
    inputs, weights = random_inputs(graph, 5), random_weights(graph, 5)
    got = run_reference(graph, inputs, weights)["y"]
    assert got.dtype == np.float16
    wide = _graph(3, 2)
    f32_weights = {n: np.asarray(a, np.float32) for n, a in weights.items()}
    f32_inputs = {"x": inputs["x"].astype(np.float32), "logits": inputs["logits"]}
    want = run_reference(wide, f32_inputs, f32_weights)["y"]
    np.testing.assert_array_equal(got, want.astype(np.float16))


def test_one_gate_up_stack_is_gate_then_up() -> None:
    graph = _graph(4, 3, 'routing = "topk_softmax"')
    inputs, weights = random_inputs(graph, 6), random_weights(graph, 6)
    fused = og.parse(
        og.print_graph(graph)
        .replace(f"  weight %gate : f32[{E},{F},{H}]\n  weight %up : f32[{E},{F},{H}]\n",
                 f"  weight %gate_up : f32[{E},{2 * F},{H}]\n")
        .replace("%gate, %up,", "%gate_up,")
    )  # fmt: skip
    og.verify(fused)
    stacked = {"gate_up": np.concatenate([weights["gate"], weights["up"]], axis=1)}
    stacked["down"] = weights["down"]
    np.testing.assert_array_equal(
        run_reference(fused, inputs, stacked)["y"], run_reference(graph, inputs, weights)["y"]
    )


@pytest.mark.parametrize("tokens", [1, 6])
def test_the_planned_cpu_executor_runs_it_bit_for_bit(tokens: int) -> None:
    graph = og.parse(
        f"""graph block {{
  input %x : f32[{tokens},256]
  weight %router : f32[{E},256]
  weight %gate_up : q4_k[{E},512,256]
  weight %down : q6_k[{E},256,256]
  weight %norm : f32[256]
  %h = rms_norm(%x, %norm) : f32[{tokens},256]
  %logits = matmul(%h, %router) {{transpose_b = true}} : f32[{tokens},{E}]
  %m = moe(%h, %logits, %gate_up, %down) {{k = 2, norm_topk = true}} : f32[{tokens},256]
  %y = add(%x, %m) : f32[{tokens},256]
  output %y
}}
"""
    )
    og.verify(graph)
    inputs, weights = random_inputs(graph, 7), random_weights(graph, 7)
    want = run_reference(graph, inputs, weights)["y"]
    program = og.compile(graph, target="cpu")
    got = execute(program.program, inputs, weights, seed=0, quantized="reference").outputs["y"]
    np.testing.assert_array_equal(got, want)
    assert np.abs(want - inputs["x"]).max() > 1e-3  # the experts contribute
    # `run` puts the experts' products on the CPU kernels: within their f32 round-off.
    native = program.run(inputs, weights=weights)["y"]
    assert np.abs(native - want).max() <= 1e-4 * np.abs(want).max()


def _part(graph: og.Graph, lo: int, hi: int) -> og.Graph:
    """`graph`'s moe holding experts lo..hi-1 only (its stacks cut to [hi-lo, ...])."""
    text = og.print_graph(graph).replace(f"[{E},", f"[{hi - lo},")
    return og.parse(text.replace("%down) {", f"%down) {{experts = [{lo}, {hi}], "))


def _part_weights(weights: dict[str, np.ndarray], lo: int, hi: int) -> dict[str, np.ndarray]:
    return {name: a[lo:hi] for name, a in weights.items()}


@pytest.mark.parametrize(
    ("k", "attrs", "cuts"),
    [
        (1, "", (0, 4, 6)),
        (2, "norm_topk = true", (0, 1, 6)),
        (2, 'routing = "topk_softmax"', (0, 3, 5, 6)),
        (3, 'act = "gelu"', (0, 2, 4, 6)),
        (6, "norm_topk = true", (0, 1, 2, 3, 4, 5, 6)),
    ],
)
def test_parts_over_a_partition_of_the_experts_sum_to_the_whole(
    k: int, attrs: str, cuts: tuple[int, ...]
) -> None:
    """Bit for bit for k <= 2 (the two terms of a token add in either order), within float32
    rounding of the reordered sum beyond; a part holding no selected expert of a token adds 0."""
    whole = _graph(7, k, attrs)
    inputs, weights = random_inputs(whole, seed=3), random_weights(whole, seed=4)
    want = run_reference(whole, inputs, weights)["y"]
    total = np.zeros_like(want)
    for lo, hi in itertools.pairwise(cuts):
        part = _part(whole, lo, hi)
        og.verify(part)
        got = run_reference(part, inputs, _part_weights(weights, lo, hi))["y"]
        ids, _ = route(inputs["logits"], k, "topk_softmax" if "topk_softmax" in attrs else
                       "softmax_topk", False)  # fmt: skip
        untouched = ~((ids >= lo) & (ids < hi)).any(axis=1)
        assert np.all(got[untouched] == 0.0) and np.any(got != 0.0)
        total += got
    if k <= 2:
        assert total.tobytes() == want.tobytes()
    else:
        np.testing.assert_allclose(total, want, rtol=1e-5, atol=1e-5 * np.abs(want).max())
        assert not np.array_equal(total, np.zeros_like(total))


def test_a_quantized_part_reads_its_own_experts() -> None:
    """q8_0 stacks cut by expert (whole blocks per expert): the parts' sum is the whole."""
    whole = _graph(4, 2, "norm_topk = true", stacks=("q8_0", "q8_0", "q8_0"))
    inputs, weights = random_inputs(whole, seed=5), random_weights(whole, seed=6)
    want = run_reference(whole, inputs, weights)["y"]
    parts = [(0, 2), (2, 6)]
    total = sum(
        run_reference(_part(whole, lo, hi), inputs, _part_weights(weights, lo, hi))["y"]
        for lo, hi in parts
    )
    assert np.asarray(total).tobytes() == want.tobytes()
