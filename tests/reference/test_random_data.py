"""Random inputs for `run` respect every range an input feeds (reference/random_data.py): a
position that reads a 256-row table and writes a 24-row cache (GPT-2's decode step, whose
cache_position was drawn for the table and wrote past the cache), through adds and subs of
constants, casts, the importers' wrap of negative indices; constants keep their values."""

from __future__ import annotations

import numpy as np

import optgraph as og
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference

SEEDS = range(40)

# GPT-2's decode step, reduced: the position reads the 256-row position table, writes the cache
# at pos + 0 and attends to pos + 1 keys (the import's arange and kv_offset, now constants).
DECODE = """graph decode {
  input %pos : i64[1]
  input %cache : f32[1,2,24,4]
  input %new : f32[1,2,1,4]
  input %q : f32[1,2,1,4]
  weight %wpe : f32[256,4]
  weight %arange : i64[1] = [0]
  weight %kv_offset : i64[1] = [1]
  %row = reshape(%pos) {shape = [1, 1]} : i64[1,1]
  %p = get_rows(%wpe, %row) : f32[1,1,4]
  %at = add(%arange, %pos) : i64[1]
  %c = kv_cache_write(%cache, %new, %at) : f32[1,2,24,4]
  %kv = add(%pos, %kv_offset) : i64[1]
  %a = attention(%q, %c, %c, %kv) {causal = true} : f32[1,2,1,4]
  output %p, %a
}
"""


def test_a_position_fits_every_cache_and_table_it_indexes() -> None:
    graph = og.parse(DECODE)
    weights = random_weights(graph)
    assert weights["kv_offset"].tolist() == [1] and weights["arange"].tolist() == [0]
    drawn = []
    for seed in SEEDS:
        inputs = random_inputs(graph, seed)
        drawn.append(int(inputs["pos"][0]))
        run_reference(graph, inputs, weights)  # in range for the cache write and the attention
    assert 0 <= min(drawn) and max(drawn) <= 23
    assert max(drawn) >= 16  # drawn over the cache's rows, not the default [0, 16)


WRAPPED = """graph g {
  input %ids : i64[6]
  input %back : i64[3]
  input %small : i64[2]
  weight %table : f32[5,3]
  weight %zero : i64[1] = [0]
  weight %five : i64[1] = [5]
  weight %ten : i64[1] = [10]
  weight %two : i64[1] = [2]
  %neg = less(%ids, %zero) : bool[6]
  %up = add(%ids, %five) : i64[6]
  %wrapped = where(%neg, %up, %ids) : i64[6]
  %rows = get_rows(%table, %wrapped) : f32[6,3]
  %from_ten = sub(%ten, %back) : i64[3]
  %narrow = cast(%from_ten) {dtype = "i32"} : i32[3]
  %more = get_rows(%table, %narrow) : f32[3,3]
  %shifted = sub(%small, %two) : i64[2]
  %wide = expand(%shifted) {shape = [2, 2]} : i64[2,2]
  %last = get_rows(%table, %wide) : f32[2,2,3]
  output %rows, %more, %last
}
"""


def test_ranges_follow_wraps_subs_casts_and_expands_back_to_the_inputs() -> None:
    graph = og.parse(WRAPPED)
    weights = random_weights(graph)
    ids, back, small = [], [], []
    for seed in SEEDS:
        inputs = random_inputs(graph, seed)
        ids += inputs["ids"].tolist()
        back += inputs["back"].tolist()
        small += inputs["small"].tolist()
        run_reference(graph, inputs, weights)
    assert set(ids) == set(range(5))  # the wrap's i: non-negative ids of the 5-row table
    assert set(back) == set(range(6, 11))  # 10 - back in [0, 5)
    assert set(small) == set(range(2, 7))  # small - 2 in [0, 5)


def test_a_value_computed_otherwise_keeps_the_default_range() -> None:
    graph = og.parse(
        "graph g {\n  input %i : i64[4]\n  weight %two : i64[1] = [2]\n"
        "  weight %t : f32[40,2]\n  %j = mul(%i, %two) : i64[4]\n"
        "  %r = get_rows(%t, %j) : f32[4,2]\n  output %r\n}\n"
    )
    drawn = np.concatenate([random_inputs(graph, s)["i"] for s in SEEDS])
    assert drawn.min() >= 0 and drawn.max() <= 15  # a product is not followed: [0, 16)
