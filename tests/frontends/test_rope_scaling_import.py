"""Hugging Face transformers' rotary embedding (every scaling optgraph has, partial rotary) through
torch.export: the rope matcher raises it to one `rope` node with the scaling's attributes, and the
imported graph matches PyTorch (float32 NMSE <= 1e-10, reference and compiled CPU program).
Also the frequency fit alone (`rope_tables`) over a grid of configurations, and a table that only
looks like a scaled one staying on the general ops."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

import optgraph as og
from optgraph.frontends.rope_tables import rope_attributes
from optgraph.ir.op_rules_rope import rope_frequencies
from tests.frontends.numerics import assert_matches, ops_of

torch = pytest.importorskip("torch", reason="the torch importer tests need PyTorch")
transformers = pytest.importorskip("transformers", reason="compared with transformers' rope")
modeling_llama = pytest.importorskip("transformers.models.llama.modeling_llama")
rope_utils = pytest.importorskip("transformers.modeling_rope_utils")


def _config(parameters: dict[str, object], head: int = 32, partial: float | None = None) -> object:
    extra = {"partial_rotary_factor": partial} if partial else {}
    return transformers.LlamaConfig(
        hidden_size=4 * head,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=head,
        max_position_embeddings=1 << 17,
        rope_parameters=dict(parameters),
        **extra,
    )


class HfRope(torch.nn.Module):  # type: ignore[misc]
    """transformers' rotary embedding and apply_rotary_pos_emb on q `[B,H,S,D]`; with partial
    rotary, the first rotary_dim entries rotate and the rest are concatenated back (Phi, NeoX)."""

    def __init__(self, config: object) -> None:
        super().__init__()
        self.rotary = modeling_llama.LlamaRotaryEmbedding(config)

    def forward(self, q: torch.Tensor, position_ids: torch.Tensor) -> torch.Tensor:
        cos, sin = self.rotary(q, position_ids)
        rotary_dim = cos.shape[-1]
        rotated, passed = q[..., :rotary_dim], q[..., rotary_dim:]
        rotated, _ = modeling_llama.apply_rotary_pos_emb(rotated, rotated, cos, sin)
        if rotary_dim == q.shape[-1]:
            return rotated
        return torch.cat([rotated, passed], dim=-1)


CASES = [
    ({"rope_type": "default", "rope_theta": 10000.0}, None, {"theta": 10000.0}),
    ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0}, None,
     {"scaling": "linear", "factor": 4.0}),
    ({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 256}, None,
     {"scaling": "llama3", "factor": 8.0, "original_max_position": 256, "high_freq_factor": 4.0}),
    ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
      "original_max_position_embeddings": 128}, None,
     {"scaling": "yarn", "factor": 4.0, "original_max_position": 128}),
    ({"rope_type": "yarn", "rope_theta": 1000000.0, "factor": 8.0, "attention_factor": 1.25,
      "original_max_position_embeddings": 512}, 0.5,
     {"scaling": "yarn", "attention_factor": 1.25, "rotary_dim": 16}),
    # Llama's default rope ignores partial_rotary_factor; linear with factor 1 is the plain one.
    ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 1.0}, 0.25,
     {"rotary_dim": 8, "theta": 10000.0}),
    ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0}, 0.5,
     {"scaling": "linear", "rotary_dim": 16}),
]  # fmt: skip


@pytest.mark.parametrize(("parameters", "partial", "expected"), CASES)
def test_hf_rotary_embedding_raises_to_one_rope(
    parameters: dict[str, object], partial: float | None, expected: dict[str, object]
) -> None:
    torch.manual_seed(0)
    module = HfRope(_config(parameters, partial=partial)).eval()
    args = (torch.randn(2, 4, 6, 32), torch.tensor([[3, 4, 5, 6, 40, 41]]))
    graph, weights = og.from_torch(module, args)
    ops = ops_of(graph)
    assert ops.count("rope") == 1 and not {"cos", "sin", "concat"} & set(ops), ops
    rope = next(n for n in graph.nodes if n.op == "rope")
    for key, value in expected.items():
        assert rope.attrs[key] == value, (key, rope.attrs)
    with torch.no_grad():
        want = module(*args).numpy()
    assert_matches(graph, weights, {"q": args[0].numpy(), "position_ids": args[1].numpy()}, [want])


def test_a_table_that_is_no_scaling_stays_on_the_general_ops() -> None:
    config = _config({"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0})
    module = HfRope(config).eval()
    with torch.no_grad():
        module.rotary.inv_freq[5] *= 1.01  # no scaling makes this table
    args = (torch.randn(1, 4, 5, 32), torch.arange(5)[None])
    graph, weights = og.from_torch(module, args)
    assert "rope" not in ops_of(graph) and "cos" in ops_of(graph)
    with torch.no_grad():
        want = module(*args).numpy()
    assert_matches(graph, weights, {"q": args[0].numpy(), "position_ids": args[1].numpy()}, [want])


def _grid() -> list[dict[str, object]]:
    configs: list[dict[str, object]] = []
    for theta, factor, length in itertools.product((1e4, 5e5), (2.0, 8.0, 32.0), (64, 2048, 8192)):
        configs += [
            {"rope_type": "linear", "rope_theta": theta, "factor": factor},
            {"rope_type": "llama3", "rope_theta": theta, "factor": factor, "low_freq_factor": 2.0,
             "high_freq_factor": 8.0, "original_max_position_embeddings": length},
            {"rope_type": "yarn", "rope_theta": theta, "factor": factor,
             "original_max_position_embeddings": length},
            {"rope_type": "yarn", "rope_theta": theta, "factor": factor, "truncate": False,
             "original_max_position_embeddings": length},
        ]  # fmt: skip
    return configs


@pytest.mark.parametrize("head", [16, 64, 128])
def test_the_fit_names_the_scaling_of_every_table_of_a_grid(head: int) -> None:
    for parameters in _grid():
        kind = str(parameters["rope_type"])
        inv_freq, attention_factor = rope_utils.ROPE_INIT_FUNCTIONS[kind](
            _config(parameters, head), "cpu"
        )
        attrs = rope_attributes(inv_freq.numpy(), attention_factor)
        assert attrs is not None and attrs["scaling"] == kind, (parameters, attrs)
        fitted = rope_frequencies(attrs, head)
        assert np.allclose(fitted.inv_freq, inv_freq.double().numpy(), rtol=1e-5, atol=0)
        assert fitted.attention_factor == pytest.approx(attention_factor, rel=1e-5)


class HfRopeFromArange(HfRope):
    """A prefill exported without position inputs: the positions are an arange that folds, so
    the cos and sin tables reach the importer as constants."""

    def __init__(self, config: object, start: int) -> None:
        super().__init__(config)
        self.start = start

    def forward(self, q: torch.Tensor) -> torch.Tensor:  # type: ignore[override]
        positions = torch.arange(self.start, self.start + q.shape[2])[None]
        return super().forward(q, positions)


@pytest.mark.parametrize(
    ("parameters", "partial", "expected", "start"),
    [(*CASES[2], 37), (*CASES[4], 0), (*CASES[0], 5)],
)
def test_constant_tables_raise_to_rope_with_constant_positions(
    parameters: dict[str, object], partial: float | None, expected: dict[str, object], start: int
) -> None:
    torch.manual_seed(1)
    module = HfRopeFromArange(_config(parameters, partial=partial), start).eval()
    args = (torch.randn(1, 4, 6, 32),)
    graph, weights = og.from_torch(module, args)
    ops = ops_of(graph)
    assert ops.count("rope") == 1 and not {"cos", "sin", "concat"} & set(ops), ops
    rope = next(n for n in graph.nodes if n.op == "rope")
    assert weights[rope.operands[1].removesuffix(".flat")].tolist() == list(range(start, start + 6))
    for key, value in expected.items():
        if key != "original_max_position":  # with few rows the fit may pick an equivalent length
            assert rope.attrs[key] == value, (key, rope.attrs)
    with torch.no_grad():
        want = module(*args).numpy()
    assert_matches(graph, weights, {"q": args[0].numpy()}, [want])
