"""aten.scaled_dot_product_attention -> IR `attention`.

    F.scaled_dot_product_attention(q, k, v, attn_mask=m, is_causal=c, scale=s, enable_gqa=g)
    ->  %o = attention(%q, %k, %v, %m) {masked = true, causal = c, causal_align = "top_left"}

PyTorch aligns `is_causal` top-left (query i sees keys j <= i), so where Sq != Skv the node gets
`causal_align = "top_left"`; for Sq = Skv both alignments agree and the attribute is left out. The
mask operand keeps PyTorch's meaning (bool: true = attend; float: added to the scores) and is
cast to q's dtype where a float mask differs. A constant mask that is a pure function of positions
(causal, sliding window) becomes attributes (`attention_masks`). Dropout is refused.
"""

from __future__ import annotations

from typing import Any

from optgraph.frontends.attention_masks import raised_mask_attrs
from optgraph.frontends.torch_values import Converter, TorchContext, arg, unsupported
from optgraph.ir.graph import FLOAT_DTYPES, AttrValue


def _attention(ctx: TorchContext, node: Any) -> None:
    q, k = ctx.type_of(node.args[0]), ctx.type_of(node.args[1])
    sq, skv = q.shape[2], k.shape[2]
    if float(arg(node, 4, "dropout_p", 0.0)) != 0.0:
        raise unsupported(node, "dropout in attention is not supported")
    # One key/value head broadcasts over the query heads (PyTorch's matmul broadcasting: Falcon's
    # multi-query attention), which is the IR's grouped attention with a single group.
    broadcast = k.shape[1] == 1 == ctx.type_of(node.args[2]).shape[1]
    if q.shape[1] != k.shape[1] and not broadcast and not arg(node, 7, "enable_gqa", False):
        raise unsupported(node, "query and key head counts differ without enable_gqa")
    causal = bool(arg(node, 5, "is_causal", False))
    attrs: dict[str, AttrValue] = {"causal": causal}
    if causal and sq != skv:
        attrs["causal_align"] = "top_left"
    scale = arg(node, 6, "scale")
    if scale is not None:
        attrs["scale"] = float(scale)
    operands = [ctx.name_of(a) for a in node.args[:3]]
    mask = arg(node, 3, "attn_mask")
    if mask is not None:
        attrs.update(_mask_attrs(ctx, node, mask, operands, attrs))
    ctx.emit(node, "attention", operands, attrs)


def _mask_attrs(
    ctx: TorchContext, node: Any, mask: Any, operands: list[str], attrs: dict[str, AttrValue]
) -> dict[str, AttrValue]:
    """The mask as attributes (a raised constant, when `attrs` has no causal of its own) or as
    the last operand (appended to `operands`) with `masked = true`."""
    q = ctx.type_of(node.args[0])
    name = ctx.name_of(mask)
    constant = ctx.draft.constants.get(name)
    if constant is not None and not attrs.get("causal"):
        raised = raised_mask_attrs(constant, q.shape[2], ctx.type_of(node.args[1]).shape[2])
        if raised is not None:
            return raised
    dtype = ctx.type_of(mask).dtype
    if dtype in FLOAT_DTYPES:
        name = ctx.operand(mask, q)
    elif dtype != "bool":
        raise unsupported(node, f"a {dtype} attention mask (bool or float only)")
    operands.append(name)
    return {"masked": True}


ATTENTION_CONVERTERS: dict[str, Converter] = {
    "aten.scaled_dot_product_attention.default": _attention,
}
