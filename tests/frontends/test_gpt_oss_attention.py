"""gpt-oss's attention with sinks (the softmax over the scores and one more column, a logit per
query head, that column dropped after it) raised into `attention {sinks = true}`
(frontends/raising_attention.py): a random-weight transformers GptOss model from a small config,
a sliding-window layer and a full one, through torch.export and ONNX, its logits equal to
transformers'; decode steps (`hf_generate`) whose attention reads kv_len and the sinks,
generating transformers' greedy tokens; patterns that only look alike are left written out.
Its rope (two halves rotated by half-width tables, `raising_half_rope.py`) is raised too."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the gpt-oss import tests need PyTorch")
transformers = pytest.importorskip("transformers", reason="the gpt-oss tests need transformers")

import optgraph as og
from optgraph.frontends.torch_export import from_torch
from optgraph.ir.constants import with_constants
from optgraph.ir.graph import Node
from optgraph.reference.interpreter import nmse, run_reference
from tests.frontends.numerics import assert_matches, imported_through

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import hf_generate

LAYERS, WINDOW, PROMPT, NEW = 2, 3, 6, 16
TOKENS = torch.tensor([[5, 9, 1, 33, 7, 2, 60]])


def _model(layer_types: list[str], experts: str | None = None, window: int = WINDOW) -> Any:
    torch.manual_seed(0)
    config = transformers.GptOssConfig(
        vocab_size=64, hidden_size=64, num_hidden_layers=LAYERS, num_attention_heads=4,
        num_key_value_heads=2, head_dim=16, intermediate_size=64, max_position_embeddings=64,
        initializer_range=0.3, num_local_experts=4, num_experts_per_tok=2, sliding_window=window,
        layer_types=layer_types,
    )  # fmt: skip
    config._attn_implementation = "eager"
    if experts is not None:
        config._experts_implementation = experts
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():  # sinks of either sign and some size: they change the result
        for layer in model.model.layers:
            layer.self_attn.sinks.copy_(torch.randn(4) * 2.0)
    model.generation_config.eos_token_id = None  # exactly NEW tokens
    model.generation_config.pad_token_id = 0
    return model


class _Logits(torch.nn.Module):
    def __init__(self, model: Any) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids: Any) -> Any:
        return self.model(input_ids).logits


def _attention(graph: og.Graph) -> list[Node]:
    return [n for n in graph.nodes if n.op == "attention"]


def _no_written_attention(graph: og.Graph) -> None:
    """No softmax or row maximum over 4-D scores left (the router's [T,E] softmax stays)."""
    types = graph.value_types()
    assert not any(n.op in ("softmax", "max") and types[n.name].rank == 4 for n in graph.nodes)


@pytest.mark.parametrize("onnx", [False, True])
def test_prefill_attention_with_sinks_is_raised(onnx: bool) -> None:
    """Layer 0 slides (window 3), layer 1 sees every earlier key; both read their sinks."""
    model = _model(["sliding_attention", "full_attention"], "batched_mm" if onnx else None)
    module = _Logits(model)
    with torch.no_grad():
        want = module(TOKENS).numpy()
    graph, weights = imported_through("onnx" if onnx else "torch", module, (TOKENS,))
    nodes = _attention(graph)
    assert len(nodes) == LAYERS
    for layer, node in enumerate(nodes):
        assert node.attrs.get("sinks") and node.attrs.get("causal")
        assert node.attrs.get("window", 0) == (WINDOW if layer == 0 else 0)
        assert len(node.operands) == 4  # q, k, v, sinks
        sinks = model.model.layers[layer].self_attn.sinks.detach().numpy()
        np.testing.assert_array_equal(with_constants(graph, weights)[node.operands[3]], sinks)
    _no_written_attention(graph)
    _rope_raised(graph)
    assert_matches(graph, weights, {graph.inputs[0].name: TOKENS.numpy()}, [want])


def _rope_raised(graph: og.Graph) -> None:
    """q's and k's rope a layer, with gpt-oss's yarn scaling; no rotation left written out."""
    ropes = [n for n in graph.nodes if n.op == "rope"]
    assert len(ropes) == 2 * LAYERS
    assert all(n.attrs.get("scaling") == "yarn" and n.attrs.get("factor") == 32.0 for n in ropes)
    assert not any(n.op in ("cos", "sin", "neg", "sub") and graph.value_types()[n.name].rank == 4
                   for n in graph.nodes)  # fmt: skip


@pytest.mark.parametrize("window", [WINDOW, 128])
def test_decode_steps_read_kv_len_and_sinks_and_generate_transformers_tokens(window: int) -> None:
    """A sliding layer (window 3, shorter than the prompt; or 128, longer than the cache) and a
    full one: the decode step's attention reads kv_len, the window and the sinks; 16 greedy
    tokens equal transformers'."""
    model = _model(["sliding_attention", "full_attention"], window=window)
    steps = hf_generate.import_steps(model, PROMPT, PROMPT + NEW)
    for graph, operands in ((steps.prefill, 4), (steps.decode, 5)):
        nodes = _attention(graph)
        assert len(nodes) == LAYERS
        assert all(n.attrs.get("sinks") and len(n.operands) == operands for n in nodes)
        assert all(n.operands[-1].endswith("self_attn.sinks") for n in nodes)
        assert nodes[0].attrs.get("window", 0) == (window if window < PROMPT + NEW else 0)
        assert "window" not in nodes[1].attrs
        _rope_raised(graph)
    prompt = np.random.default_rng(3).integers(0, 64, (1, PROMPT))
    tokens = hf_generate.generate_cpu(steps, prompt, NEW)
    assert tokens == hf_generate.reference_tokens(model, prompt, NEW)
    assert len(set(tokens)) > 4  # a sequence, not one token repeated


class _Sinks(torch.nn.Module):
    """Attention with a sink column: `column(sinks, q)` makes it [B,H,Sq,1]; `shift`: the row
    maximum subtracted before the softmax; `drop_last`: the column dropped is the sinks'."""

    def __init__(self, sinks: Any, shift: bool = True, drop_last: bool = True) -> None:
        super().__init__()
        self.sinks = torch.nn.Parameter(sinks)
        self.shift, self.drop_last = shift, drop_last

    def forward(self, q: Any, k: Any, v: Any) -> Any:
        scores = torch.matmul(q, k.transpose(2, 3)) * 0.3
        b, h, s, _ = q.shape
        column = self.sinks.reshape(1, h, -1, 1).expand(b, h, s, 1)
        logits = torch.cat([scores, column], dim=-1)
        if self.shift:
            logits = logits - logits.max(dim=-1, keepdim=True).values
        probs = torch.softmax(logits, dim=-1)
        probs = probs[..., :-1] if self.drop_last else probs[..., 1:]
        return torch.matmul(probs, v)


def _imported(module: torch.nn.Module, onnx: bool = False) -> og.Graph:
    torch.manual_seed(1)
    args = tuple(torch.randn(2, 4, 5, 8) for _ in range(3))
    with torch.no_grad():
        want = module(*args).numpy()
    graph, weights = imported_through("onnx" if onnx else "torch", module, args)
    inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, args)}
    assert_matches(graph, weights, inputs, [want])
    return graph


@pytest.mark.parametrize("onnx", [False, True])
@pytest.mark.parametrize("shift", [True, False])
def test_a_sink_column_becomes_the_sinks_operand(shift: bool, onnx: bool) -> None:
    graph = _imported(_Sinks(torch.randn(4) * 2, shift), onnx)
    (node,) = _attention(graph)
    assert node.attrs == {"sinks": True, "scale": pytest.approx(0.3)}
    assert graph.value_types()[node.operands[3]].shape == (4,)
    _no_written_attention(graph)


def test_columns_that_are_not_sinks_stay_written_out() -> None:
    """A column that differs along the queries, and a softmax whose first column is dropped
    (not the extra one): still correct, not attention."""
    for module in (_Sinks(torch.randn(4 * 5)), _Sinks(torch.randn(4), drop_last=False)):
        graph = _imported(module)
        assert not _attention(graph) and any(n.op == "softmax" for n in graph.nodes)


class _HalfRope(torch.nn.Module):
    """gpt-oss's rotation of q [B,H,S,D] by half-width tables of the positions (`tables`:
    cos and sin of pos · 10000^(-2i/D), else tables that are no rope's)."""

    def __init__(self, tables: bool = True) -> None:
        super().__init__()
        self.tables = tables

    def forward(self, q: Any, pos: Any) -> Any:
        half = q.shape[-1] // 2
        inv_freq = 10000.0 ** (-torch.arange(half, dtype=torch.float32) / half)
        angles = pos.float()[:, None] * inv_freq[None, :]
        cos, sin = (angles.cos(), angles.sin()) if self.tables else (angles, angles * 0.5)
        cos, sin = cos[None, None], sin[None, None]
        first, second = torch.chunk(q, 2, dim=-1)
        return torch.cat((first * cos - second * sin, second * cos + first * sin), dim=-1)


@pytest.mark.parametrize("tables", [True, False])
def test_half_table_rope(tables: bool) -> None:
    """A rope's tables raise to one rope (theta 10000, no scaling); other tables stay products,
    still equal to PyTorch's (the rewrite to the rotate-half spelling keeps every value)."""
    torch.manual_seed(2)
    q, pos = torch.randn(1, 2, 5, 16), torch.tensor([3, 4, 5, 6, 7])
    module = _HalfRope(tables)
    with torch.no_grad():
        want = module(q, pos).numpy()
    graph, weights = from_torch(module, (q, pos))
    ropes = [n for n in graph.nodes if n.op == "rope"]
    if tables:
        assert len(ropes) == 1 and ropes[0].attrs.get("theta", 10000.0) == pytest.approx(10000.0)
        assert "scaling" not in ropes[0].attrs
    else:
        assert not ropes and any(n.op == "neg" for n in graph.nodes)  # rewritten, not raised
    inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, (q, pos))}
    assert_matches(graph, weights, inputs, [want])


def test_bf16_model_raises_its_sinks_and_is_as_close_as_transformers() -> None:
    """A bf16 gpt-oss (bf16 sinks, the router's top k over bf16 logits): attention with its
    sinks raised; the logits at most 1.5 times as far from the f32 model's as transformers' own
    bf16 logits are (each run rounds differently)."""
    model = _model(["sliding_attention", "full_attention"])
    truth_model = _Logits(model)
    with torch.no_grad():
        truth = truth_model(TOKENS).numpy().astype(np.float64)
    module = _Logits(model.to(torch.bfloat16))
    with torch.no_grad():
        theirs = module(TOKENS).float().numpy().astype(np.float64)
    graph, weights = from_torch(module, (TOKENS,))
    nodes = _attention(graph)
    assert len(nodes) == LAYERS and all(n.attrs.get("sinks") for n in nodes)
    assert all(graph.value_types()[n.operands[3]].dtype == "bf16" for n in nodes)
    _no_written_attention(graph)
    got = run_reference(graph, {graph.inputs[0].name: TOKENS.numpy()}, weights)
    ours = np.asarray(got[graph.output_names()[0]], np.float64)
    assert nmse(ours, truth) <= 1.5 * nmse(theirs, truth)
