"""What a Llama-family decoder is and how its weights are named, checked before any IR is built:
the half of `llama_ir` that the GGUF importer and the benchmarks read without building a graph.

    config = LlamaConfig(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128, vocab=256)
    step = LlamaStep(dtype="f16", batch=1, seq=1, cache_len=32, mode="decode")
    check_llama(config, step)                       # ValueError for sizes that make no model
    weight_shapes(config, out_in=True)[("wq", 0)]   # (64, 64): [out, in] as GGUF stores it

`LlamaConfig`: sizes, eps, rope attributes, biases, tied embeddings, Qwen3's per-head q/k
norms, a sparse mixture of experts in place of the MLP; `LlamaStep`: dtype, batch, seq,
cache_len, decode or prefill, per-row positions; `LlamaWeights`: a name per role and layer,
`[in, out]` or `[out, in]` matrices, each weight's stored dtype. `layer_roles` and
`weight_shapes` list a configuration's weights. Building the graph is `llama_ir`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from optgraph.ir.graph import AttrValue
from optgraph.ir.op_rules_moe import ROUTINGS

DTYPES = ("f32", "f16", "bf16")
MODES = ("decode", "prefill")
PROJECTIONS = ("q", "k", "v", "o", "gate", "up", "down")
# The weight roles: per layer, then the model's own (layer None).
LAYER_ROLES = ("attn_norm", "wq", "wk", "wv", "wo", "mlp_norm", "w_gate", "w_up", "w_down")
MATRIX_ROLES = frozenset({"embed", "lm_head", "wq", "wk", "wv", "wo", "w_gate", "w_up", "w_down"})
MATRIX_ROLES |= {"wqkv", "w_gate_up"}  # fused forms (Phi-3): [q; k; v] and [gate; up] rows
MATRIX_ROLES |= {"router"}  # a mixture of experts' router: [hidden] -> [experts] logits
# A mixture of experts' stacks in place of w_gate, w_up, w_down: [E,F,H], [E,F,H], [E,H,F].
STACK_ROLES = ("w_gate_exps", "w_up_exps", "w_down_exps")


@dataclass(frozen=True)
class LlamaConfig:
    """What the model is. `head_dim` None: hidden / heads. `rope`: the rope op's attributes
    (theta, scaling, ...). `bias`: the projections (of `PROJECTIONS`) that add a bias vector.
    `qk_norm`: an rms_norm over each head of q and k before rope (Qwen3). `fused_qkv`: one
    `wqkv` matrix whose outputs are q, k, v one after another, sliced apart after the product;
    `fused_gate_up`: one `w_gate_up` matrix, gate's outputs then up's (Phi-3). `window`: sliding
    window attention over the last `window` positions, every layer (0: none), or with
    `window_pattern` n > 0 only layers i with (i + 1) % n != 0 (Gemma: n - 1 sliding, then one
    global); `local_rope`: the sliding layers' rope attributes when they differ (Gemma 3).
    Gemma's: `embed_scale` (the embedding rows times it; 0: none), `mlp_act` (`silu` or
    `gelu_tanh`), `post_norms` (rms_norms of the attention's and the MLP's outputs before their
    residual adds: roles `attn_post_norm`, `mlp_post_norm`), `attn_scale` (the attention's scale;
    None: 1/sqrt(head_dim)), `attn_softcap` and `final_softcap` (C·tanh(x/C) of the scores and of
    the logits; 0: none). A sparse mixture of experts in place of the MLP (`experts` > 0):
    `experts_used` of them a token, each of width `expert_ffn` (0: `ffn`), routed by `moe_routing`
    (the moe op's `routing`: "softmax_topk" with `norm_topk`, or "topk_softmax"); gpt-oss's:
    `expert_bias` (the router's bias `b_router` [E] and the stacks' biases `b_gate_exps`,
    `b_up_exps` [E,F], `b_down_exps` [E,H]), `mlp_act` "swiglu_oai" (the moe's clamped SwiGLU),
    `sinks` (one attention sink logit a query head, role `sinks` [heads])."""

    layers: int = 2
    hidden: int = 64
    heads: int = 4
    kv_heads: int = 2
    ffn: int = 128
    vocab: int = 128
    head_dim: int | None = None
    eps: float = 1e-6
    rope: Mapping[str, AttrValue] = field(default_factory=lambda: {"theta": 10000.0})
    bias: tuple[str, ...] = ()
    tied_embeddings: bool = False
    qk_norm: bool = False
    fused_qkv: bool = False
    fused_gate_up: bool = False
    window: int = 0
    window_pattern: int = 0
    local_rope: Mapping[str, AttrValue] | None = None
    embed_scale: float = 0.0
    mlp_act: str = "silu"
    post_norms: bool = False
    attn_scale: float | None = None
    attn_softcap: float = 0.0
    final_softcap: float = 0.0
    experts: int = 0
    experts_used: int = 0
    expert_ffn: int = 0
    moe_routing: str = "softmax_topk"
    norm_topk: bool = False
    expert_bias: bool = False
    sinks: bool = False

    def layer_window(self, i: int) -> int:
        """Layer i's sliding window (0: none)."""
        if self.window_pattern > 0 and (i + 1) % self.window_pattern == 0:
            return 0
        return self.window

    def layer_rope(self, i: int) -> Mapping[str, AttrValue]:
        if self.local_rope is not None and self.layer_window(i):
            return self.local_rope
        return self.rope

    @property
    def head_width(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    @property
    def expert_width(self) -> int:
        return self.expert_ffn or self.ffn


@dataclass(frozen=True)
class LlamaStep:
    """One program of the model: its dtype (the activations'), batch, new tokens per sequence,
    cache length and mode; `per_row` (decode only): positions and kv_len per sequence."""

    dtype: str = "f32"
    batch: int = 1
    seq: int = 1
    cache_len: int = 32
    mode: str = "decode"
    per_row: bool = False


def _short_name(role: str, layer: int | None) -> str:
    return role if layer is None else f"l{layer}.{role}"


@dataclass(frozen=True)
class LlamaWeights:
    """How the weights are named and stored. `name(role, layer)`: roles `embed`, `final_norm`,
    `lm_head` (layer None) and per layer `LAYER_ROLES`, `b_<projection>`, `q_norm`, `k_norm`.
    `out_in`: matrices stored `[out, in]` (read with `transpose_b = true`). `dtypes`: a weight's
    stored dtype by its name, when it is not the step's."""

    name: Callable[[str, int | None], str] = _short_name
    out_in: bool = False
    dtypes: Mapping[str, str] = field(default_factory=dict)


def check_llama(config: LlamaConfig, step: LlamaStep) -> None:
    """Raise ValueError naming the first size or option that cannot make a model."""
    c, s = config, step
    if s.dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {', '.join(DTYPES)}, got {s.dtype!r}")
    if s.mode not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, got {s.mode!r}")
    sizes = (c.hidden, c.heads, c.kv_heads, c.ffn, c.vocab, s.batch, s.seq)
    if c.layers < 0 or min(sizes) < 1:
        raise ValueError("sizes must be positive (layers may be 0)")
    unknown = sorted(set(c.bias) - set(PROJECTIONS))
    if unknown:
        raise ValueError(f"bias on unknown projections {unknown}; known: {', '.join(PROJECTIONS)}")
    theta = c.rope.get("theta", 10000.0)
    if not (isinstance(theta, int | float) and c.eps > 0 and theta > 0):  # also rejects NaN
        raise ValueError(f"eps ({c.eps}) and theta ({theta}) must be positive")
    if c.head_dim is None and c.hidden % c.heads:
        raise ValueError(f"hidden ({c.hidden}) must be divisible by heads ({c.heads})")
    if c.head_width < 2 or c.head_width % 2:
        raise ValueError(f"head_dim ({c.head_width}) must be even and positive for rope")
    if c.heads % c.kv_heads:
        raise ValueError(f"heads ({c.heads}) must be divisible by kv-heads ({c.kv_heads})")
    fused = {"q", "k", "v"} if c.fused_qkv else set()
    fused |= {"gate", "up"} if c.fused_gate_up else set()
    if fused & set(c.bias):
        raise ValueError(f"biases on fused projections ({', '.join(sorted(fused & set(c.bias)))})")
    if c.mlp_act not in ("silu", "gelu_tanh") and not (c.experts and c.mlp_act == "swiglu_oai"):
        raise ValueError(
            f"mlp_act must be silu or gelu_tanh (swiglu_oai with experts), got {c.mlp_act!r}"
        )
    if c.expert_bias and not c.experts:
        raise ValueError("expert_bias needs experts")
    if c.window < 0:
        raise ValueError(f"window ({c.window}) must not be negative")
    if c.experts:
        _check_experts(c)
    if s.per_row and s.mode != "decode":
        raise ValueError("per-row positions need mode decode (they index the caches)")
    if s.mode == "decode" and s.seq > s.cache_len:
        raise ValueError(f"seq ({s.seq}) must not exceed cache-len ({s.cache_len})")


def _check_experts(c: LlamaConfig) -> None:
    if not 1 <= c.experts_used <= c.experts or c.expert_ffn < 0:
        raise ValueError(
            f"experts used a token ({c.experts_used}) must be 1 to the experts ({c.experts}), "
            f"expert width ({c.expert_ffn}) not negative"
        )
    if c.moe_routing not in ROUTINGS or (c.norm_topk and c.moe_routing != "softmax_topk"):
        raise ValueError(
            f"moe routing {c.moe_routing!r} (norm_topk {c.norm_topk}) is not one of "
            f"{', '.join(ROUTINGS)} (norm_topk only with softmax_topk)"
        )
    if c.fused_gate_up or {"gate", "up", "down"} & set(c.bias):
        raise ValueError("experts take neither a fused gate_up matrix nor MLP biases")


def layer_roles(config: LlamaConfig) -> tuple[str, ...]:
    """A layer's weight roles (biases and q/k norms aside): `LAYER_ROLES`, with `wqkv` for
    wq/wk/wv and `w_gate_up` for w_gate/w_up when they are fused."""
    roles: list[str] = []
    for role in LAYER_ROLES:
        if config.fused_qkv and role in ("wq", "wk", "wv"):
            role = "wqkv"
        if config.fused_gate_up and role in ("w_gate", "w_up"):
            role = "w_gate_up"
        if config.experts and role in ("w_gate", "w_up", "w_down"):
            roles += [r for r in ("router", *STACK_ROLES) if r not in roles]
            continue
        if role not in roles:
            roles.append(role)
    return tuple(roles)


def weight_shapes(
    config: LlamaConfig, out_in: bool
) -> dict[tuple[str, int | None], tuple[int, ...]]:
    """(role, layer) -> stored shape, in declaration order."""
    c = config
    q_dim, kv_dim = c.heads * c.head_width, c.kv_heads * c.head_width
    # (in, out) of each matrix; vectors by their length.
    matrices = {"wq": (c.hidden, q_dim), "wk": (c.hidden, kv_dim), "wv": (c.hidden, kv_dim)}
    matrices |= {"wo": (q_dim, c.hidden), "w_gate": (c.hidden, c.ffn), "w_up": (c.hidden, c.ffn)}
    matrices |= {"w_down": (c.ffn, c.hidden), "lm_head": (c.hidden, c.vocab)}
    matrices |= {"wqkv": (c.hidden, q_dim + 2 * kv_dim), "w_gate_up": (c.hidden, 2 * c.ffn)}
    matrices |= {"router": (c.hidden, c.experts)}
    e, f = c.experts, c.expert_width
    stacks = dict(zip(STACK_ROLES, ((e, f, c.hidden), (e, f, c.hidden), (e, c.hidden, f))))
    bias_dims = {"q": q_dim, "k": kv_dim, "v": kv_dim, "o": c.hidden}
    bias_dims |= {"gate": c.ffn, "up": c.ffn, "down": c.hidden}

    def matrix(role: str) -> tuple[int, ...]:
        k, n = matrices[role]
        return (n, k) if out_in else (k, n)

    shapes: dict[tuple[str, int | None], tuple[int, ...]] = {("embed", None): (c.vocab, c.hidden)}
    for i in range(c.layers):
        for role in layer_roles(c):
            if role in stacks:
                shapes[role, i] = stacks[role]
            else:
                shapes[role, i] = matrix(role) if role in MATRIX_ROLES else (c.hidden,)
        for proj in c.bias:
            shapes[f"b_{proj}", i] = (bias_dims[proj],)
        if c.qk_norm:
            shapes["q_norm", i] = shapes["k_norm", i] = (c.head_width,)
        if c.sinks:
            shapes["sinks", i] = (c.heads,)
        if c.expert_bias:
            shapes["b_router", i] = (e,)
            shapes["b_gate_exps", i] = shapes["b_up_exps", i] = (e, f)
            shapes["b_down_exps", i] = (e, c.hidden)
        if c.post_norms:
            shapes["attn_post_norm", i] = shapes["mlp_post_norm", i] = (c.hidden,)
    shapes["final_norm", None] = (c.hidden,)
    if not c.tied_embeddings:
        shapes["lm_head", None] = matrix("lm_head")
    return shapes
