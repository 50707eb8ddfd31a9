"""transformers' mixture-of-experts models imported with one `moe` op a layer
(frontends/raising_moe.py): Mixtral, Qwen2-MoE (its shared expert beside the moe op) and
Qwen3-MoE with their default `grouped_mm` experts through torch.export, generating
transformers' greedy tokens on the CPU; `batched_mm` experts through torch.export and ONNX;
the source ops of the dispatch as the probe evaluates them against PyTorch; experts that are
not moe's (gpt-oss's) computed as gathered products."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the MoE import tests need PyTorch")
transformers = pytest.importorskip("transformers", reason="the MoE import tests need transformers")

import optgraph as og
from optgraph.frontends.moe_dispatch import DISPATCH_KERNELS
from optgraph.frontends.torch_export import from_torch
from optgraph.ir.graph import Node, TensorType
from optgraph.reference.interpreter import nmse, run_reference
from tests.frontends.numerics import assert_matches, imported_through, ops_of

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import hf_generate

PROMPT, NEW, LAYERS = 6, 16, 2
SMALL = {
    "vocab_size": 64, "hidden_size": 64, "num_hidden_layers": LAYERS, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64,
    "initializer_range": 0.3,  # wider than the default 0.02: varied tokens, clear winners
}  # fmt: skip


def _config(name: str) -> Any:
    t = transformers
    if name == "mixtral":  # 4 experts of width 64; softmax, top 2, renormalised
        return t.MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2)
    if name == "qwen2_moe":  # 6 experts of width 32, not renormalised, a gated shared expert
        return t.Qwen2MoeConfig(
            **SMALL, num_experts=6, num_experts_per_tok=2, moe_intermediate_size=32,
            shared_expert_intermediate_size=48, norm_topk_prob=False,
        )  # fmt: skip
    return t.Qwen3MoeConfig(  # 8 experts of width 32, renormalised; heads of 8, not 64 / 4
        **SMALL, head_dim=8, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
        norm_topk_prob=True,
    )  # fmt: skip


def _model(name: str) -> Any:
    torch.manual_seed(0)
    config = _config(name)
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    model.generation_config.eos_token_id = None  # exactly NEW tokens
    model.generation_config.pad_token_id = 0
    return model


@pytest.fixture(scope="module", params=["mixtral", "qwen2_moe", "qwen3_moe"])
def imported(request: pytest.FixtureRequest) -> tuple[str, Any, hf_generate.Steps]:
    model = _model(request.param)
    assert model.config._experts_implementation in (None, "grouped_mm")  # the default dispatch
    return request.param, model, hf_generate.import_steps(model, PROMPT, PROMPT + NEW)


def _moe_nodes(graph: og.Graph) -> list[Node]:
    return [n for n in graph.nodes if n.op == "moe"]


def test_each_layer_is_one_moe_op_reading_the_models_expert_stacks(imported) -> None:  # type: ignore[no-untyped-def]
    name, model, steps = imported
    config = model.config
    norm = name == "mixtral" or bool(config.norm_topk_prob)
    for graph in (steps.prefill, steps.decode):
        nodes = _moe_nodes(graph)
        assert len(nodes) == LAYERS
        for layer, node in enumerate(nodes):
            prefix = f"model.layers.{layer}.mlp"
            assert node.operands[2:] == (
                f"{prefix}.experts.gate_up_proj",
                f"{prefix}.experts.down_proj",
            )
            assert dict(node.attrs) == {"k": 2, **({"norm_topk": True} if norm else {})}
        ops = ops_of(graph)
        assert not any(op.startswith(("aten.", "transformers.")) for op in ops)
        assert "argmax" not in ops  # the router's top k is inside the moe op now
        if name == "qwen2_moe":  # the shared expert stays written out, beside the moe op
            assert ops.count("sigmoid") == LAYERS
            weights = {w.name for w in graph.weights}
            assert "model.layers.1.mlp.shared_expert.down_proj.weight" in weights


def test_prefill_logits_match_transformers(imported) -> None:  # type: ignore[no-untyped-def]
    _, model, steps = imported
    prompt = np.random.default_rng(1).integers(0, 64, (1, PROMPT))
    with torch.no_grad():
        want = model(torch.from_numpy(prompt)).logits.numpy().astype(np.float64)
    feed = hf_generate._prefill_feed(prompt)
    reference = run_reference(steps.prefill, feed, steps.prefill_weights)
    compiled = og.compile(steps.prefill, target="cpu").run(feed, steps.prefill_weights)
    logits = steps.prefill.output_names()[0]
    for got in (reference[logits], compiled[logits]):
        assert nmse(np.asarray(got, np.float64), want) <= 1e-10


def test_sixteen_greedy_tokens_equal_transformers(imported) -> None:  # type: ignore[no-untyped-def]
    _, model, steps = imported
    prompt = np.random.default_rng(3).integers(0, 64, (1, PROMPT))
    tokens = hf_generate.generate_cpu(steps, prompt, NEW)
    assert tokens == hf_generate.reference_tokens(model, prompt, NEW)
    assert len(tokens) == NEW and len(set(tokens)) > 8  # a sequence, not one token repeated


def _first_output(model: Any) -> Any:
    class FirstOutput(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, input_ids: Any) -> Any:
            return self.model(input_ids).logits

    return FirstOutput()


TOKENS = torch.tensor([[5, 9, 1, 33, 7, 2, 60]])


@pytest.mark.parametrize("onnx", [False, True])
def test_batched_mm_experts_raise_through_both_importers(onnx: bool) -> None:
    """transformers' `batched_mm` experts gather each token's expert matrices (`experts[ids]`):
    a dispatch of another spelling, the same moe (the ONNX exporter writes it as Gathers)."""
    model = _model("qwen2_moe")
    model.config._experts_implementation = "batched_mm"
    module = _first_output(model)
    with torch.no_grad():
        want = module(TOKENS).numpy()
    graph, weights = imported_through("onnx" if onnx else "torch", module, (TOKENS,))
    assert len(_moe_nodes(graph)) == LAYERS
    stacks = {s for n in _moe_nodes(graph) for s in n.operands[2:]}
    readers = {n.op for n in graph.nodes if stacks & set(n.operands)}
    assert len(stacks) == 2 * LAYERS and readers == {"moe"}  # no gathered expert matrices
    assert_matches(graph, weights, {graph.inputs[0].name: TOKENS.numpy()}, [want])


def _gathered(graph: og.Graph) -> int:
    """How many products read gathered expert matrices (get_rows of an `experts.` stack)."""
    stacks = {w.name for w in graph.weights if ".experts." in w.name and w.type.rank == 3}
    producers = {n.name: n for n in graph.nodes}
    gathers = set()
    for node in graph.nodes:
        if node.op == "get_rows":
            table = node.operands[0]
            source = producers.get(table)
            while source is not None and source.op == "reshape":
                table, source = source.operands[0], producers.get(source.operands[0])
            if table in stacks:
                gathers.add(node.name)
    return len(gathers)


def test_experts_the_moe_op_cannot_compute_import_as_gathered_products() -> None:
    """gpt-oss's experts (biases, a clamped SwiGLU, stacks stored [E,H,2F] with gate and up
    interleaved) with the default grouped_mm dispatch: no moe op; each (token, slot) pair's
    product reads its own gathered expert (raising_dense_experts.py), as transformers'
    batched_mm experts import; logits match."""
    torch.manual_seed(0)
    config = transformers.GptOssConfig(
        **SMALL, head_dim=16, num_local_experts=4, num_experts_per_tok=2
    )
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    module = _first_output(model)
    with torch.no_grad():
        want = module(TOKENS).numpy()
    graph, weights = from_torch(module, (TOKENS,))
    assert not _moe_nodes(graph) and _gathered(graph) == 2 * LAYERS  # gate_up and down a layer
    assert_matches(graph, weights, {graph.inputs[0].name: TOKENS.numpy()}, [want])


# -- the source ops the probe runs, against PyTorch ---------------------------------------------


def _node(op: str, typed: TensorType, **attrs: Any) -> Node:
    return Node("n", op, (), attrs, typed)


def test_dispatch_kernels_equal_pytorch() -> None:
    rng = np.random.default_rng(0)
    ids = rng.integers(0, 5, 24)
    t = torch.from_numpy(ids)
    sort = DISPATCH_KERNELS["aten.sort.default"]
    values, order = torch.sort(t, stable=True)
    i64 = TensorType("i64", (24,))
    assert np.array_equal(sort(_node("s", i64, dim=-1, result=0), [ids]), values.numpy())
    assert np.array_equal(sort(_node("s", i64, dim=-1, result=1), [ids]), order.numpy())
    down = sort(_node("s", i64, dim=-1, descending=True, result=0), [ids])
    assert np.array_equal(down, torch.sort(t, descending=True).values.numpy())

    histc = DISPATCH_KERNELS["aten.histc.default"]
    data = np.concatenate([rng.uniform(-1, 6, 50), [0.0, 4.0, 4.0, -1.0, 7.0]]).astype(np.float32)
    for bins, low, high in ((5, 0, 4), (3, 0, 0), (7, -0.5, 5.5)):
        want = torch.histc(torch.from_numpy(data), bins=bins, min=low, max=high).numpy()
        f32 = TensorType("f32", (bins,))
        got = histc(_node("h", f32, bins=bins, min=low, max=high), [data])
        assert np.array_equal(got, want), (bins, low, high)

    put = DISPATCH_KERNELS["aten.index_put.default"]
    perm = rng.permutation(24)
    base, rows = np.zeros(24, np.int64), np.arange(24, dtype=np.int64)
    want_put = torch.zeros(24, dtype=torch.int64).index_put(
        (torch.from_numpy(perm),), torch.arange(24)
    )
    assert np.array_equal(put(_node("p", i64, indices=1), [base, perm, rows]), want_put.numpy())
    with pytest.raises(ValueError):  # two index tensors: not evaluated (no raising)
        put(_node("p", i64, indices=2), [base, perm, perm, rows])

    pytest.importorskip("transformers.integrations.moe")  # torch.ops.transformers.grouped_mm_...
    grouped = DISPATCH_KERNELS["transformers.grouped_mm_fallback.default"]
    x = rng.standard_normal((24, 8)).astype(np.float32)
    stack = rng.standard_normal((5, 8, 6)).astype(np.float32)
    offsets = np.cumsum(np.bincount(np.sort(ids), minlength=5)).astype(np.int32)
    want_mm = torch.ops.transformers.grouped_mm_fallback(
        torch.from_numpy(x), torch.from_numpy(stack), torch.from_numpy(offsets)
    ).numpy()
    got_mm = grouped(_node("g", TensorType("f32", (24, 6))), [x, stack, offsets])
    assert np.allclose(got_mm, want_mm, rtol=1e-6, atol=1e-6)
