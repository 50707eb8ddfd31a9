"""Small gpt-oss GGUF files for the importer's tests, laid out as llama.cpp's converter lays them
out, and the oracle that reads them back into transformers' `GptOssForCausalLM`.

`hf_gpt_oss(seed)` builds a `GptOssForCausalLM` from a config (head_dim 32 with 4 heads of a
hidden 64, so q is wider than the hidden state, as in gpt-oss; a sliding window of 4 on even
layers; yarn rope) with seeded random weights: biases, norms and the attention sinks away from
0 and 1, the experts' gate_up scaled so gpt-oss's SwiGLU clamps (limit 7) bite.
`write_gpt_oss_gguf(model, path, experts, matrices)` writes it under the converter's names:
`attn_sinks.weight`, `post_attention_norm.weight` (the MLP's norm), the router and its bias as
`ffn_gate_inp`, transformers' interleaved `gate_up_proj` [E,H,2F] split into `ffn_gate_exps`
(its even columns) and `ffn_up_exps` (odd), each `[E,F,H]` with its bias `[E,F]`,
`ffn_down_exps` `[E,H,F]` with its bias; q and k rows as they are (the converter permutes only
`llama` files); experts in `experts` (F32 or MXFP4 through `gguf.quants.quantize`), the other
matrices in `matrices`, vectors and the router in F32.

The oracle: transformers' own GGUF loading cannot read these files (transformers 5.24: its
gpt-oss rope-scaling reader raises a TypeError on `rope.scaling.factor`; without those keys it
leaves the experts and sinks uninitialised, as it expects `ffn_gate_up_projs`-style names, and
it reads no `key_length`), so `gpt_oss_from_file` builds a `GptOssForCausalLM` from the file's
metadata and copies in its tensors, read with `gguf.GGUFReader` and dequantized by
`gguf.quants.dequantize` (gate and up interleaved back), yarn's correction range truncated as
llama.cpp computes it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tests.frontends import gguf_models

SIZES: dict[str, Any] = {
    "hidden_size": 64, "intermediate_size": 64, "num_hidden_layers": 2,
    "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 32, "vocab_size": 256,
    "max_position_embeddings": 256, "rms_norm_eps": 1e-5, "num_local_experts": 4,
    "num_experts_per_tok": 2, "sliding_window": 4,
    "layer_types": ["sliding_attention", "full_attention"],
    "rope_parameters": {"rope_type": "yarn", "rope_theta": 150000.0, "factor": 32.0,
                        "original_max_position_embeddings": 4096, "beta_fast": 32.0,
                        "beta_slow": 1.0, "truncate": True},
}  # fmt: skip
_NAMES = {
    "self_attn.q_proj": "attn_q", "self_attn.k_proj": "attn_k", "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output", "input_layernorm": "attn_norm",
    "post_attention_layernorm": "post_attention_norm", "mlp.router": "ffn_gate_inp",
}  # fmt: skip


def hf_gpt_oss(seed: int = 0, **overrides: Any) -> Any:
    """A `GptOssForCausalLM` with random weights, f32, eager (module docstring)."""
    import transformers

    config = transformers.GptOssConfig(**(SIZES | overrides))
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("sinks"):
                p.copy_(torch.randn_like(p))
            elif p.dim() == 1 or name.endswith("_bias"):
                p.copy_(torch.randn_like(p) * 0.2 + (1.0 if "norm" in name else 0.0))
            elif name.endswith("router.weight"):
                p.copy_(torch.randn_like(p))
            elif name.endswith("gate_up_proj"):
                p.copy_(torch.randn_like(p) * 0.8)
    return model.eval()


def gguf_tensors(model: Any) -> dict[str, np.ndarray]:
    """The model's tensors under the converter's names (module docstring)."""
    out: dict[str, np.ndarray] = {}
    for name, p in model.state_dict().items():
        a = p.detach().float().numpy().copy()
        if name == "model.embed_tokens.weight":
            out["token_embd.weight"] = a
        elif name == "model.norm.weight":
            out["output_norm.weight"] = a
        elif name == "lm_head.weight":
            out["output.weight"] = a
        else:
            _, _, layer, rest = name.split(".", 3)
            blk = f"blk.{layer}."
            if rest == "self_attn.sinks":
                out[blk + "attn_sinks.weight"] = a
            elif rest == "mlp.experts.gate_up_proj":  # [E,H,2F], gate and up interleaved
                out[blk + "ffn_gate_exps.weight"] = np.ascontiguousarray(
                    a[:, :, ::2].swapaxes(1, 2)
                )
                out[blk + "ffn_up_exps.weight"] = np.ascontiguousarray(a[:, :, 1::2].swapaxes(1, 2))
            elif rest == "mlp.experts.gate_up_proj_bias":
                out[blk + "ffn_gate_exps.bias"] = np.ascontiguousarray(a[:, ::2])
                out[blk + "ffn_up_exps.bias"] = np.ascontiguousarray(a[:, 1::2])
            elif rest == "mlp.experts.down_proj":  # [E,F,H]
                out[blk + "ffn_down_exps.weight"] = np.ascontiguousarray(a.swapaxes(1, 2))
            elif rest == "mlp.experts.down_proj_bias":
                out[blk + "ffn_down_exps.bias"] = a
            else:
                module, kind = rest.rsplit(".", 1)
                out[f"{blk}{_NAMES[module]}.{kind}"] = a
    return out


def _add(w: Any, name: str, a: np.ndarray, experts: str, matrices: str) -> None:
    """The experts stored as `experts`, other matrices as `matrices`; biases and the router
    f32, as llama.cpp's converter keeps them."""
    kind = experts if "_exps.weight" in name else matrices
    if name.endswith(".bias") or "ffn_gate_inp" in name:
        kind = "F32"
    gguf_models._add_tensor(w, name, a, kind)


def write_gpt_oss_gguf(
    model: Any,
    path: Path,
    experts: str = "MXFP4",
    matrices: str = "F32",
    edit: Callable[[Any], None] | None = None,
) -> Path:
    """Write `model` (`hf_gpt_oss`) as a `gpt-oss` GGUF file (module docstring); `edit(writer)`
    may add keys."""
    import gguf

    c = model.config
    rope = c.rope_parameters
    w = gguf_models.new_writer(model, path, "gpt-oss", "tiny gpt-oss", matrices)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    w.add_rope_freq_base(float(rope["rope_theta"]))
    w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
    w.add_rope_scaling_factor(float(rope["factor"]))
    w.add_rope_scaling_orig_ctx_len(int(rope["original_max_position_embeddings"]))
    w.add_sliding_window(c.sliding_window)
    w.add_expert_count(c.num_local_experts)
    w.add_expert_used_count(c.num_experts_per_tok)
    w.add_expert_feed_forward_length(c.intermediate_size)
    if edit is not None:
        edit(w)
    for name, a in gguf_tensors(model).items():
        _add(w, name, a, experts, matrices)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path


def _field(reader: Any, key: str) -> Any:
    return reader.fields[key].parts[-1][0].item()


def gpt_oss_from_file(path: Path, **overrides: Any) -> Any:
    """A `GptOssForCausalLM` holding a gpt-oss file's values (module docstring); `overrides`
    change its config (a test's counterfactual, e.g. another `swiglu_limit`)."""
    import gguf
    import transformers

    reader = gguf.GGUFReader(str(path))
    t = {
        x.name: torch.from_numpy(
            np.array(gguf.quants.dequantize(x.data, x.tensor_type), np.float32).reshape(
                tuple(int(d) for d in reversed(x.shape.tolist()))
            )
        )
        for x in reader.tensors
    }

    def key(name: str) -> Any:
        return _field(reader, f"gpt-oss.{name}")

    layers = key("block_count")
    settings: dict[str, Any] = {
        "hidden_size": key("embedding_length"),
        "intermediate_size": key("expert_feed_forward_length"),
        "num_hidden_layers": layers,
        "num_attention_heads": key("attention.head_count"),
        "num_key_value_heads": key("attention.head_count_kv"),
        "head_dim": key("attention.key_length"),
        "vocab_size": t["token_embd.weight"].shape[0],
        "max_position_embeddings": key("context_length"),
        "rms_norm_eps": key("attention.layer_norm_rms_epsilon"),
        "num_local_experts": key("expert_count"),
        "num_experts_per_tok": key("expert_used_count"),
        "sliding_window": key("attention.sliding_window"),
        "layer_types": [
            "sliding_attention" if i % 2 == 0 else "full_attention" for i in range(layers)
        ],
        "rope_parameters": {
            "rope_type": "yarn",
            "rope_theta": key("rope.freq_base"),
            "factor": key("rope.scaling.factor"),
            "original_max_position_embeddings": key("rope.scaling.original_context_length"),
            "beta_fast": 32.0,
            "beta_slow": 1.0,
            "truncate": True,
        },
        "tie_word_embeddings": "output.weight" not in t,
    }
    config = transformers.GptOssConfig(**(settings | overrides))
    config._attn_implementation = "eager"
    model = transformers.GptOssForCausalLM(config)
    state = {
        "model.embed_tokens.weight": t["token_embd.weight"],
        "model.norm.weight": t["output_norm.weight"],
        "lm_head.weight": t.get("output.weight", t["token_embd.weight"]),
    }
    by_gguf = {v: k for k, v in _NAMES.items()}
    for i in range(layers):
        blk, prefix = f"blk.{i}.", f"model.layers.{i}."
        for name, a in t.items():
            if not name.startswith(blk) or "_exps." in name:
                continue
            stem, kind = name[len(blk) :].rsplit(".", 1)
            if stem == "attn_sinks":
                state[prefix + "self_attn.sinks"] = a
            else:
                state[f"{prefix}{by_gguf[stem]}.{kind}"] = a
        gate, up = t[blk + "ffn_gate_exps.weight"], t[blk + "ffn_up_exps.weight"]
        gate_up = torch.stack([gate, up], dim=2).flatten(1, 2)  # rows g0, u0, g1, u1, ...
        state[prefix + "mlp.experts.gate_up_proj"] = gate_up.transpose(1, 2).contiguous()
        gate_b, up_b = t[blk + "ffn_gate_exps.bias"], t[blk + "ffn_up_exps.bias"]
        state[prefix + "mlp.experts.gate_up_proj_bias"] = torch.stack([gate_b, up_b], 2).flatten(1)
        down = t[blk + "ffn_down_exps.weight"]
        state[prefix + "mlp.experts.down_proj"] = down.transpose(1, 2).contiguous()
        state[prefix + "mlp.experts.down_proj_bias"] = t[blk + "ffn_down_exps.bias"]
    missing, unexpected = model.load_state_dict(state, strict=False)
    assert not unexpected and not missing, (missing, unexpected)
    return model.eval()
