"""The attention op's optional operands and attributes: mask (by `masked = true`, the last
operand), per-batch-row kv_len, window, softcap and causal_align. Every message is pinned, and
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
        "attention: masked = true needs a mask operand after q, k, v [, kv_len]"
    )
    assert error("attention", Q, KV, KV, "i32[1]", "bool[3,7]") == (
        "attention: 5 operands (q, k, v, kv_len, mask) need masked = true"
    )


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


def test_a_window_bounds_the_flops_not_the_bytes() -> None:
    q, kv = TensorType("f32", (1, 2, 8, 16)), TensorType("f32", (1, 2, 64, 16))
    full = cost(Node("y", "attention", ("q", "k", "v"), {"causal": True}), [q, kv, kv], q)
    node = Node("y", "attention", ("q", "k", "v"), {"causal": True, "window": 4})
    windowed = cost(node, [q, kv, kv], q)
    assert windowed.bytes == full.bytes
    assert windowed.flops * 16 == full.flops  # 4 keys a row instead of 64
