"""The mixture-of-experts op: its operands, attributes and type rule.

One node is a whole sparse MoE feed-forward block (Mixtral, Qwen3-MoE, gpt-oss-style experts):

    %y = moe(%x, %logits, %gate, %up, %down) {k = 2, norm_topk = true} : f32[T,H]

Operands: `x [T,H]` (f32, f16, bf16), the router's `logits [T,E]` (a float; usually
`matmul(x, router)`), then the experts stacked as GGUF stores them: `gate [E,F,H]`,
`up [E,F,H]`, `down [E,H,F]`, or with four operands one `gate_up [E,2F,H]` (gate's rows, then
up's) and `down`. Each expert stack is f32, f16, bf16 or quantized (blocks along its last axis,
H for gate/up, F for down); the three may differ (a Q4_K_M file keeps down in q6_k).

Attributes: `k` (experts a token uses, 1..E), `routing` ("softmax_topk": softmax over all E
logits, then the k largest probabilities, renormalised to sum 1 with `norm_topk = true`;
"topk_softmax": the k largest logits, then a softmax over those k), `act` (the gate's
activation: "silu", "gelu" (erf) or "gelu_tanh"; or "swiglu_oai", gpt-oss's clamped SwiGLU of
gate and up together: g = min(gate, limit), u = clamp(up, -limit, limit),
g · sigmoid(alpha · g) · (u + 1), attributes `limit` (7.0) and `alpha` (1.702)), `experts = [lo, hi]` (optional: the node holds experts lo..hi-1 of the E the
router scores, its stacks are [hi-lo, ...]; routing still runs over all E logits, and a token's
selected experts outside [lo, hi) contribute nothing: the parts of a partition of 0..E-1 sum to
the whole moe, which is how `split-experts` puts some experts on the CPU). The result has x's
shape and dtype:

    y[t] = sum over the k selected experts e (in slot order) of  w[t,e] · down_e · (act(gate_e · x[t]) * (up_e · x[t]))

Biases (gpt-oss): after the stacks, one float bias a stack, each a row an expert the node holds:
`gate_bias [E,F]`, `up_bias [E,F]`, `down_bias [E,H]` (eight operands), or `gate_up_bias [E,2F]`
and `down_bias` after `gate_up` and `down` (six). They are added to the products they follow:
gate_e · x[t] + gate_bias[e], ..., and down_e · h + down_bias[e] before the weighting.

Errors name the op and the conflicting facts:

    moe: up q4_k[8,32,256] differs from [E,F,H] = [8,64,256]
    moe: experts = [6, 10] must be lo < hi within the 8 experts of logits f32[2,8]
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from optgraph.ir.graph import FLOAT_DTYPES, Node, TensorType
from optgraph.ir.op_rules import Attrs, Types, fail, shape_text

ROUTINGS: tuple[str, ...] = ("softmax_topk", "topk_softmax")
ACTIVATIONS: tuple[str, ...] = ("silu", "gelu", "gelu_tanh", "swiglu_oai")
# (fused gate_up, biases) of a node by its operand count.
LAYOUTS: dict[int, tuple[bool, bool]] = {4: (True, False), 5: (False, False), 6: (True, True)}
LAYOUTS[8] = (False, True)
# Operand positions: x, logits, then the experts.
EXPERTS_AT = 2


@dataclass(frozen=True)
class MoeDims:
    """Sizes of one moe node: tokens, hidden width, experts the router scores, expert width,
    experts a token; `fused`: one gate_up stack (gate's F rows, then up's) instead of gate and
    up; `first`, `held`: the stacks hold experts first..first+held-1 (all E: 0 and E);
    `biased`: a bias after each stack."""

    tokens: int
    hidden: int
    experts: int
    ffn: int
    k: int
    fused: bool
    first: int = 0
    held: int = 0
    biased: bool = False

    @property
    def is_part(self) -> bool:
        """Whether the node holds only some of the experts (an `experts` attribute)."""
        return self.held != self.experts


def expert_range(attrs: Attrs, experts: int) -> tuple[int, int]:
    """The [lo, hi) a moe node holds of the `experts` its router scores (all without the
    `experts` attribute)."""
    held = attrs.get("experts")
    if held is None:
        return 0, experts
    assert isinstance(held, tuple | list) and len(held) == 2
    lo, hi = held
    assert isinstance(lo, int) and isinstance(hi, int)
    return lo, hi


def moe_dims(types: Types, k: int, held: tuple[int, int] | None = None) -> MoeDims:
    """The sizes of a verified moe node with operand types `types`, holding experts `held`
    ([lo, hi); None: all)."""
    x, logits = types[0], types[1]
    fused, biased = LAYOUTS[len(types)]
    down = types[EXPERTS_AT + stack_count(len(types)) - 1]
    experts = logits.shape[1]
    lo, hi = held if held is not None else (0, experts)
    return MoeDims(x.shape[0], x.shape[1], experts, down.shape[2], k, fused, lo, hi - lo, biased)


def stack_count(count: int) -> int:
    """How many expert stacks a moe node with `count` operands has (2 or 3)."""
    return 2 if LAYOUTS[count][0] else 3


def expert_roles(count: int) -> tuple[str, ...]:
    """The names of the expert operands of a moe node with `count` operands: the stacks, then
    the biases when it has them."""
    fused, biased = LAYOUTS.get(count, (count == 4, False))
    stacks = ("gate_up", "down") if fused else ("gate", "up", "down")
    return stacks + tuple(f"{s}_bias" for s in stacks) if biased else stacks


def _check_stack(node: Node, t: TensorType, role: str, layout: str, dims: tuple[int, ...]) -> None:
    if t.rank != 3:
        fail(node, f"{role} must be {layout} = {shape_text(dims)}, got {t}")
    if t.dtype not in FLOAT_DTYPES and not t.is_quantized:
        fail(node, f"{role} must be f32, f16, bf16 or quantized, got {t}")
    if t.shape != dims:
        fail(node, f"{role} {t} differs from {layout} = {shape_text(dims)}")


def _check_biases(
    node: Node, biases: Iterable[tuple[TensorType, str]], lead: str, sizes: tuple[int, int, int]
) -> None:
    """Each bias float and `[E, rows]`, its stack's output rows (`sizes`: E, F, H)."""
    experts, ffn, hidden = sizes
    widths = {"gate": (ffn, "F"), "up": (ffn, "F"), "gate_up": (2 * ffn, "2F")}
    widths["down"] = (hidden, "H")
    for t, role in biases:
        width, letter = widths[role.removesuffix("_bias")]
        dims = (experts, width)
        if t.dtype not in FLOAT_DTYPES:
            fail(node, f"{role} must be f32, f16 or bf16, got {t}")
        if t.shape != dims:
            fail(node, f"{role} {t} differs from [{lead},{letter}] = {shape_text(dims)}")


def moe(node: Node, types: Types, attrs: Attrs) -> TensorType:
    x, logits = types[0], types[1]
    if x.rank != 2 or x.dtype not in FLOAT_DTYPES:
        fail(node, f"x must be [T,H] in f32, f16 or bf16, got {x}")
    if logits.rank != 2 or logits.dtype not in FLOAT_DTYPES:
        fail(node, f"logits must be [T,E] in f32, f16 or bf16, got {logits}")
    tokens, hidden = x.shape
    if logits.shape[0] != tokens:
        fail(node, f"logits {logits} has {logits.shape[0]} rows, x {x} has {tokens}")
    experts = logits.shape[1]
    held = attrs.get("experts")
    if held is not None:
        if not isinstance(held, tuple | list):
            fail(node, f"experts must be [lo, hi], got {held}")
        if len(held) != 2:
            fail(node, f"experts must be [lo, hi], got [{', '.join(map(str, held))}]")
        lo, hi = held
        assert isinstance(lo, int) and isinstance(hi, int)
        if not 0 <= lo < hi <= experts:
            fail(
                node,
                f"experts = [{lo}, {hi}] must be lo < hi within the {experts} experts of "
                f"logits {logits}",
            )
        experts = hi - lo  # what the stacks hold; routing still scores all of logits' E
    if len(types) not in LAYOUTS:
        fail(
            node,
            f"takes x, logits, then gate, up, down (or gate_up, down), each optionally followed "
            f"by its bias: 4, 5, 6 or 8 operands, got {len(types)}",
        )
    fused, biased = LAYOUTS[len(types)]
    roles = expert_roles(len(types))
    lead = "E" if held is None else "hi-lo"  # the experts the stacks hold
    first = types[EXPERTS_AT]
    if first.rank != 3:
        layout = f"[{lead},2F,H]" if fused else f"[{lead},F,H]"
        fail(node, f"{roles[0]} must be {layout}, got {first}")
    ffn = first.shape[1]
    stacks = types[EXPERTS_AT : EXPERTS_AT + stack_count(len(types))]
    if fused:
        if ffn % 2:
            fail(node, f"gate_up {first} must have 2F rows (gate's F, then up's), got {ffn}")
        ffn //= 2
        _check_stack(node, first, "gate_up", f"[{lead},2F,H]", (experts, 2 * ffn, hidden))
    else:
        for t, role in zip(stacks[:2], roles):
            _check_stack(node, t, role, f"[{lead},F,H]", (experts, ffn, hidden))
    _check_stack(node, stacks[-1], "down", f"[{lead},H,F]", (experts, hidden, ffn))
    if biased:
        biases = zip(types[EXPERTS_AT + len(stacks) :], roles[len(stacks) :])
        _check_biases(node, biases, lead, (experts, ffn, hidden))
    if attrs["act"] == "swiglu_oai":
        limit, alpha = attrs["limit"], attrs["alpha"]
        assert isinstance(limit, float) and isinstance(alpha, float)
        if not limit > 0 or not math.isfinite(alpha):
            fail(
                node, f'act = "swiglu_oai" needs limit > 0 and a finite alpha, got {limit}, {alpha}'
            )
    k = attrs["k"]
    assert isinstance(k, int)
    if not 1 <= k <= logits.shape[1]:
        fail(
            node, f"k = {k} must be between 1 and the {logits.shape[1]} experts of logits {logits}"
        )
    if attrs["norm_topk"] and attrs["routing"] == "topk_softmax":
        fail(node, 'norm_topk = true with routing = "topk_softmax": its k weights sum to 1')
    return x
