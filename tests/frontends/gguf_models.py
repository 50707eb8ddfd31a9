"""Small GGUF files for the GGUF importer's tests, laid out as llama.cpp's `convert_hf_to_gguf.py`
lays them out, from transformers models built from configs with seeded random weights.

`hf_model(arch)` builds the model; `write_gguf(model, path, arch)` writes it: the metadata keys of
the converter (`{arch}.block_count`, ...), the tensors under their GGUF names, the q and k rows of
`llama` files permuted as the converter permutes them (rotary halves interleaved), 1-D tensors in
F32 and matrices in the file's type (F32, F16, BF16, or a quantized type through
`gguf.quants.quantize`), llama3 rope scaling as the `rope_freqs.weight` divisors.

`greedy_tokens(graph, weights, prompt, n)` runs an imported decode step (one token a step) in
the reference interpreter and returns its greedy tokens; `decode_logits` the logits of each
prompt position.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from tests.support.hf_checkpoints import reference_tokens

ARCH_CONFIGS: dict[str, tuple[str, dict[str, Any]]] = {
    "llama": ("LlamaConfig", {}),
    "mistral": ("MistralConfig", {"sliding_window": None}),
    "qwen2": ("Qwen2Config", {}),
    "qwen3": ("Qwen3Config", {}),  # head_dim 128: transformers reads no key_length for qwen3
}
SIZES: dict[str, Any] = {"hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 2}
SIZES |= {"num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 256}
SIZES |= {"max_position_embeddings": 256, "rms_norm_eps": 1e-5, "initializer_range": 0.2}


def hf_model(arch: str, seed: int = 0, **overrides: Any) -> Any:
    """A transformers causal LM of the family `arch` with random weights, float32, eager."""
    import transformers

    config_name, extra = ARCH_CONFIGS[arch]
    config = getattr(transformers, config_name)(**(SIZES | extra | overrides))
    config._attn_implementation = "eager"
    torch.manual_seed(seed)
    model = transformers.AutoModelForCausalLM.from_config(config)
    with torch.no_grad():  # norms away from 1 and biases away from 0, so mistakes show
        for name, p in model.named_parameters():
            if p.dim() == 1:
                p.copy_(torch.randn_like(p) * 0.2 + (1.0 if "norm" in name else 0.0))
    return model.eval()


def _permute(w: np.ndarray, heads: int) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.permute: each head's rows (half, i) -> (i, half)."""
    return (
        w.reshape(heads, 2, w.shape[0] // heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)
    )


HF_TO_GGUF = {
    "self_attn.q_proj": "attn_q",
    "self_attn.k_proj": "attn_k",
    "self_attn.v_proj": "attn_v",
    "self_attn.o_proj": "attn_output",
    "self_attn.q_norm": "attn_q_norm",
    "self_attn.k_norm": "attn_k_norm",
    "mlp.gate_proj": "ffn_gate",
    "mlp.up_proj": "ffn_up",
    "mlp.down_proj": "ffn_down",
    "input_layernorm": "attn_norm",
    "post_attention_layernorm": "ffn_norm",
}


def named_tensors(model: Any, names: Mapping[str, str]) -> Iterator[tuple[str, str, np.ndarray]]:
    """(transformers name, GGUF name, float32 copy) of each tensor the file holds, as the
    converter names them: `names` maps a layer's module (`self_attn.q_proj`) to its GGUF stem
    (`attn_q`); `lm_head` is left out of a model with tied embeddings."""
    for name, p in model.state_dict().items():
        a = p.detach().float().numpy().copy()
        if name == "model.embed_tokens.weight":
            yield name, "token_embd.weight", a
        elif name == "model.norm.weight":
            yield name, "output_norm.weight", a
        elif name == "lm_head.weight":
            if not model.config.tie_word_embeddings:
                yield name, "output.weight", a
        else:
            _, _, layer, rest = name.split(".", 3)
            module, kind = rest.rsplit(".", 1)
            yield name, f"blk.{layer}.{names[module]}.{kind}", a


def gguf_tensors(model: Any, arch: str) -> dict[str, np.ndarray]:
    """The model's tensors under their GGUF names, q/k permuted for `llama` files."""
    c = model.config
    out: dict[str, np.ndarray] = {}
    for _, gguf_name, a in named_tensors(model, HF_TO_GGUF):
        stem = gguf_name.split(".")[-2]
        if arch == "llama" and stem in ("attn_q", "attn_k"):
            a = _permute(a, c.num_attention_heads if stem == "attn_q" else c.num_key_value_heads)
        out[gguf_name] = a
    return out


def new_writer(model: Any, path: Path, arch: str, name: str, ftype: str) -> Any:
    """A `GGUFWriter` holding the keys every llama-family file carries: sizes, heads, the norm
    epsilon, the vocabulary size and the file type (`ftype`: F32, F16, BF16 or quantized)."""
    import gguf

    c = model.config
    w = gguf.GGUFWriter(str(path), arch)
    w.add_name(name)
    w.add_context_length(c.max_position_embeddings)
    w.add_embedding_length(c.hidden_size)
    w.add_block_count(c.num_hidden_layers)
    w.add_feed_forward_length(c.intermediate_size)
    w.add_head_count(c.num_attention_heads)
    w.add_head_count_kv(c.num_key_value_heads)
    w.add_layer_norm_rms_eps(c.rms_norm_eps)
    w.add_vocab_size(c.vocab_size)
    w.add_file_type({"F32": 0, "F16": 1, "BF16": 32}.get(ftype, 7))
    return w


def finish_file(w: Any, tensors: Iterable[tuple[str, np.ndarray]], ftype: str) -> None:
    """Add `tensors` (vectors in F32, matrices in `ftype`) and write the file."""
    for tensor_name, a in tensors:
        _add_tensor(w, tensor_name, a, ftype)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def write_gguf(
    model: Any,
    path: Path,
    arch: str,
    ftype: str = "F32",
    name: str = "tiny",
    rope: dict[str, Any] | None = None,
) -> Path:
    """Write `model` as a GGUF file of architecture `arch` (module docstring)."""
    import gguf

    c = model.config
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    w = new_writer(model, path, arch, name, ftype)
    theta = float(c.rope_parameters["rope_theta"])
    w.add_rope_freq_base(theta)
    if arch in ("llama", "mistral"):
        w.add_rope_dimension_count(head_dim)
    if head_dim != c.hidden_size // c.num_attention_heads:
        w.add_key_length(head_dim)
        w.add_value_length(head_dim)
    tensors = gguf_tensors(model, arch)
    rope = rope or {}
    if rope.get("rope_type") == "linear":
        w.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        w.add_rope_scaling_factor(rope["factor"])
    elif rope.get("rope_type") == "yarn":
        w.add_rope_scaling_type(gguf.RopeScalingType.YARN)
        w.add_rope_scaling_factor(rope["factor"])
        w.add_rope_scaling_orig_ctx_len(rope["original_max_position_embeddings"])
    elif rope.get("rope_type") == "llama3":
        tensors["rope_freqs.weight"] = _llama3_divisors(rope, theta, head_dim)
    finish_file(w, tensors.items(), ftype)
    return path


def _add_tensor(w: Any, name: str, a: np.ndarray, ftype: str) -> None:
    import gguf

    if a.ndim == 1 or ftype == "F32":
        w.add_tensor(name, a.astype(np.float32))
    elif ftype == "F16":
        w.add_tensor(name, a.astype(np.float16))
    else:
        qtype = gguf.GGMLQuantizationType[ftype]
        data = gguf.quants.quantize(a.astype(np.float32), qtype)
        w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)


def _llama3_divisors(rope: dict[str, Any], theta: float, dim: int) -> np.ndarray:
    """convert_hf_to_gguf's LlamaModel.generate_extra_tensors for rope_type llama3."""
    freqs = 1.0 / (theta ** (np.arange(0, dim, 2, dtype=np.float32) / dim))
    factor, low, high = rope["factor"], rope["low_freq_factor"], rope["high_freq_factor"]
    old = rope["original_max_position_embeddings"]
    out = []
    for f in freqs:
        wavelen = 2 * math.pi / f
        if wavelen < old / high:
            out.append(1.0)
        elif wavelen > old / low:
            out.append(factor)
        else:
            smooth = (old / wavelen - low) / (high - low)
            out.append(1 / ((1 - smooth) / factor + smooth))
    return np.array(out, np.float32)


def load_with_transformers(path: Path) -> Any:
    """transformers' own GGUF loading: the oracle."""
    import transformers

    model = transformers.AutoModelForCausalLM.from_pretrained(
        str(path.parent), gguf_file=path.name, dtype=torch.float32, attn_implementation="eager"
    )
    return model.eval()


def greedy_reference(model: Any, prompt: list[int], new_tokens: int) -> list[int]:
    """transformers' greedy tokens (`hf_checkpoints.reference_tokens`: no end-of-sequence stop,
    the random models' eos token may come up)."""
    return reference_tokens(model, prompt, new_tokens)


def _feed(graph: Any, caches: dict[str, np.ndarray], token: int, pos: int) -> dict[str, Any]:
    return {
        "tokens": np.array([token], np.int32),
        "pos": np.array([pos], np.int32),
        "kv_len": np.array([pos + 1], np.int32),
        **caches,
    }


def decode_steps(
    graph: Any, weights: dict[str, np.ndarray], prompt: list[int], new_tokens: int
) -> tuple[np.ndarray, list[int]]:
    """Feed the prompt one token a step, then greedy tokens: (the prompt's logits [P, V], the new
    tokens), each step run by the reference interpreter."""
    from optgraph.reference.interpreter import run_reference
    from optgraph.reference.kernels import numpy_dtype

    caches = {
        i.name: np.zeros(i.type.shape, numpy_dtype(i.type.dtype))
        for i in graph.inputs
        if "cache" in i.name
    }
    outputs = graph.output_names()
    logits_rows: list[np.ndarray] = []
    tokens: list[int] = []
    token = prompt[0]
    for pos in range(len(prompt) + new_tokens - 1):
        out = run_reference(graph, _feed(graph, caches, token, pos), weights)
        caches = dict(zip(caches, (out[n] for n in outputs[1:])))
        row = np.asarray(out[outputs[0]], np.float32)[0]
        if pos < len(prompt) - 1:
            logits_rows.append(row)
            token = prompt[pos + 1]
        else:
            if pos == len(prompt) - 1:
                logits_rows.append(row)
            token = int(np.argmax(row))
            tokens.append(token)
    return np.stack(logits_rows), tokens


def run_from_the_file(path: Path, ir: Path, tmp_path: Path) -> None:
    """`optgraph run IR --weights FILE.gguf --check` on the cpu (imported by `optgraph import`
    as `ir`), its logits against the reference of `from_gguf`'s step on the same random inputs,
    and the weights `load_weights` reads from the file equal to `from_gguf`'s (the blocks, q and
    k rows un-permuted both ways)."""
    from optgraph.cli.main import main
    from optgraph.frontends.gguf import from_gguf
    from optgraph.reference.interpreter import load_weights, random_inputs, run_reference

    graph, weights = from_gguf(path, cache_len=16, seq=2)
    loaded = load_weights(path, graph)
    for name, array in weights.items():
        np.testing.assert_array_equal(loaded[name], array)
    outputs = tmp_path / "out.npz"
    argv = ["run", str(ir), "--weights", str(path), "--device", "cpu", "--check"]
    assert main([*argv, "--save-outputs", str(outputs), "-q"]) == 0
    expected = run_reference(graph, random_inputs(graph, seed=0), weights)
    with np.load(outputs) as saved:
        np.testing.assert_allclose(saved["logits"], expected["logits"], rtol=1e-5, atol=1e-5)
