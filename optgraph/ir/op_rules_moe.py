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
activation: "silu", "gelu" (erf) or "gelu_tanh"). The result has x's shape and dtype:

    y[t] = sum over the k selected experts e (in slot order) of  w[t,e] · down_e · (act(gate_e · x[t]) * (up_e · x[t]))

Errors name the op and the conflicting facts:

    moe: up q4_k[8,32,256] differs from [E,F,H] = [8,64,256]
"""

from __future__ import annotations

from dataclasses import dataclass

from optgraph.ir.graph import FLOAT_DTYPES, Node, TensorType
from optgraph.ir.op_rules import Attrs, Types, fail, shape_text

ROUTINGS: tuple[str, ...] = ("softmax_topk", "topk_softmax")
ACTIVATIONS: tuple[str, ...] = ("silu", "gelu", "gelu_tanh")
# Operand positions: x, logits, then the experts.
EXPERTS_AT = 2


@dataclass(frozen=True)
class MoeDims:
    """Sizes of one moe node: tokens, hidden width, experts, expert width, experts a token;
    `fused`: one gate_up stack (gate's F rows, then up's) instead of gate and up."""

    tokens: int
    hidden: int
    experts: int
    ffn: int
    k: int
    fused: bool


def moe_dims(types: Types, k: int) -> MoeDims:
    """The sizes of a verified moe node with operand types `types`."""
    x, down = types[0], types[-1]
    return MoeDims(x.shape[0], x.shape[1], down.shape[0], down.shape[2], k, len(types) == 4)


def expert_roles(count: int) -> tuple[str, ...]:
    """The names of the expert operands of a moe node with `count` operands."""
    return ("gate_up", "down") if count == 4 else ("gate", "up", "down")


def _check_stack(node: Node, t: TensorType, role: str, layout: str, dims: tuple[int, ...]) -> None:
    if t.rank != 3:
        fail(node, f"{role} must be {layout} = {shape_text(dims)}, got {t}")
    if t.dtype not in FLOAT_DTYPES and not t.is_quantized:
        fail(node, f"{role} must be f32, f16, bf16 or quantized, got {t}")
    if t.shape != dims:
        fail(node, f"{role} {t} differs from {layout} = {shape_text(dims)}")


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
    roles = expert_roles(len(types))
    first = types[EXPERTS_AT]
    if first.rank != 3:
        layout = "[E,2F,H]" if len(types) == 4 else "[E,F,H]"
        fail(node, f"{roles[0]} must be {layout}, got {first}")
    ffn = first.shape[1]
    if len(types) == 4:
        if ffn % 2:
            fail(node, f"gate_up {first} must have 2F rows (gate's F, then up's), got {ffn}")
        ffn //= 2
        _check_stack(node, first, "gate_up", "[E,2F,H]", (experts, 2 * ffn, hidden))
    else:
        for t, role in zip(types[EXPERTS_AT:4], roles):
            _check_stack(node, t, role, "[E,F,H]", (experts, ffn, hidden))
    _check_stack(node, types[-1], "down", "[E,H,F]", (experts, hidden, ffn))
    k = attrs["k"]
    assert isinstance(k, int)
    if not 1 <= k <= experts:
        fail(node, f"k = {k} must be between 1 and the {experts} experts of logits {logits}")
    if attrs["norm_topk"] and attrs["routing"] == "topk_softmax":
        fail(node, 'norm_topk = true with routing = "topk_softmax": its k weights sum to 1')
    return x
