"""Raise SiLU written out, `x · sigmoid(x)` (how the ONNX exporter writes `F.silu`: diffusers'
UNet, VAE, SD3 and Flux through ONNX), into `silu(x)`, the op the torch importer maps
`aten.silu` to and that the code generator fuses (SwiGLU, epilogues).

    %s = sigmoid(%x); %y = mul(%x, %s)    ->    %y = silu(%x)

Matched structurally: the `mul`'s two operands are `x` and `sigmoid(x)` (either order) with the
same type, so no broadcast hides in the product. Not handled: `x / (1 + exp(-x))` and other
spellings, a sigmoid of a different value (a gate: Qwen2-MoE's shared expert stays as it is).
"""

from __future__ import annotations

from optgraph.frontends.draft import Draft
from optgraph.frontends.raising_probe import producer_of
from optgraph.ir.graph import Node


def written_out_silu(draft: Draft, node: Node, producers: dict[str, Node]) -> list[Node] | None:
    """`silu(x)` in place of `mul(x, sigmoid(x))`, else None."""
    if node.op != "mul" or node.type is None or len(node.operands) != 2:
        return None
    a, b = node.operands
    for x, gate in ((a, b), (b, a)):
        sigmoid = producer_of(producers, gate, "sigmoid")
        if sigmoid is None or sigmoid.operands != (x,):
            continue
        if draft.type_of(x) != node.type:
            continue
        return [Node(node.name, "silu", (x,), {}, node.type, span=node.span)]
    return None
