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

from tests.frontends.gguf_models import SIZES, finish_file, named_tensors, new_writer

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
    c = model.config
    head_dim = c.hidden_size // c.num_attention_heads
    w = new_writer(model, path, "phi3", "Phi3 tiny", ftype)
    w.add_rope_freq_base(float(c.rope_parameters["rope_theta"]))
    w.add_rope_dimension_count(int(head_dim * c.rope_parameters.get("partial_rotary_factor", 1)))
    if c.sliding_window:
        w.add_sliding_window(c.sliding_window)
    w.add_pad_token_id(c.pad_token_id)
    w.add_eos_token_id(c.eos_token_id)
    finish_file(w, ((g, a) for _, g, a in named_tensors(model, _NAMES)), ftype)
    return path
