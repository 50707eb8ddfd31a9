"""Hugging Face models' attention masks through torch.export, against transformers' float32
logits (NMSE <= 1e-10): in a prefill without padding the masks are pure functions of positions,
so Llama's becomes `attention {causal = true}` and Mistral's sliding window
`attention {causal = true, window = W}`. (A padded batch's mask indexes the attention_mask input
with aten.index.Tensor, which the importer does not map yet.)"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch")
transformers = pytest.importorskip("transformers", reason="needs transformers")

from optgraph.frontends.torch_export import from_torch
from optgraph.ir.ops import attrs_with_defaults
from tests.frontends.numerics import assert_matches


class Logits(torch.nn.Module):
    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model = model

    def forward(self, input_ids, attention_mask=None):  # type: ignore[no-untyped-def]
        return self.model(
            input_ids=input_ids, attention_mask=attention_mask, use_cache=False
        ).logits


def _small(config_class: type, **extra: object) -> torch.nn.Module:
    config = config_class(
        vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
        attn_implementation="sdpa", **extra,
    )  # fmt: skip
    torch.manual_seed(0)
    return Logits(transformers.AutoModelForCausalLM.from_config(config).eval())


def _check(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> list[dict[str, object]]:
    with torch.no_grad():
        expected = module(*args).numpy()
    graph, weights = from_torch(module, args)
    inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, args)}
    assert_matches(graph, weights, inputs, [expected])
    nodes = [n for n in graph.nodes if n.op == "attention"]
    return [{**attrs_with_defaults(n), "operands": len(n.operands)} for n in nodes]


def test_mistral_sliding_window_becomes_the_window_attribute() -> None:
    module = _small(transformers.MistralConfig, sliding_window=4)
    ids = torch.randint(0, 64, (1, 9), generator=torch.Generator().manual_seed(1))
    for attrs in _check(module, (ids,)):
        assert attrs["causal"] and attrs["window"] == 4 and attrs["operands"] == 3


@pytest.mark.slow
def test_llama_causal_mask_becomes_causal() -> None:
    module = _small(transformers.LlamaConfig)
    ids = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(2))
    for attrs in _check(module, (ids,)):
        assert attrs["causal"] and not attrs["window"] and attrs["operands"] == 3
