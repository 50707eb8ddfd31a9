"""`fusion_rules.product_operands`: the row and weight of a product node, plain or fused, and
None for a node that is no product or whose product reads a value computed in its region."""

from __future__ import annotations

import optgraph as og
from optgraph.analysis.fusion_rules import product_operands
from optgraph.passes.manager import run_pipeline

GRAPH = """graph p {
  input %x : f32[1,64]
  input %g : f32[64]
  weight %w : f32[64,32]
  weight %b : f32[32]
  weight %w2 : f32[64,32]
  %mm = matmul(%x, %w) : f32[1,32]
  %y = add(%mm, %b) : f32[1,32]
  %n = rms_norm(%x, %g) : f32[1,64]
  %z = matmul(%n, %w2) : f32[1,32]
  output %y, %z
}
"""


def test_plain_and_fused_products_and_others() -> None:
    plain = og.parse(GRAPH)
    types = plain.value_types()
    by_name = {n.name: n for n in plain.nodes}
    row, weight, anchor = product_operands(by_name["mm"], types) or ("", "", None)
    assert (row, weight, anchor) == ("x", "w", by_name["mm"])
    assert product_operands(by_name["y"], types) is None  # an add
    fused = run_pipeline(plain, "verify,fuse{prologue-max-k=4096}")
    types = fused.value_types()
    found = {n.name: product_operands(n, types) for n in fused.nodes if n.op == "fused"}
    with_epilogue = [f for f in found.values() if f is not None]
    assert [(r, w, a.op) for r, w, a in with_epilogue] == [("x", "w", "matmul")]
    assert any(f is None for f in found.values())  # the norm computed inside: its row is no param
