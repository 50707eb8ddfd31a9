"""Small mixture-of-experts GGUF files for the importer's tests, laid out as llama.cpp's converter
lays them out: `qwen3moe` (Qwen3-MoE) and Mixtral-style `llama` files with experts, written from
transformers models built from configs with seeded random weights.

`hf_moe_model(arch)` builds the model (`qwen3moe`: `Qwen3MoeForCausalLM`; `mixtral`:
`MixtralForCausalLM`); `write_moe_gguf(model, path, arch, ftype)` writes it: the llama-family keys
(`gguf_models.new_writer`), `expert_count`, `expert_used_count`, `expert_feed_forward_length`
(qwen3moe), the router as `blk.N.ffn_gate_inp.weight` (F32, as llama.cpp keeps it), the stacked
experts as `ffn_gate_exps`, `ffn_up_exps` `[E,F,H]` and `ffn_down_exps` `[E,H,F]` (transformers'
`gate_up_proj` split in its two halves), q/k rows permuted in `llama` files. Matrices and stacks
in `ftype`: F32, F16, Q8_0 (`gguf.quants.quantize`), or `Q4_K_M`, llama.cpp's mix in short with
valid random blocks (`reference.dequantize.random_blocks`; the file is then the model): q6_k for
`output.weight`, `attn_v` and the down experts, q4_k elsewhere (rows must be multiples of 256).

The oracles: `load_qwen3moe` is transformers' own GGUF loading (its GGUF config mapping reads no
`expert_feed_forward_length`, so the file's value is passed as `moe_intermediate_size`);
transformers loads a `llama` file with experts as a dense Llama, ignoring the experts, so
`mixtral_from_file` builds a `MixtralForCausalLM` from the file's metadata and copies in its
tensors, read with `gguf.GGUFReader` and dequantized by `gguf.quants.dequantize` (q/k rows
un-permuted as transformers does for llama files).
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from optgraph.ir.graph import TensorType
from optgraph.reference.dequantize import random_blocks
from tests.frontends import gguf_models

MOE_SIZES: dict[str, Any] = {
    "hidden_size": 64,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "vocab_size": 256,
    "max_position_embeddings": 256,
    "rms_norm_eps": 1e-5,
    "initializer_range": 0.2,
    "num_experts_per_tok": 2,
}
ARCHS = {
    "qwen3moe": ("Qwen3MoeConfig", {"num_experts": 8, "moe_intermediate_size": 32,
                                    "intermediate_size": 96, "head_dim": 16,
                                    "norm_topk_prob": True}),
    "mixtral": ("MixtralConfig", {"num_local_experts": 6, "intermediate_size": 32}),
}  # fmt: skip
# K-quant rows are multiples of 256: hidden, the experts' width, the attention's heads · head_dim.
K_QUANT_SIZES = {"hidden_size": 256, "moe_intermediate_size": 256, "intermediate_size": 256}
K_QUANT_SIZES |= {"head_dim": 64}
NAMES = gguf_models.HF_TO_GGUF | {"mlp.gate": "ffn_gate_inp"}


def hf_moe_model(arch: str, seed: int = 0, **overrides: Any) -> Any:
    """A transformers MoE causal LM (`qwen3moe` or `mixtral`) with random weights, f32, eager."""
    import transformers

    config_name, extra = ARCHS[arch]
    config = getattr(transformers, config_name)(**(MOE_SIZES | extra | overrides))
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # norms away from 1, routers spread, so mistakes show
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.randn_like(p) * 0.2 + (1.0 if "norm" in name else 0.0))
            elif name.endswith("mlp.gate.weight"):
                p.copy_(torch.randn_like(p))
    return model.eval()


def tensor_type(ftype: str, name: str) -> str:
    """The ggml type of matrix `name` in a file of `ftype` (`Q4_K_M`: module docstring)."""
    if ftype != "Q4_K_M":
        return ftype
    q6 = name == "output.weight" or ".attn_v." in name or "ffn_down_exps" in name
    return "Q6_K" if q6 else "Q4_K"


def _add(w: Any, name: str, a: np.ndarray, ftype: str) -> None:
    import gguf

    if a.ndim == 1 or ftype == "F32" or name.endswith("ffn_gate_inp.weight"):
        w.add_tensor(name, a.astype(np.float32))
    elif ftype == "F16":
        w.add_tensor(name, a.astype(np.float16))
    elif ftype == "Q4_K_M":
        qtype = gguf.GGMLQuantizationType[tensor_type(ftype, name)]
        rng = np.random.default_rng(zlib.crc32(name.encode()))
        t = TensorType(qtype.name.lower(), tuple(a.shape))
        data = random_blocks(rng, t, 1.0 / math.sqrt(a.shape[-1]))
        w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)
    else:
        qtype = gguf.GGMLQuantizationType[ftype]
        data = gguf.quants.quantize(a.astype(np.float32), qtype)
        w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)


def moe_tensors(model: Any, file_arch: str) -> dict[str, np.ndarray]:
    """The model's tensors under their GGUF names (module docstring)."""
    c = model.config
    out: dict[str, np.ndarray] = {}
    experts: dict[str, np.ndarray] = {}
    plain = {}
    for name, p in model.state_dict().items():
        if ".mlp.experts." in name:
            experts[name] = p.detach().float().numpy().copy()
        else:
            plain[name] = p
    for hf_name, gguf_name, a in gguf_models.named_tensors(_Only(model, plain), NAMES):
        stem = gguf_name.split(".")[-2]
        if file_arch == "llama" and stem in ("attn_q", "attn_k"):
            heads = c.num_attention_heads if stem == "attn_q" else c.num_key_value_heads
            a = gguf_models._permute(a, heads)
        out[gguf_name] = a
    for name, a in experts.items():
        layer = name.split(".")[2]
        if name.endswith("gate_up_proj"):
            half = a.shape[1] // 2
            out[f"blk.{layer}.ffn_gate_exps.weight"] = a[:, :half]
            out[f"blk.{layer}.ffn_up_exps.weight"] = a[:, half:]
        else:
            out[f"blk.{layer}.ffn_down_exps.weight"] = a
    return out


class _Only:
    """`model` seen through `named_tensors` with only the `plain` entries of its state dict."""

    def __init__(self, model: Any, plain: dict[str, Any]) -> None:
        self.config, self._plain = model.config, plain

    def state_dict(self) -> dict[str, Any]:
        return self._plain


def write_moe_gguf(
    model: Any,
    path: Path,
    arch: str,
    ftype: str = "F32",
    norm: bool | None = None,
    edit: Callable[[Any, dict[str, np.ndarray]], None] | None = None,
    file_arch: str | None = None,
) -> Path:
    """Write `model` (`hf_moe_model(arch)`) as a GGUF file: `qwen3moe`, or `llama` for Mixtral.
    `norm`: an `expert_weights_norm` key of that value (None: no key, as the converter);
    `edit(writer, tensors)` may add keys and change the tensors before they are written;
    `file_arch`: another `general.architecture` (a file optgraph must refuse)."""
    c = model.config
    file_arch = file_arch or ("qwen3moe" if arch == "qwen3moe" else "llama")
    w = gguf_models.new_writer(model, path, file_arch, "tiny moe", ftype)
    w.add_rope_freq_base(float(c.rope_parameters["rope_theta"]))
    if arch == "qwen3moe":
        w.add_key_length(c.head_dim)
        w.add_value_length(c.head_dim)
        w.add_expert_count(c.num_experts)
        w.add_expert_feed_forward_length(c.moe_intermediate_size)
    else:
        w.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
        w.add_expert_count(c.num_local_experts)
    w.add_expert_used_count(c.num_experts_per_tok)
    if norm is not None:
        w.add_expert_weights_norm(norm)
    tensors = moe_tensors(model, file_arch)
    if edit is not None:
        edit(w, tensors)
    for name, a in tensors.items():
        _add(w, name, a, ftype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def load_qwen3moe(path: Path) -> Any:
    """transformers' GGUF loading of a qwen3moe file (module docstring)."""
    import gguf
    import transformers

    reader = gguf.GGUFReader(str(path))
    width = int(reader.fields["qwen3moe.expert_feed_forward_length"].parts[-1][0])
    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent),
        gguf_file=path.name,
        dtype=torch.float32,
        attn_implementation="eager",
        moe_intermediate_size=width,
    )
    return model.eval()


def _unpermute(w: np.ndarray, heads: int) -> np.ndarray:
    """The converter's q/k row permutation undone: each head's rows (i, half) -> (half, i)."""
    return (
        w.reshape(heads, w.shape[0] // heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


def _field(reader: Any, key: str) -> Any:
    return reader.fields[key].parts[-1][0].item()


def mixtral_from_file(path: Path) -> Any:
    """A `MixtralForCausalLM` holding a Mixtral-style `llama` file's values (module docstring)."""
    import gguf
    import transformers

    reader = gguf.GGUFReader(str(path))
    tensors = {
        t.name: np.array(gguf.quants.dequantize(t.data, t.tensor_type), np.float32).reshape(
            tuple(int(d) for d in reversed(t.shape.tolist()))
        )
        for t in reader.tensors
    }
    heads, kv_heads = (
        _field(reader, "llama.attention.head_count"),
        _field(reader, "llama.attention.head_count_kv"),
    )
    down = tensors["blk.0.ffn_down_exps.weight"]
    config = transformers.MixtralConfig(
        hidden_size=_field(reader, "llama.embedding_length"),
        intermediate_size=down.shape[2],
        num_hidden_layers=_field(reader, "llama.block_count"),
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        vocab_size=tensors["token_embd.weight"].shape[0],
        max_position_embeddings=_field(reader, "llama.context_length"),
        rms_norm_eps=_field(reader, "llama.attention.layer_norm_rms_epsilon"),
        rope_theta=_field(reader, "llama.rope.freq_base"),
        num_local_experts=_field(reader, "llama.expert_count"),
        num_experts_per_tok=_field(reader, "llama.expert_used_count"),
        tie_word_embeddings="output.weight" not in tensors,
    )
    config._attn_implementation = "eager"
    model = transformers.MixtralForCausalLM(config)
    by_gguf = {v: k for k, v in NAMES.items()}
    state: dict[str, torch.Tensor] = {}
    for name, a in tensors.items():
        if name == "token_embd.weight":
            state["model.embed_tokens.weight"] = torch.from_numpy(a)
        elif name == "output_norm.weight":
            state["model.norm.weight"] = torch.from_numpy(a)
        elif name == "output.weight":
            state["lm_head.weight"] = torch.from_numpy(a)
        else:
            _, layer, stem, kind = name.split(".")
            prefix = f"model.layers.{layer}."
            if stem in ("ffn_gate_exps", "ffn_up_exps"):
                continue
            if stem == "ffn_down_exps":
                gate_up = np.concatenate(
                    [tensors[f"blk.{layer}.ffn_gate_exps.weight"],
                     tensors[f"blk.{layer}.ffn_up_exps.weight"]], axis=1
                )  # fmt: skip
                state[prefix + "mlp.experts.gate_up_proj"] = torch.from_numpy(gate_up)
                state[prefix + "mlp.experts.down_proj"] = torch.from_numpy(a)
                continue
            if stem in ("attn_q", "attn_k"):
                a = _unpermute(a, heads if stem == "attn_q" else kv_heads)
            state[prefix + f"{by_gguf[stem]}.{kind}"] = torch.from_numpy(a)
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and set(missing) <= {"lm_head.weight"}, (missing, unexpected)
    if config.tie_word_embeddings:
        model.tie_weights()
    return model.eval()
