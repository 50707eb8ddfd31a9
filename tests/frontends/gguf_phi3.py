"""Small `phi3` GGUF files for the GGUF importer's tests, laid out as llama.cpp's
`convert_hf_to_gguf.py` (`Phi3MiniModel`) lays them out, from transformers' `Phi3ForCausalLM`
with seeded random weights (norms away from 1, as `gguf_models.hf_model` makes them).

Phi-3 keeps its fused matrices in the file: `self_attn.qkv_proj` ([q; k; v] rows) as
`attn_qkv.weight` and `mlp.gate_up_proj` ([gate; up] rows) as `ffn_up.weight`, unpermuted (ggml
runs phi3's rope NeoX-style). The metadata: the llama-style keys, `rope.dimension_count`,
`attention.sliding_window` when the model has one, and the pad / eos token ids (transformers'
`Phi3Config` defaults, 32000, lie outside the test vocabulary).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.frontends.gguf_models import SIZES, _add_tensor

_NAMES = {
    "self_attn.qkv_proj": "attn_qkv",
    "self_attn.o_proj": "attn_output",
    "mlp.gate_up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def phi3_model(seed: int = 0, **overrides: Any) -> Any:
    """A float32, eager `Phi3ForCausalLM` of `gguf_models.SIZES` with random weights."""
    import transformers

    extra = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "sliding_window": None}
    config = transformers.Phi3Config(**(SIZES | extra | overrides))
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.randn_like(p) * 0.2 + (1.0 if "norm" in name else 0.0))
    return model.eval()


def write_phi3_gguf(model: Any, path: Path, ftype: str = "F32") -> Path:
    """Write `model` as a `phi3` GGUF file (module docstring); matrices in `ftype` (F32, F16 or a
    type `gguf.quants.quantize` makes)."""
    import gguf

    c = model.config
    head_dim = c.hidden_size // c.num_attention_heads
    w = gguf.GGUFWriter(str(path), "phi3")
    w.add_name("Phi3 tiny")
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_rope_freq_base(float(c.rope_parameters["rope_theta"]))
    w.add_rope_dimension_count(int(head_dim * c.rope_parameters.get("partial_rotary_factor", 1)))
    w.add_vocab_size(c.vocab_size)
    if c.sliding_window:
        w.add_sliding_window(c.sliding_window)
    w.add_pad_token_id(c.pad_token_id)
    w.add_eos_token_id(c.eos_token_id)
    w.add_file_type({"F32": 0, "F16": 1}.get(ftype, 7))
    for name, p in model.state_dict().items():
        a = p.detach().float().numpy().copy()
        if name == "model.embed_tokens.weight":
            gguf_name = "token_embd.weight"
        elif name == "model.norm.weight":
            gguf_name = "output_norm.weight"
        elif name == "lm_head.weight":
            if c.tie_word_embeddings:
                continue
            gguf_name = "output.weight"
        else:
            _, _, layer, rest = name.split(".", 3)
            module, kind = rest.rsplit(".", 1)
            gguf_name = f"blk.{layer}.{_NAMES[module]}.{kind}"
        _add_tensor(w, gguf_name, a, ftype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return path
