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


# Issue 36 (finding 3): a verifier-legal graph whose values no machine of ours holds at once.
WIDE = """graph wide {
  input %x : f32[4,99999999]
  input %h : f16[4,99999999]
  weight %w : f32[99999999]
  %a = mul(%x, %w) : f32[4,99999999]
  %b = cast(%h) {dtype = "f32"} : f32[4,99999999]
  %c = add(%a, %b) : f32[4,99999999]
  output %c
}
"""


def test_draws_that_cannot_fit_are_refused_before_anything_is_drawn(monkeypatch) -> None:
    """Both figures in the message, and not one array made (the draw would take seconds and
    gigabytes before the allocator failed)."""
    import pytest

    from optgraph import host_memory
    from optgraph.reference import random_data

    def no_draw(*args: object) -> None:
        raise AssertionError("an array was drawn before the memory check")

    graph = og.parse(WIDE)
    monkeypatch.setattr(random_data, "_random_array", no_draw)
    monkeypatch.setattr(host_memory, "available_memory", lambda: (1 << 30, "a test's figure"))
    with pytest.raises(og.OptGraphError) as err:
        random_inputs(graph)
    # %x and %h, and %h's float32 draw before its cast to f16
    need = 4 * 99999999 * (4 + 2 + 4)
    assert str(err.value) == (
        f"error: random inputs: not enough memory: at least {host_memory.size_text(need)} "
        "needed (2 arrays, the largest %x f32[4,99999999] 1.49 GiB), and 1 GiB are available "
        "(a test's figure)"
    )
    monkeypatch.setattr(host_memory, "available_memory", lambda: (1 << 28, "a test's figure"))
    with pytest.raises(og.OptGraphError, match="random weights: not enough memory: at least 381"):
        random_weights(graph)


def test_draws_that_fit_are_not_refused(monkeypatch) -> None:
    from optgraph import host_memory

    graph = og.parse(WIDE.replace("99999999", "999"))
    monkeypatch.setattr(host_memory, "available_memory", lambda: (1 << 20, "a test's figure"))
    assert random_inputs(graph)["h"].dtype == np.float16
    assert random_weights(graph)["w"].shape == (999,)
