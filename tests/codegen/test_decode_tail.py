"""Fewer launches at the ends of a decode step (codegen/decode/argmax_folds.py, argmax_tail.py,
gathered_rows.py): the launch counts of the decode loop's launch-bound step with each setting
on, when a fold is refused, and in the CPU emulator the same tokens and caches as the plan
without the settings and as the reference, ties in the argmax to the first index, token ids
out of range giving zero rows."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.decode import argmax_folds, gathered_rows
from optgraph.codegen.lower_cuda import CudaPlan, KernelStep, lower_cuda
from optgraph.codegen.plan.in_place_outputs import in_place_candidates
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from tests.support import cuda_emulator
from tests.support.decode_loop_graph import LAUNCH_BOUND, loop_step_graph, loop_step_text

NEEDS_GXX = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
SETTINGS = {
    "cast": (argmax_folds, "ARGMAX_CAST"),
    "product": (argmax_folds, "ARGMAX_IN_PRODUCT"),
    "gather": (gathered_rows, "GATHER_ROWS"),
}


@contextmanager
def settings(*on: str) -> Iterator[None]:
    """The named settings on (the others off) inside the block."""
    saved = [(m, n, getattr(m, n)) for m, n in SETTINGS.values()]
    try:
        for key, (module, name) in SETTINGS.items():
            setattr(module, name, key in on)
        yield
    finally:
        for module, name, value in saved:
            setattr(module, name, value)


def _plan(graph: og.Graph, *on: str) -> CudaPlan:
    with settings(*on):
        return lower_cuda(graph, in_place=in_place_candidates(graph))


def _launches(plan: CudaPlan) -> list[KernelStep]:
    return [s for s in plan.steps if isinstance(s, KernelStep)]


def _issuers(plan: CudaPlan) -> set[str]:
    return {n for s in _launches(plan) for n in s.members}


@pytest.fixture(scope="module")
def launch_bound() -> og.Graph:
    return run_pipeline(loop_step_graph("f16", **LAUNCH_BOUND), DEFAULT_PIPELINE)


def test_launch_counts_of_the_launch_bound_step(launch_bound: og.Graph) -> None:
    graph = launch_bound
    plain = _plan(graph)
    assert len(_launches(plain)) == 44  # h0, five a layer, logits, argmax, cast + the adds
    assert {"h0", "next_token64", "next_token"} <= _issuers(plain)
    cast = _plan(graph, "cast")
    # the cast issues nothing; the adds write bytes the planner took from the logits, which
    # the argmax reads, so they stay a launch of their own
    assert "next_token" not in _issuers(cast) and len(_launches(cast)) == 44
    (argmax,) = [s for s in _launches(cast) if s.node == "next_token64"]
    assert argmax.args[0] == cast.locations["next_token"]
    product = _plan(graph, "product")
    assert len(_launches(product)) == 43
    assert not {"next_token64", "next_token"} & _issuers(product)
    (logits,) = [s for s in _launches(product) if s.node == "logits"]
    assert product.locations["next_token"] in logits.args
    gather = _plan(graph, "gather")
    assert len(_launches(gather)) == 43 and "h0" not in _issuers(gather)
    assert len(_launches(_plan(graph, "cast", "product", "gather"))) == 42
    assert len(_launches(_plan(graph, "cast", "gather"))) == 43


def test_launch_counts_with_the_position_adds_issued_first() -> None:
    graph = run_pipeline(loop_step_graph("f16", True, **LAUNCH_BOUND), DEFAULT_PIPELINE)
    assert [n.name for n in graph.nodes[:2]] == ["next_pos", "next_kv_len"]
    plain = _plan(graph)
    assert len(_launches(plain)) == 44
    assert ("next_pos", "next_kv_len", "h0") in [s.members for s in _launches(plain)]
    assert len(_launches(_plan(graph, "cast"))) == 43  # argmax + cast: one kernel
    assert len(_launches(_plan(graph, "product"))) == 42
    every = _plan(graph, "cast", "product", "gather")
    assert len(_launches(every)) == 41
    assert _launches(every)[0].members == ("next_pos", "next_kv_len", "l0.q", "l0.k", "l0.v")


def _step_values(graph: og.Graph, token: int) -> dict[str, np.ndarray]:
    values = random_inputs(graph, 0)
    values["one"][:] = 1
    values["pos"][:] = 3
    values["kv_len"][:] = 4
    values["tokens"][:] = token
    return values


def _emulated(graph: og.Graph, planned: og.Graph, values: dict, weights: dict, *on: str) -> dict:
    plan = _plan(planned, *on)
    return cuda_emulator.run_plan(plan, {k: v.copy() for k, v in values.items()}, weights, planned)


def _assert_same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    for name, value in want.items():
        assert np.array_equal(got[name], value), name


@NEEDS_GXX
@pytest.mark.parametrize(("dtype", "adds_first"), [("f32", False), ("f16", False), ("f16", True)])
def test_each_setting_computes_the_reference_step(dtype: str, adds_first: bool) -> None:
    graph = loop_step_graph(dtype, adds_first)
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    weights = random_weights(graph, 0)
    values = _step_values(graph, 5)
    ref = run_reference(graph, values, weights)
    plain = _emulated(graph, planned, values, weights)
    for on in (("cast",), ("product",), ("gather",), ("cast", "product", "gather")):
        got = _emulated(graph, planned, values, weights, *on)
        _assert_same(got, plain)  # the same bits as the kernels they replace
        for name in ("next_token", "next_pos", "next_kv_len"):
            assert np.array_equal(got[name], ref[name]), (on, name)
        tol = 1e-5 if dtype == "f32" else 2e-3
        for name in ref:
            if name.endswith("cache_new"):
                np.testing.assert_allclose(
                    got[name].astype(np.float32), ref[name].astype(np.float32), atol=tol
                )


def _tied_weights(graph: og.Graph, values: dict, first: int, second: int) -> dict:
    """Weights whose logits are largest, and equal, at columns `first` and `second` (the
    others half as large; the head's column sign picked so that the largest is positive)."""
    weights = random_weights(graph, 0)
    head = weights["lm_head"]
    column = head[:, 0].copy()
    for sign in (1.0, -1.0):
        head[:] = (0.5 * sign) * column[:, None]
        head[:, first] = head[:, second] = sign * column
        if int(run_reference(graph, values, weights)["next_token"][0]) == first:
            return weights
    raise AssertionError("no sign of the column puts the maximum at the tied columns")


@NEEDS_GXX
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_ties_pick_the_first_index(dtype: str) -> None:
    graph = loop_step_graph(dtype, vocab=256)
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    with settings("product"):
        (logits,) = [s for s in _launches(_plan(planned, "product")) if s.node == "logits"]
    assert logits.grid[0] >= 4  # tiles: the maximum is in later ones than the first block's
    values = _step_values(graph, 5)
    weights = _tied_weights(graph, values, 140, 250)
    for on in (("cast",), ("product",), ("cast", "product")):
        got = _emulated(graph, planned, values, weights, *on)
        assert int(got["next_token"][0]) == 140, on


@NEEDS_GXX
def test_token_ids_out_of_range_give_zero_rows() -> None:
    graph = loop_step_graph("f32")
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    weights = random_weights(graph, 0)
    weights["embed"][0] += 1.0  # row 0 and the last row differ from zeros
    weights["embed"][-1] -= 1.0
    vocab = weights["embed"].shape[0]
    in_range = [_emulated(graph, planned, _step_values(graph, t), weights) for t in (0, vocab - 1)]
    for token in (-1, vocab, 1 << 20):
        values = _step_values(graph, token)
        want = _emulated(graph, planned, values, weights)  # get_rows' kernel: a zero row
        got = _emulated(graph, planned, values, weights, "gather")
        _assert_same(got, want)
        assert not all(np.array_equal(got[k], v) for r in in_range for k, v in r.items())


def _graph_with(text: str) -> og.Graph:
    return run_pipeline(og.parse(text), DEFAULT_PIPELINE)


def test_an_argmax_with_another_reader_or_a_node_between_keeps_its_cast() -> None:
    base = loop_step_text("f16")
    second = base.replace(
        "  %next_pos = add(%pos, %one)",
        '  %other = cast(%next_token64) {dtype = "i64"} : i64[1]\n  %next_pos = add(%pos, %one)',
    ).replace("%next_kv_len\n}", "%next_kv_len, %other\n}")
    between = base.replace(
        '  %next_token = cast(%next_token64) {dtype = "i32"} : i32[1]\n'
        "  %next_pos = add(%pos, %one) : i32[1]\n",
        "  %next_pos = add(%pos, %one) : i32[1]\n"
        '  %next_token = cast(%next_token64) {dtype = "i32"} : i32[1]\n',
    )
    assert between != base
    for text in (second, between):
        graph = _graph_with(text)
        assert "next_token" in _issuers(_plan(graph, "cast"))
        product = _plan(graph, "product")  # the argmax still folds, its cast does not
        assert "next_token64" not in _issuers(product) and "next_token" in _issuers(product)


def test_a_computed_id_or_an_output_row_keeps_the_gather() -> None:
    base = loop_step_text("f16")
    computed = base.replace("get_rows(%embed, %tokens)", "get_rows(%embed, %tokens2)").replace(
        "  %h0 = get_rows", "  %tokens2 = add(%tokens, %one) : i32[1]\n  %h0 = get_rows"
    )
    output = base.replace("%next_kv_len\n}", "%next_kv_len, %h0\n}")
    for text in (computed, output):
        assert text != base
        graph = _graph_with(text)
        assert "h0" in _issuers(_plan(graph, "gather"))
    assert "h0" not in _issuers(_plan(_graph_with(base), "gather"))


SPLIT_K = """graph head {{
  input %x : f16[1,{k}]
  weight %w : f16[{k},{n}]
  %y = matmul(%x, %w) : f16[1,{n}]
  %i = argmax(%y) {{axis = -1}} : i64[1]
  %t = cast(%i) {{dtype = "{dt}"}} : {dt}[1]
  output %t, %y
}}
"""


@NEEDS_GXX
@pytest.mark.parametrize(("k", "n", "dt"), [(4096, 64, "i32"), (4096, 512, "i64")])
def test_the_product_tail_after_split_k(k: int, n: int, dt: str) -> None:
    graph = og.parse(SPLIT_K.format(k=k, n=n, dt=dt))
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    plan = _plan(planned, "product")
    (step,) = _launches(plan)
    assert step.grid[1] > 1  # split K: the tiles' last blocks arrive at the argmax counter
    values, weights = random_inputs(graph, 1), random_weights(graph, 1)
    weights["w"][:, n - 40] = weights["w"][:, n - 3] = 4.0  # the maximum, tied, in the last tile
    values["x"] = np.abs(values["x"])
    got = cuda_emulator.run_plan(plan, values, weights, planned)
    _assert_same(got, cuda_emulator.run_plan(_plan(planned), values, weights, planned))
    ref = run_reference(graph, values, weights)
    assert int(ref["t"][0]) == int(got["t"][0]) == n - 40


VIEWED = """graph head {
  input %x : f32[1,64]
  weight %w : f32[64,128]
  %y = matmul(%x, %w) : f32[1,128]
  %v = reshape(%y) {shape = [128]} : f32[128]
  %i = argmax(%v) {axis = 0} : i64[]
  output %i
}
"""


@NEEDS_GXX
def test_an_argmax_of_a_view_of_the_product() -> None:
    graph = og.parse(VIEWED)
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    plan = _plan(planned, "product")
    assert [s.node for s in _launches(plan)] == ["y"]  # the argmax (no cast) in the product
    values, weights = random_inputs(graph, 2), random_weights(graph, 2)
    got = cuda_emulator.run_plan(plan, values, weights, planned)
    assert int(got["i"]) == int(run_reference(graph, values, weights)["i"])
