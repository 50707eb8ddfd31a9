"""The attention op's optional operands and attributes: mask (by `masked = true`, the last
operand), sinks (by `sinks = true`, after kv_len), per-batch-row kv_len, window, softcap and
causal_align. Every message is pinned, and
one error goes through the parser to check its location."""

from __future__ import annotations

import pytest

import optgraph as og
from optgraph.errors import OptGraphError
from optgraph.ir.graph import Node, TensorType
from optgraph.ir.op_rules_attention import AttentionOperands, attention_operands
from optgraph.ir.ops import cost
from optgraph.ir.verify import verify
from tests.ir.test_ops_types import error, infer

Q, KV = "f32[2,4,3,16]", "f32[2,2,7,16]"


def test_operand_positions() -> None:
    assert attention_operands(3, False) == AttentionOperands(None, None)
    assert attention_operands(4, False) == AttentionOperands(3, None)
    assert attention_operands(4, True) == AttentionOperands(None, 3)
    assert attention_operands(5, True) == AttentionOperands(3, 4)
    assert attention_operands(4, False, True) == AttentionOperands(None, None, 3)
    assert attention_operands(5, False, True) == AttentionOperands(3, None, 4)
    assert attention_operands(5, True, True) == AttentionOperands(None, 4, 3)
    assert attention_operands(6, True, True) == AttentionOperands(3, 5, 4)


def test_masks_that_broadcast() -> None:
    for mask in ("bool[2,4,3,7]", "bool[3,7]", "f32[2,1,1,7]", "f32[7]", "bool[1,4,3,1]"):
        assert infer("attention", Q, KV, KV, mask, masked=True) == Q
    assert infer("attention", Q, KV, KV, "i32[2]", "bool[2,1,3,7]", masked=True) == Q
    assert infer("attention", Q, KV, KV, "i64[1]", causal=True, window=4, softcap=50.0) == Q
    assert infer("attention", Q, KV, KV, causal=True, causal_align="top_left") == Q


def test_mask_errors() -> None:
    assert error("attention", Q, KV, KV, "f32[1,1,3,5]", masked=True) == (
        "attention: mask f32[1,1,3,5] does not broadcast to [B,Hq,Sq,Skv] = [2,4,3,7]"
    )
    assert error("attention", Q, KV, KV, "f32[1,2,1,3,7]", masked=True) == (
        "attention: mask f32[1,2,1,3,7] does not broadcast to [B,Hq,Sq,Skv] = [2,4,3,7]"
    )
    assert error("attention", Q, KV, KV, "f16[3,7]", masked=True) == (
        "attention: mask must be bool or f32 like q, got f16[3,7]"
    )
    assert error("attention", Q, KV, KV, masked=True) == (
        "attention: 3 operands, but masked = true and sinks = false take 4 or 5 "
        "(q, k, v [, kv_len], mask)"
    )
    assert error("attention", Q, KV, KV, "i32[1]", "bool[3,7]") == (
        "attention: 5 operands, but masked = false and sinks = false take 3 or 4 (q, k, v [, kv_len])"
    )


def test_sinks() -> None:
    assert infer("attention", Q, KV, KV, "f32[4]", sinks=True) == Q
    assert infer("attention", Q, KV, KV, "i32[2]", "f32[4]", "bool[3,7]", sinks=True,
                 masked=True) == Q  # fmt: skip
    half = "f16[2,4,3,16]", "f16[2,2,7,16]"
    for sinks in ("f16[4]", "f32[4]"):
        assert infer("attention", half[0], half[1], half[1], sinks, sinks=True) == half[0]
    assert error("attention", Q, KV, KV, "f32[2]", sinks=True) == (
        "attention: sinks must be [Hq] = [4] of f32 (a logit per query head), got f32[2]"
    )
    assert error("attention", half[0], half[1], half[1], "bf16[4]", sinks=True) == (
        "attention: sinks must be [Hq] = [4] of f32 or f16 (a logit per query head), got bf16[4]"
    )
    assert error("attention", Q, KV, KV, sinks=True) == (
        "attention: 3 operands, but masked = false and sinks = true take 4 or 5 "
        "(q, k, v [, kv_len], sinks)"
    )
    assert error("attention", Q, KV, KV, "i32[1]", "f32[4]", sinks=True, masked=True) == (
        "attention: sinks must be [Hq] = [4] of f32 (a logit per query head), got i32[1]"
    )  # 5 operands of masked and sinks: q, k, v, sinks, mask (no kv_len)


def test_kv_len_and_attribute_errors() -> None:
    assert error("attention", Q, KV, KV, "i32[3]") == (
        "attention: kv_len must be i32[1] or i32[B] = i32[2] (or i64), got i32[3]"
    )
    assert error("attention", Q, KV, KV, window=4) == "attention: window = 4 needs causal = true"
    assert error("attention", Q, KV, KV, causal=True, window=-1) == (
        "attention: window must be >= 0 (0: no window), got -1"
    )
    assert error("attention", Q, KV, KV, softcap=-2.0) == (
        "attention: softcap must be a finite number >= 0 (0: none), got -2.0"
    )
    assert error("attention", Q, KV, KV, causal_align="top") == (
        'attention: attribute \'causal_align\' must be "bottom_right" or "top_left", got "top"'
    )


def test_located_error_through_the_parser() -> None:
    text = """graph g {
  input %q : f32[1,2,3,8]
  input %k : f32[1,2,5,8]
  input %m : f32[1,1,3,4]
  %o = attention(%q, %k, %k, %m) {masked = true} : f32[1,2,3,8]
  output %o
}
"""
    with pytest.raises(OptGraphError) as info:
        verify(og.parse(text, "m.ir"))
    rendered = str(info.value)
    assert "m.ir:5:" in rendered
    assert "mask f32[1,1,3,4] does not broadcast to [B,Hq,Sq,Skv] = [1,2,3,5]" in rendered


def test_round_trip_prints_the_attributes() -> None:
    text = """graph g {
  input %q : f16[2,4,1,16]
  input %k : f16[2,2,9,16]
  input %len : i32[2]
  input %m : bool[2,1,1,9]
  %o = attention(%q, %k, %k, %len, %m) {causal = true, causal_align = "top_left", masked = true, softcap = 30.0, window = 4} : f16[2,4,1,16]
  output %o
}
"""
    graph = og.parse(text)
    assert og.parse(og.print_graph(graph)) == graph


def test_round_trip_with_sinks_and_a_located_error() -> None:
    text = """graph g {
  input %q : f16[1,4,2,16]
  input %k : f16[1,2,9,16]
  input %len : i32[1]
  input %s : f32[4]
  input %m : f16[1,1,2,9]
  %o = attention(%q, %k, %k, %len, %s, %m) {causal = true, masked = true, sinks = true} : f16[1,4,2,16]
  output %o
}
"""
    graph = og.parse(text)
    verify(graph)
    printed = og.print_graph(graph)
    assert "sinks = true" in printed and og.parse(printed) == graph
    bad = text.replace("%s : f32[4]", "%s : f32[2]")
    with pytest.raises(OptGraphError) as info:
        verify(og.parse(bad, "s.ir"))
    rendered = str(info.value)
    assert "s.ir:7:" in rendered
    assert "sinks must be [Hq] = [4] of f32 or f16 (a logit per query head), got f32[2]" in rendered


def test_a_window_bounds_the_flops_not_the_bytes() -> None:
    q, kv = TensorType("f32", (1, 2, 8, 16)), TensorType("f32", (1, 2, 64, 16))
    full = cost(Node("y", "attention", ("q", "k", "v"), {"causal": True}), [q, kv, kv], q)
    node = Node("y", "attention", ("q", "k", "v"), {"causal": True, "window": 4})
    windowed = cost(node, [q, kv, kv], q)
    assert windowed.bytes == full.bytes
    assert windowed.flops * 16 == full.flops  # 4 keys a row instead of 64
