"""GGUF in: a llama.cpp model file as a Llama-family graph and its weights.

    graph, weights = og.from_gguf("model.gguf")                        # a decode step
    graph, weights = og.from_gguf("model.gguf", mode="prefill", seq=16)

The architecture and hyper-parameters come from the file's metadata (`{arch}.block_count`,
`.embedding_length`, `.feed_forward_length`, `.attention.head_count`, `.head_count_kv`,
`.key_length`, `.layer_norm_rms_epsilon`, `.rope.freq_base`, `.rope.scaling.*`,
`.context_length`); the vocabulary is `token_embd.weight`'s rows, the embeddings are tied when
there is no `output.weight`, biases and Qwen3's q/k norms are there when their tensors are. The
graph is `llama_ir`'s (the structure of `examples/gen_llama.py`), its weights named as in the
file (`token_embd.weight`, `blk.0.attn_q.weight`, ...) and declared with their stored dtype and
row-major shape: matrices `[out, in]`, read with `transpose_b = true`; a float weight in another
dtype than the step's is cast where it is read; quantized ones are read as stored.

Architectures: `llama` (llama.cpp writes Mistral models as `llama` too), `qwen2` (q/k/v
biases), `qwen3` (q/k norms), `phi3` (fused `attn_qkv` = [q; k; v] rows and `ffn_up` = [gate; up]
rows, read whole and sliced apart after the product, so the file's tensors stay the weights;
`attention.sliding_window` as the attention's window), `gemma2` / `gemma3` (embeddings times
sqrt(hidden); the converter stores the norms as 1 + weight, so they are plain RMS norms;
`post_attention_norm` / `post_ffw_norm` before the residual adds; GELU-tanh MLP; the window on
all but every 2nd / 6th layer; gemma2's `attn_logit_softcapping` and `final_logit_softcapping`;
gemma3's q/k norms and its sliding layers' rope, theta 10000 unscaled, as llama.cpp runs it;
the 27B models' q scale (hidden / heads)^-0.5 as llama.cpp's, 1/sqrt(head_dim) otherwise). Rope
scaling: `linear` and `yarn` from `rope.scaling.*`; llama3's from the `rope_freqs.weight` table
llama.cpp's converter writes (fitted by `rope_tables`). The weights are the file's arrays
(memory-mapped; `reference/gguf_file.py`, which also undoes llama.cpp's q/k row permutation), so
`optgraph run MODEL.ir --weights MODEL.gguf` reads the same ones.

Mixtures of experts: `qwen3moe` (Qwen3-MoE: q/k norms, `expert_count` experts of width
`expert_feed_forward_length`, `expert_used_count` a token, softmax over all E then the top k,
renormalised unless `expert_weights_norm` says false, as llama.cpp runs it) and `llama` files
with `expert_count` (Mixtral-style: top k of the router's logits, then a softmax over those k;
`expert_weights_norm` false: softmax over all E, top k, not renormalised). Each layer's MLP is
then the router product (`ffn_gate_inp` `[E,H]`) and one `moe` node over the stacks
`ffn_gate_exps`, `ffn_up_exps` `[E,F,H]` and `ffn_down_exps` `[E,H,F]`, read as stored (quantized
or float, each its own type).

gpt-oss (`gpt-oss`): q/k/v/o biases, `attn_sinks` as the attention's sinks, the window on
even layers, yarn rope, `post_attention_norm` as the MLP norm, the router's bias added to its
logits and one moe with the experts' biases, `act = "swiglu_oai"` and the top k logits' softmax
(MXFP4 stacks read as stored).

Not handled: another `attention.sliding_window_pattern` than gemma's, shared experts
(`qwen2moe`, `ffn_*_shexp`), other expert gating (`expert_gating_func` not softmax,
`expert_weights_scale`), per-expert tensors of old Mixtral files (`blk.N.ffn_gate.E.weight`),
partial rotary (`rope.dimension_count` below the head width: Phi-4-mini), phi3's LongRoPE
(`rope_factors_long/short.weight`: Phi-3 128k models), per-layer head counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np

from optgraph.errors import InputError
from optgraph.frontends.llama_config import (
    MODES,
    PROJECTIONS,
    LlamaConfig,
    LlamaStep,
    LlamaWeights,
    weight_shapes,
)
from optgraph.frontends.llama_ir import llama_ir
from optgraph.frontends.rope_tables import rope_attributes
from optgraph.ir.graph import AttrValue, Graph
from optgraph.ir.parser import parse
from optgraph.reference.gguf_file import GGUFFile, open_gguf, supported_types

ARCHITECTURES = ("llama", "qwen2", "qwen3", "phi3", "gemma2", "gemma3", "qwen3moe", "gpt-oss")
# What optgraph lacks for architectures that GGUF files of mixtures of experts often carry.
MISSING = {"qwen2moe": "its shared expert (ffn_*_shexp) is not supported"}
GEMMA = {"gemma2": 2, "gemma3": 6}  # their sliding-window pattern: n - 1 sliding layers, 1 global
GEMMA_27B_LAYERS = {"gemma2": 46, "gemma3": 62}  # llama.cpp scales those q by (hidden/heads)^-0.5
SWIGLU_LIMIT = 7.0  # gpt-oss's clamp, as llama.cpp and transformers run it
DEFAULT_CACHE_LEN = 4096  # a decode step's cache when the model's context is longer
_LAYER_TENSORS = {
    "attn_norm": "attn_norm",
    "wq": "attn_q",
    "wk": "attn_k",
    "wv": "attn_v",
    "wo": "attn_output",
    "mlp_norm": "ffn_norm",
    "w_gate": "ffn_gate",
    "w_up": "ffn_up",
    "w_down": "ffn_down",
    "q_norm": "attn_q_norm",
    "k_norm": "attn_k_norm",
    "wqkv": "attn_qkv",  # phi3: q, k, v rows one after another
    "w_gate_up": "ffn_up",  # phi3: gate rows then up rows, under ffn_up's name
    "attn_post_norm": "post_attention_norm",  # gemma
    "mlp_post_norm": "post_ffw_norm",
    "router": "ffn_gate_inp",  # mixtures of experts: the router and the expert stacks
    "w_gate_exps": "ffn_gate_exps",
    "w_up_exps": "ffn_up_exps",
    "w_down_exps": "ffn_down_exps",
    "sinks": "attn_sinks",  # gpt-oss: a sink logit a query head
}
_BIAS_TENSORS = dict(
    zip(
        PROJECTIONS, ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
    )
)
_BIAS_TENSORS |= {"router": "ffn_gate_inp"}  # gpt-oss: the router's and the experts' biases
_BIAS_TENSORS |= {f"{p}_exps": f"ffn_{p}_exps" for p in ("gate", "up", "down")}
_MODEL_TENSORS = {"embed": "token_embd.weight", "final_norm": "output_norm.weight"}
_MODEL_TENSORS["lm_head"] = "output.weight"


def gguf_weight_name(role: str, layer: int | None) -> str:
    """The GGUF tensor name of a `llama_ir` weight role."""
    if layer is None:
        return _MODEL_TENSORS[role]
    if role.startswith("b_"):
        return f"blk.{layer}.{_BIAS_TENSORS[role[2:]]}.bias"
    return f"blk.{layer}.{_LAYER_TENSORS[role]}.weight"


def gpt_oss_weight_name(role: str, layer: int | None) -> str:
    """`gguf_weight_name` of a gpt-oss file: its MLP norm is `post_attention_norm` (the name of
    transformers' `post_attention_layernorm`), there is no `ffn_norm`."""
    if role == "mlp_norm" and layer is not None:
        return f"blk.{layer}.post_attention_norm.weight"
    return gguf_weight_name(role, layer)


def from_gguf(
    path: str | Path,
    *,
    mode: str = "decode",
    batch: int = 1,
    seq: int = 1,
    cache_len: int | None = None,
    dtype: str | None = None,
    per_row: bool = False,
) -> tuple[Graph, dict[str, np.ndarray]]:
    """(graph, weights) of a GGUF file: a decode step over `cache_len` cached positions (default
    the context length, at most 4096), or a prefill (`mode="prefill"`) of `seq` tokens, for
    `batch` sequences. `dtype` (f32, f16, bf16) is the activations'; default the stored dtype
    of the projections when it is f16 or bf16, else f32. `per_row` (decode): each sequence with
    its own positions and kv_len (llama_ir's `LlamaStep.per_row`)."""
    gguf = open_gguf(path)
    if mode not in MODES:
        raise InputError(f"from_gguf: mode must be one of {', '.join(MODES)}, got {mode!r}")
    config = gguf_config(gguf)
    name = gpt_oss_weight_name if gguf.architecture == "gpt-oss" else gguf_weight_name
    names = {
        name(role, layer): dims
        for (role, layer), dims in weight_shapes(config, out_in=True).items()
    }
    dtypes = _check_tensors(gguf, names)
    if dtype is None:
        first = "wqkv" if config.fused_qkv else "wq"
        stored = dtypes[name(first, 0)] if config.layers else "f32"
        dtype = stored if stored in ("f16", "bf16") else "f32"
    if cache_len is None:
        context = gguf.integer(f"{gguf.architecture}.context_length", DEFAULT_CACHE_LEN)
        cache_len = min(context or 0, DEFAULT_CACHE_LEN)
    step = LlamaStep(
        dtype=dtype, batch=batch, seq=seq, cache_len=cache_len, mode=mode, per_row=per_row
    )
    weights = LlamaWeights(name=name, out_in=True, dtypes=dtypes)
    comment = f"# Imported from {Path(path).name} ({gguf.architecture}) by optgraph's from_gguf."
    try:
        text = llama_ir(config, step, weights, comments=[comment])
    except ValueError as err:
        raise InputError(f"from_gguf '{path}': {err}") from None
    graph = parse(text)
    return graph, {w.name: gguf.array(w.name) for w in graph.weights}


def gguf_config(gguf: GGUFFile) -> LlamaConfig:
    """The model's `LlamaConfig` from the metadata (module docstring)."""
    arch = gguf.architecture
    if arch not in ARCHITECTURES:
        why = f" ({MISSING[arch]})" if arch in MISSING else ""
        raise gguf.error(
            f"architecture '{arch}' is not supported{why}; supported: {', '.join(ARCHITECTURES)}"
        )

    def number(key: str, default: int | None = None) -> int:
        value = gguf.metadata(f"{arch}.{key}", default)
        if isinstance(value, list):
            raise gguf.error(
                f"'{arch}.{key}' differs between layers ({value[:8]}...): "
                "per-layer sizes are not supported"
            )
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            what = "missing" if value is None else f"not a non-negative integer ({value!r})"
            raise gguf.error(f"metadata '{arch}.{key}' is {what}")
        return value

    hidden, heads = number("embedding_length"), number("attention.head_count")
    if heads < 1:
        raise gguf.error(f"'{arch}.attention.head_count' must be positive")
    head_dim = number("attention.key_length", hidden // heads)
    if number("attention.value_length", head_dim) != head_dim:
        raise gguf.error("attention.value_length differs from attention.key_length")
    rotary = number("rope.dimension_count", head_dim)
    if rotary != head_dim:
        raise gguf.error(
            f"partial rotary (rope.dimension_count {rotary} of head width "
            f"{head_dim}) is not supported"
        )
    embed = gguf.tensors.get("token_embd.weight")
    if embed is None or len(embed.shape) != 2:
        raise gguf.error("no 2-D 'token_embd.weight' tensor")
    eps_key = f"{arch}.attention.layer_norm_rms_epsilon"
    if not gguf.has(eps_key):
        raise gguf.error(f"metadata '{eps_key}' is missing")
    eps = gguf.real(eps_key, 0.0)
    if not eps > 0:
        raise gguf.error(f"metadata '{eps_key}' is {eps!r}, not positive")
    layers = number("block_count")
    if layers > len(gguf.tensors):  # each block has tensors of its own: more is damage
        raise gguf.error(f"'{arch}.block_count' {layers} exceeds the {len(gguf.tensors)} tensors")
    present = set(gguf.tensors)
    phi3 = arch == "phi3"
    longrope = [
        t for t in ("rope_factors_long.weight", "rope_factors_short.weight") if t in present
    ]
    if longrope:
        raise gguf.error(
            f"LongRoPE scaling ({', '.join(longrope)}: per-frequency factors that switch with the "
            "sequence length) is not supported"
        )
    windowed = phi3 or arch in GEMMA or arch == "gpt-oss"
    window = number("attention.sliding_window", 0) if windowed else 0
    gemma: dict[str, object] = {}
    if arch == "gpt-oss":  # llama.cpp: the window on even layers, odd ones global
        gemma = {"window_pattern": 2, "sinks": True}
    if arch in GEMMA:
        pattern = gguf.metadata(f"{arch}.attention.sliding_window_pattern", GEMMA[arch])
        if pattern != GEMMA[arch]:
            raise gguf.error(
                f"'{arch}.attention.sliding_window_pattern' {pattern!r} is not supported "
                f"({GEMMA[arch]}: every {GEMMA[arch]}th layer global)"
            )
        caps = {}
        for key in ("attn_logit_softcapping", "final_logit_softcapping"):
            value = gguf.metadata(f"{arch}.{key}", 0.0)
            if not isinstance(value, int | float) or value < 0:
                raise gguf.error(f"metadata '{arch}.{key}' is {value!r}")
            caps[key] = float(value)
        gemma = {
            "window_pattern": GEMMA[arch],
            "embed_scale": math.sqrt(hidden),
            "mlp_act": "gelu_tanh",
            "post_norms": True,
            "attn_softcap": caps["attn_logit_softcapping"],
            "final_softcap": caps["final_logit_softcapping"],
        }
        if layers == GEMMA_27B_LAYERS[arch]:  # llama.cpp's f_attention_scale for the 27B
            gemma["attn_scale"] = 1.0 / math.sqrt(hidden // heads)
        if arch == "gemma3":  # llama.cpp: the sliding layers' rope is theta 10000, unscaled
            gemma["local_rope"] = {"theta": 10000.0}
    experts = _experts(gguf, number)
    return LlamaConfig(
        layers=layers,
        hidden=hidden,
        heads=heads,
        kv_heads=number("attention.head_count_kv", heads),
        ffn=number("feed_forward_length", int(experts.get("expert_ffn", 0)) or None),
        vocab=embed.shape[0],
        head_dim=head_dim if head_dim != hidden // heads or hidden % heads else None,
        eps=eps,
        rope=_rope(gguf, head_dim),
        bias=tuple(p for p in PROJECTIONS if gguf_weight_name(f"b_{p}", 0) in present),
        tied_embeddings="output.weight" not in present,
        qk_norm=layers > 0 and gguf_weight_name("q_norm", 0) in present,
        fused_qkv=phi3,
        fused_gate_up=phi3,
        window=window,
        **gemma,  # type: ignore[arg-type]
        **experts,  # type: ignore[arg-type]
    )


def _experts(
    gguf: GGUFFile, number: Callable[[str, int | None], int]
) -> dict[str, int | str | bool]:
    """`LlamaConfig`'s mixture-of-experts fields from the metadata (none for a dense model)."""
    arch = gguf.architecture
    count = number("expert_count", 0)
    if not count:
        if arch in ("qwen3moe", "gpt-oss"):
            raise gguf.error(f"metadata '{arch}.expert_count' is missing or 0")
        return {}
    shared = [t for t in gguf.tensors if "_shexp." in t]
    if number("expert_shared_count", 0) or shared:
        raise gguf.error(
            f"shared experts ({', '.join(shared[:3]) or 'expert_shared_count'}) are not "
            "supported; supported: routed experts alone (qwen3moe, Mixtral-style llama)"
        )
    old_style = [t for t in gguf.tensors if t.startswith("blk.0.ffn_gate.") and t[15:16].isdigit()]
    if old_style:
        raise gguf.error(
            f"per-expert tensors ({old_style[0]}, ...) are not supported: the experts must be "
            "stacked (blk.N.ffn_gate_exps.weight), as llama.cpp's converter writes them today"
        )
    gating = gguf.metadata(f"{arch}.expert_gating_func", 1)
    scale = gguf.metadata(f"{arch}.expert_weights_scale", 1.0)
    if gating != 1 or scale != 1.0:
        raise gguf.error(
            f"expert gating {gating!r} with weights scale {scale!r} is not supported "
            "(softmax gating, 1: unscaled)"
        )
    norm = gguf.metadata(f"{arch}.expert_weights_norm", True)
    if not isinstance(norm, bool):
        raise gguf.error(f"metadata '{arch}.expert_weights_norm' is {norm!r}, not a bool")
    key = "expert_feed_forward_length"
    width = number(key, None if arch in ("qwen3moe", "gpt-oss") else 0)
    if arch == "gpt-oss":  # llama.cpp: the top k logits' softmax; biases; the clamped SwiGLU
        clamp = gguf.metadata(f"{arch}.swiglu_clamp_exp")
        limits = clamp if isinstance(clamp, list) else [] if clamp is None else [clamp]
        if any(value != SWIGLU_LIMIT for value in limits):
            raise gguf.error(
                f"'{arch}.swiglu_clamp_exp' {limits[:8]} is not supported: gpt-oss's experts "
                f"clamp at {SWIGLU_LIMIT} (moe's swiglu_oai limit)"
            )
        return {
            "experts": count,
            "experts_used": number("expert_used_count", None),
            "expert_ffn": width,
            "moe_routing": "topk_softmax",
            "expert_bias": True,
            "mlp_act": "swiglu_oai",
        }
    return {
        "experts": count,
        "experts_used": number("expert_used_count", None),
        "expert_ffn": width,
        # llama.cpp: qwen3moe softmax, top k, renormalised; llama (Mixtral) the same, which is
        # the top k logits' softmax
        "moe_routing": "topk_softmax" if arch == "llama" and norm else "softmax_topk",
        "norm_topk": arch != "llama" and norm,
    }


def _rope(gguf: GGUFFile, head_dim: int) -> dict[str, AttrValue]:
    """The rope op's attributes: theta, and the scaling of `rope.scaling.*` or `rope_freqs`."""
    arch = gguf.architecture
    theta = gguf.real(f"{arch}.rope.freq_base", 10000.0)
    kind = gguf.metadata(f"{arch}.rope.scaling.type", "none")
    factor = gguf.real(f"{arch}.rope.scaling.factor", 1.0)
    if kind in ("linear", "yarn") and not factor > 0:
        raise gguf.error(f"metadata '{arch}.rope.scaling.factor' is {factor}, not positive")
    if "rope_freqs.weight" in gguf.tensors:  # llama3: the converter writes the divisors
        if kind != "none":
            raise gguf.error(f"rope_freqs.weight with rope scaling '{kind}' is not supported")
        divisors = np.asarray(gguf.array("rope_freqs.weight"), np.float64).reshape(-1)
        if divisors.size != head_dim // 2:
            raise gguf.error(f"rope_freqs.weight has {divisors.size} entries, not {head_dim // 2}")
        inv_freq = theta ** (-np.arange(0, head_dim, 2, dtype=np.float64) / head_dim) / divisors
        fitted = rope_attributes(inv_freq.astype(np.float32), 1.0)
        if fitted is None:
            raise gguf.error("rope_freqs.weight is no rope scaling optgraph knows (llama3, linear)")
        return fitted
    if kind == "none" or (kind == "linear" and factor == 1.0):
        return {"theta": theta}
    if kind == "linear":
        return {"theta": theta, "scaling": "linear", "factor": factor}
    if kind == "yarn":
        original = gguf.metadata(f"{arch}.rope.scaling.original_context_length")
        if not isinstance(original, int):
            raise gguf.error("yarn rope scaling without rope.scaling.original_context_length")
        attrs: dict[str, AttrValue] = {"theta": theta, "scaling": "yarn", "factor": factor}
        attrs["original_max_position"] = original
        for key, name in (("yarn_beta_fast", "beta_fast"), ("yarn_beta_slow", "beta_slow")):
            if gguf.has(f"{arch}.rope.scaling.{key}"):
                attrs[name] = gguf.real(f"{arch}.rope.scaling.{key}", 0.0)
        if gguf.has(f"{arch}.rope.scaling.yarn_attn_factor"):  # ggml multiplies its mscale
            scale = gguf.real(f"{arch}.rope.scaling.yarn_attn_factor", 1.0)
            attrs["attention_factor"] = scale * (0.1 * math.log(factor) + 1.0)
        return attrs
    raise gguf.error(f"rope scaling '{kind}' is not supported (none, linear, yarn, llama3)")


def _check_tensors(gguf: GGUFFile, shapes: dict[str, tuple[int, ...]]) -> dict[str, str]:
    """The stored IR dtype of every weight the graph reads; an error naming every tensor that is
    missing, of another shape or of a type optgraph cannot read."""
    missing = [name for name in shapes if name not in gguf.tensors]
    if missing:
        shown = ", ".join(missing[:6]) + (
            f", ... ({len(missing)} in all)" if len(missing) > 6 else ""
        )
        raise gguf.error(f"tensors missing for a {gguf.architecture} model: {shown}")
    dtypes: dict[str, str] = {}
    for name, dims in shapes.items():
        info = gguf.tensors[name]
        if info.shape != dims:
            raise gguf.error(
                f"tensor '{name}' has shape {list(info.shape)}, the metadata gives {list(dims)}"
            )
        if info.dtype is None:
            raise gguf.error(
                f"tensor '{name}' has type {info.ggml_type}, which optgraph cannot "
                f"read; supported: {', '.join(supported_types())}"
            )
        dtypes[name] = info.dtype
    return dtypes
