"""ONNX Attention (opsets 23 to 25) -> IR `attention`.

    Attention(Q, K, V, attn_mask, past_key, past_value, nonpad_kv_seqlen) {is_causal, softcap}
    ->  %k = concat(%past_key, %K) {axis = 2}          (present_key, when past_key is given)
        %o = attention(%Q, %k, %v, %nonpad, %mask) {causal = true, masked = true, softcap = C}

- 3-D inputs `[B, S, H·D]` (with `q_num_heads`, `kv_num_heads`) are reshaped to `[B, S, H, D]`
  and transposed to `[B, H, S, D]`; the result goes back the same way.
- `is_causal` is offset-aligned: bottom-right with a past (offset = the past's length) or with
  `nonpad_kv_seqlen` (offset = nonpad − Sq per batch row: `kv_len i64[B]`), top-left without
  either, so without a cache and Sq != Skv the node gets `causal_align = "top_left"`.
- `left_window_size = W` with causal (or `right_window_size = 0`) is `window = W + 1` (ONNX
  counts the keys before the query, optgraph the keys including it).
- A mask shorter than the keys is padded (false / −inf) as ONNX specifies; on a node that is not
  causal already, a constant mask that is a pure function of positions becomes attributes
  (`attention_masks`).
- `scale` is applied once to the scores (ONNX scales Q and K by √scale each: equal up to rounding).

Refused with the reason: `qk_matmul_output` requested, a right window other than 0, a left window
without causal, a short mask that is not a constant.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from optgraph.frontends.attention_masks import raised_mask_attrs
from optgraph.frontends.onnx_context import Converter, OnnxContext
from optgraph.ir.graph import AttrValue
from optgraph.reference.kernels import numpy_dtype


def _input(node: Any, index: int) -> str | None:
    return node.input[index] if len(node.input) > index and node.input[index] else None


def _heads_first(ctx: OnnxContext, node: Any, name: str, heads: int, role: str) -> str:
    """A 3-D [B, S, H·D] input as [B, H, S, D]; 4-D inputs pass through."""
    t = ctx.type_of(name)
    if t.rank == 4:
        return ctx.name(name)
    if t.rank != 3 or not heads or t.shape[2] % heads:
        raise ctx.error(node, f"{role} {t} is neither [B,H,S,D] nor [B,S,H·D] with {heads} heads")
    b, s, hidden = t.shape
    split = ctx.emit(node, "reshape", [ctx.name(name)], {"shape": (b, s, heads, hidden // heads)},
                     output=f"{node.output[0]}.{role}_heads")  # fmt: skip
    return ctx.emit(node, "transpose", [split], {"perm": (0, 2, 1, 3)},
                    output=f"{node.output[0]}.{role}_first")  # fmt: skip


def _with_past(ctx: OnnxContext, node: Any, new: str, past_index: int, out_index: int) -> str:
    """K or V after the past (concatenated along the sequence), bound to present_key/value."""
    past = _input(node, past_index)
    present = node.output[out_index] if len(node.output) > out_index else ""
    if past is None:
        if present:
            ctx.values[present] = new
        return new
    target = present or f"{node.output[0]}.present{out_index}"
    return ctx.emit(node, "concat", [ctx.name(past), new], {"axis": 2}, output=target)


def _causal_attrs(
    ctx: OnnxContext, node: Any, attrs: Mapping[str, Any], sq: int, skv: int, cached: bool
) -> dict[str, AttrValue]:
    causal = bool(int(attrs.get("is_causal", 0)))
    left = int(attrs.get("left_window_size", -1))
    right = int(attrs.get("right_window_size", -1))
    if right not in (-1, 0) or (right == -1 and left >= 0 and not causal):
        raise ctx.error(
            node,
            f"left_window_size {left} and right_window_size {right} with is_causal {int(causal)}"
            " (only causal windows: is_causal or right_window_size 0)",
        )
    out: dict[str, AttrValue] = {}
    if causal or right == 0:
        out["causal"] = True
        if not cached and sq != skv:
            out["causal_align"] = "top_left"
    if left >= 0:
        out["window"] = left + 1
    return out


def _mask(
    ctx: OnnxContext, node: Any, name: str, like: str, skv: int, may_raise: bool
) -> tuple[str | None, dict[str, AttrValue]]:
    """(the mask operand, or None where it became attributes; the attributes). A mask is raised
    only on a node that is not causal already (the two would have to be intersected)."""
    t = ctx.type_of(name)
    q = ctx.draft.type_of(like)
    # an initializer is part of the model (float ones are kept as weights, still fixed)
    value = ctx.draft.constants.get(ctx.name(name), ctx.draft.weights.get(ctx.name(name)))
    short = skv - t.shape[-1]
    if short and value is not None:
        pad = [(0, 0)] * (value.ndim - 1) + [(0, short)]
        value = np.pad(value, pad, constant_values=False if value.dtype == np.bool_ else -np.inf)
    elif short:
        if t.dtype == "bool":
            raise ctx.error(node, f"attn_mask {t} is shorter than the {skv} keys and not constant")
        pads = (0,) * (2 * t.rank - 1) + (short,)
        padded = ctx.emit(node, "pad", [ctx.name(name)], {"pads": pads, "value": -np.inf},
                          output=f"{node.output[0]}.mask_padded")  # fmt: skip
        return _mask_operand(ctx, node, padded, q.dtype), {"masked": True}
    if value is not None:
        raised = raised_mask_attrs(value, q.shape[2], skv) if may_raise else None
        if raised is not None:
            return None, raised
        if short:  # the padded copy replaces the initializer
            if value.dtype != np.bool_:
                value = value.astype(numpy_dtype(q.dtype))
            return ctx.draft.constant(value, "attn_mask"), {"masked": True}
    return _mask_operand(ctx, node, ctx.name(name), q.dtype), {"masked": True}


def _mask_operand(ctx: OnnxContext, node: Any, mask: str, dtype: str) -> str:
    """The mask as attention reads it: bool, or cast to q's dtype."""
    if ctx.draft.type_of(mask).dtype in ("bool", dtype):
        return mask
    return ctx.emit(node, "cast", [mask], {"dtype": dtype}, output=f"{node.output[0]}.mask")


def _attention(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    if len(node.output) > 3 and node.output[3]:
        raise ctx.error(node, "the qk_matmul_output output is not supported")
    q_heads, kv_heads = int(attrs.get("q_num_heads", 0)), int(attrs.get("kv_num_heads", 0))
    rank = ctx.type_of(node.input[0]).rank
    q = _heads_first(ctx, node, node.input[0], q_heads, "q")
    k = _heads_first(ctx, node, node.input[1], kv_heads, "k")
    v = _heads_first(ctx, node, node.input[2], kv_heads, "v")
    new_keys = ctx.draft.type_of(k).shape[2]
    k = _with_past(ctx, node, k, 4, 1)
    v = _with_past(ctx, node, v, 5, 2)
    sq, skv = ctx.draft.type_of(q).shape[2], ctx.draft.type_of(k).shape[2]
    nonpad = _input(node, 6)
    cached = nonpad is not None or _input(node, 4) is not None
    out_attrs = _causal_attrs(ctx, node, attrs, sq, skv, cached)
    if "causal" in out_attrs and _input(node, 4) is not None and nonpad is None and new_keys != sq:
        # ONNX puts query i at past + i; bottom-right alignment at (past + new) - Sq + i.
        raise ctx.error(
            node,
            f"is_causal with a past of {skv - new_keys} keys, {new_keys} new keys and {sq} queries"
            " (ONNX places query i at the past's length + i: only equal query and new-key counts"
            " are supported)",
        )
    operands = [q, k, v]
    if nonpad is not None:
        operands.append(ctx.name(nonpad))
    mask = _input(node, 3)
    if mask is not None:
        operand, mask_attrs = _mask(ctx, node, mask, q, skv, not out_attrs.get("causal"))
        if operand is not None:
            operands.append(operand)
        out_attrs.update(mask_attrs)
    if "scale" in attrs:
        out_attrs["scale"] = float(attrs["scale"])
    if float(attrs.get("softcap", 0.0)):
        out_attrs["softcap"] = float(attrs["softcap"])
    if rank == 4:
        ctx.emit(node, "attention", operands, out_attrs)
        return
    heads = ctx.emit(node, "attention", operands, out_attrs, output=f"{node.output[0]}.heads")
    b, h, s, d = ctx.draft.type_of(heads).shape
    back = ctx.emit(node, "transpose", [heads], {"perm": (0, 2, 1, 3)},
                    output=f"{node.output[0]}.seq_first")  # fmt: skip
    ctx.emit(node, "reshape", [back], {"shape": (b, s, h * d)}, output=node.output[0])


ATTENTION_CONVERTERS: dict[str, Converter] = {"Attention": _attention}
