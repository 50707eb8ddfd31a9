"""Small `gemma2` / `gemma3` GGUF files for the GGUF importer's tests, laid out as llama.cpp's
`convert_hf_to_gguf.py` (`Gemma2Model`, `Gemma3Model`) lays them out, from transformers' models
with seeded random weights.

The converter adds 1 to every norm weight (Gemma's norms multiply by `1 + weight`), so the file's
norms are plain RMS-norm weights; transformers' GGUF loader subtracts the 1 again. Tensor names:
`input_layernorm` -> `attn_norm`, `post_attention_layernorm` -> `post_attention_norm`,
`pre_feedforward_layernorm` -> `ffn_norm`, `post_feedforward_layernorm` -> `post_ffw_norm`; the
q and k rows unpermuted (ggml runs Gemma's rope NeoX-style); tied embeddings (no `output`).
Metadata: key/value length (the head width), the softcaps (gemma2), the sliding window, and the
rope base (gemma3; gemma2 files have none: 10000).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from tests.frontends.gguf_models import (
    HF_TO_GGUF,
    SIZES,
    finish_file,
    named_tensors,
    new_writer,
)

# Gemma's layers: the llama names, with a norm after the attention and around the MLP.
_NAMES = HF_TO_GGUF | {
    "post_attention_layernorm": "post_attention_norm",
    "pre_feedforward_layernorm": "ffn_norm",
    "post_feedforward_layernorm": "post_ffw_norm",
}
# head_dim 256: transformers' loader keeps query_pre_attn_scalar's default, 256, and llama.cpp
# scales q by 1/sqrt(head_dim): the two agree only there.
GEMMA_SIZES = SIZES | {"head_dim": 256, "sliding_window": 4, "pad_token_id": 0}
GEMMA_SIZES |= {"bos_token_id": 1, "eos_token_id": 2}


def gemma_model(arch: str, seed: int = 0, **overrides: Any) -> Any:
    """A float32, eager Gemma2 or Gemma3 (text) causal LM with random weights; norm weights
    ~ N(0, 0.2) (Gemma's scale is 1 + weight)."""
    import transformers

    name = {"gemma2": "Gemma2Config", "gemma3": "Gemma3TextConfig"}[arch]
    config = getattr(transformers, name)(**(GEMMA_SIZES | overrides))
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():
        for _, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.randn_like(p) * 0.2)
    return model.eval()


def write_gemma_gguf(model: Any, path: Path, arch: str, ftype: str = "F32") -> Path:
    """Write `model` as a `gemma2` or `gemma3` GGUF file (module docstring)."""
    c = model.config
    w = new_writer(model, path, arch, f"{arch} tiny", ftype)
    w.add_key_length(c.head_dim)
    w.add_value_length(c.head_dim)
    if arch == "gemma2":
        w.add_attn_logit_softcapping(c.attn_logit_softcapping)
        w.add_final_logit_softcapping(c.final_logit_softcapping)
    else:
        w.add_rope_freq_base(float(c.rope_parameters["full_attention"]["rope_theta"]))
    w.add_sliding_window(c.sliding_window)
    w.add_pad_token_id(c.pad_token_id)
    w.add_eos_token_id(c.eos_token_id)
    tensors = (
        # the converter's `data_torch + 1` on every norm
        (g, a + 1.0 if hf.endswith("norm.weight") else a)
        for hf, g, a in named_tensors(model, _NAMES)
    )
    finish_file(w, tensors, ftype)
    return path
