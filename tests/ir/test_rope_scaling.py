"""rope's scaling and partial rotary: the verifier's rules (located, full messages), the frequency
table against Hugging Face transformers' rope_init functions, and the reference kernel against
transformers' own rotary embedding and `apply_rotary_pos_emb`."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.errors import VerifyError
from optgraph.ir.graph import AttrValue, Node, TensorType
from optgraph.ir.op_rules_rope import rope_frequencies
from optgraph.ir.ops import attrs_with_defaults, infer_type
from optgraph.ir.parser import parse
from optgraph.ir.printer import format_literal
from optgraph.ir.verify import verify
from optgraph.reference.interpreter import nmse, run_reference

X, POS = TensorType("f32", (1, 5, 4, 16)), TensorType("i32", (5,))
LLAMA3: dict[str, AttrValue] = {
    "scaling": "llama3",
    "factor": 8.0,
    "low_freq_factor": 1.0,
    "high_freq_factor": 4.0,
    "original_max_position": 64,
}


def rope_error(**attrs: AttrValue) -> str:
    node = Node("y", "rope", ("x", "p"), attrs)
    with pytest.raises(VerifyError) as info:
        infer_type(node, [X, POS])
    return info.value.message


def test_rope_scaling_rules() -> None:
    for attrs in (LLAMA3, {"scaling": "linear", "factor": 2.0}, {"rotary_dim": 4}):
        assert infer_type(Node("y", "rope", ("x", "p"), attrs), [X, POS]) == X
    yarn = {"scaling": "yarn", "factor": 4.0, "original_max_position": 32, "truncate": False}
    assert infer_type(Node("y", "rope", ("x", "p"), yarn), [X, POS]) == X
    assert rope_error(factor=2.0) == "rope: attribute 'factor' does not apply to scaling = \"none\""
    assert rope_error(scaling="linear", factor=2.0, beta_fast=8.0) == (
        "rope: attribute 'beta_fast' does not apply to scaling = \"linear\""
    )
    assert rope_error(scaling="llama3", factor=8.0) == (
        "rope: scaling = \"llama3\" needs attribute 'low_freq_factor'"
    )
    assert rope_error(**{**LLAMA3, "high_freq_factor": 1.0}) == (
        "rope: attribute 'high_freq_factor' (1.0) must be greater than 'low_freq_factor' (1.0)"
    )
    assert (
        rope_error(scaling="linear", factor=0.0) == "rope: attribute 'factor' must be > 0, got 0.0"
    )
    assert rope_error(scaling="dynamic") == (
        'rope: attribute \'scaling\' must be one of "none", "linear", "llama3", "yarn", '
        'got "dynamic"'
    )
    for bad in (0, 5, 18):
        assert rope_error(rotary_dim=bad) == (
            f"rope: attribute 'rotary_dim' must be even and in 2..16 for f32[1,5,4,16], got {bad}"
        )


def test_rope_error_is_located_in_the_file() -> None:
    text = """graph g {
  input %x : f32[1,5,4,16]
  input %p : i32[5]
  %y = rope(%x, %p) {scaling = "linear"} : f32[1,5,4,16]
  output %y
}
"""
    with pytest.raises(VerifyError) as info:
        verify(parse(text, path="m.ir"))
    rendered = str(info.value)
    assert (
        "m.ir:4:" in rendered and "rope: scaling = \"linear\" needs attribute 'factor'" in rendered
    )


transformers = pytest.importorskip("transformers", reason="compared with transformers' rope")
torch = pytest.importorskip("torch", reason="transformers needs PyTorch")

# (transformers rope_parameters, optgraph attributes), head_dim 32.
SCALINGS: list[tuple[dict[str, object], dict[str, AttrValue]]] = [
    ({"rope_type": "default", "rope_theta": 10000.0}, {}),
    ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 4.0},
     {"scaling": "linear", "factor": 4.0}),
    ({"rope_type": "llama3", "rope_theta": 500000.0, "factor": 8.0, "low_freq_factor": 1.0,
      "high_freq_factor": 4.0, "original_max_position_embeddings": 256},
     {**LLAMA3, "theta": 500000.0, "original_max_position": 256}),
    ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0,
      "original_max_position_embeddings": 128},
     {"scaling": "yarn", "factor": 4.0, "original_max_position": 128}),
    ({"rope_type": "yarn", "rope_theta": 10000.0, "factor": 16.0, "beta_fast": 16.0,
      "beta_slow": 2.0, "original_max_position_embeddings": 64, "attention_factor": 1.3,
      "truncate": False, "partial_rotary_factor": 0.5},
     {"scaling": "yarn", "factor": 16.0, "beta_fast": 16.0, "beta_slow": 2.0,
      "original_max_position": 64, "attention_factor": 1.3, "truncate": False,
      "rotary_dim": 16}),
    ({"rope_type": "linear", "rope_theta": 10000.0, "factor": 2.0, "partial_rotary_factor": 0.25},
     {"scaling": "linear", "factor": 2.0, "rotary_dim": 8}),
]  # fmt: skip


def _config(parameters: dict[str, object]) -> object:
    partial = parameters.get("partial_rotary_factor")
    return transformers.LlamaConfig(
        hidden_size=128,
        num_attention_heads=4,
        num_key_value_heads=4,
        head_dim=32,
        max_position_embeddings=4096,
        rope_parameters=dict(parameters),
        **({"partial_rotary_factor": partial} if partial else {}),
    )


@pytest.mark.parametrize(("parameters", "attrs"), SCALINGS)
def test_frequencies_match_transformers(
    parameters: dict[str, object], attrs: dict[str, AttrValue]
) -> None:
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS

    config = _config(parameters)
    kind = str(parameters["rope_type"])
    if kind == "default":
        head = 32
        inv_freq = 1.0 / (10000.0 ** (torch.arange(0, head, 2).float() / head))
        attention_factor = 1.0
    else:
        inv_freq, attention_factor = ROPE_INIT_FUNCTIONS[kind](config, "cpu")
    node = Node("y", "rope", ("x", "p"), attrs)
    mine = rope_frequencies(attrs_with_defaults(node), 32)
    want = inv_freq.double().numpy()
    assert len(mine.inv_freq) == want.size == mine.rotary_dim // 2
    assert np.allclose(mine.inv_freq, want, rtol=3e-7, atol=0)
    assert mine.attention_factor == pytest.approx(attention_factor, rel=1e-7)


def _rotate_with_transformers(config: object, x: np.ndarray, pos: np.ndarray) -> np.ndarray:
    from transformers.models.llama import modeling_llama

    rotary = modeling_llama.LlamaRotaryEmbedding(config)
    xt = torch.from_numpy(x).transpose(1, 2)  # [B,H,S,D], the layout transformers rotates
    position_ids = torch.from_numpy(pos.astype(np.int64))[None, :]
    cos, sin = rotary(xt, position_ids)
    rotary_dim = cos.shape[-1]
    rotated, passed = xt[..., :rotary_dim], xt[..., rotary_dim:]
    rotated, _ = modeling_llama.apply_rotary_pos_emb(rotated, rotated, cos, sin)
    return torch.cat([rotated, passed], dim=-1).transpose(1, 2).numpy()


@pytest.mark.parametrize(("parameters", "attrs"), SCALINGS)
def test_reference_matches_transformers(
    parameters: dict[str, object], attrs: dict[str, AttrValue]
) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 7, 4, 32)).astype(np.float32)
    pos = np.array([0, 1, 2, 3, 17, 40, 99], np.int32)
    text = ", ".join(f"{k} = {format_literal(v)}" for k, v in attrs.items())
    graph = og.parse(f"""graph r {{
  input %x : f32[2,7,4,32]
  input %p : i32[7]
  %y = rope(%x, %p) {{{text}}} : f32[2,7,4,32]
  output %y
}}""")
    got = run_reference(graph, {"x": x, "p": pos}, {})["y"]
    want = _rotate_with_transformers(_config(parameters), x, pos)
    assert nmse(got.astype(np.float64), want.astype(np.float64)) <= 1e-10
