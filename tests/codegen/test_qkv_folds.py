"""q/k/v products that do the rope and the KV-cache writes in their store (codegen/decode/qkv_folds.py,
epilogues.py): which products fold, the five launches of a decode layer, where the
rotated q lives, when a fold is refused, and in the CPU emulator the same bits as the unfolded
plan (f32, f16, bf16; tiles of whole heads and chunked head halves; single pass and split-K)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.decode import qkv_folds, rope_cache_writes
from optgraph.codegen.kernels.one_row import product_kernel
from optgraph.codegen.lower_cuda import CudaPlan, KernelStep, lower_cuda, storage
from optgraph.codegen.plan.in_place_outputs import in_place_candidates
from optgraph.codegen.plan.steps import Location
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.support import cuda_emulator

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from gen_llama import generate_llama

NEEDS_GXX = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
ONE_STREAM = "verify,assign-streams{max-streams=1},insert-sync,analyze-lifetimes,plan-memory"

QKV = """graph qkv {{
  input %x : {dt}[1,{k}]
  input %pos : i32[1]
  input %k_cache : {dt}[1,{kh},16,{d}]
  input %v_cache : {dt}[1,{kh},16,{d}]
  weight %wq : {dt}[{k},{nq}]
  weight %wk : {dt}[{k},{nk}]
  weight %wv : {dt}[{k},{nk}]
  %q = matmul(%x, %wq) : {dt}[1,{nq}]
  %k = matmul(%x, %wk) : {dt}[1,{nk}]
  %v = matmul(%x, %wv) : {dt}[1,{nk}]
  %q4 = reshape(%q) {{shape = [1, 1, {h}, {d}]}} : {dt}[1,1,{h},{d}]
  %k4 = reshape(%k) {{shape = [1, 1, {kh}, {d}]}} : {dt}[1,1,{kh},{d}]
  %v4 = reshape(%v) {{shape = [1, 1, {kh}, {d}]}} : {dt}[1,1,{kh},{d}]
  %q_rot = rope(%q4, %pos) {{theta = 10000.0}} : {dt}[1,1,{h},{d}]
  %k_rot = rope(%k4, %pos) {{theta = 10000.0}} : {dt}[1,1,{kh},{d}]
  %k_t = transpose(%k_rot) {{perm = [0, 2, 1, 3]}} : {dt}[1,{kh},1,{d}]
  %v_t = transpose(%v4) {{perm = [0, 2, 1, 3]}} : {dt}[1,{kh},1,{d}]
  %kc = kv_cache_write(%k_cache, %k_t, %pos) : {dt}[1,{kh},16,{d}]
  %vc = kv_cache_write(%v_cache, %v_t, %pos) : {dt}[1,{kh},16,{d}]
  %qs = neg(%q_rot) : {dt}[1,1,{h},{d}]
  output %qs, %kc, %vc
}}
"""


def _qkv(dt: str, k: int, h: int, kh: int, d: int) -> og.Graph:
    text = QKV.format(dt=dt, k=k, h=h, kh=kh, d=d, nq=h * d, nk=kh * d)
    return run_pipeline(og.parse(text), ONE_STREAM)


def _llama(dt: str = "f32", layers: int = 2) -> og.Graph:
    text = generate_llama(layers=layers, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=64, dtype=dt)
    return run_pipeline(og.parse(text), DEFAULT_PIPELINE)


def _launches(plan: CudaPlan) -> list[tuple[str, ...]]:
    return [s.members for s in plan.steps if isinstance(s, KernelStep)]


def test_a_decode_layer_is_five_launches(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = _llama()
    pairs = in_place_candidates(graph)
    plan = lower_cuda(graph, in_place=pairs)
    assert len(_launches(plan)) == 2 + 5 * 2  # embedding, lm head; five a layer
    assert ("l0.q", "l0.k", "l0.v") in _launches(plan)
    assert plan.locations["l0.q_rot"] == plan.locations["l0.q"]  # the rotated q, in q's bytes
    assert plan.locations["l0.q_t"] == plan.locations["l0.q"]
    monkeypatch.setattr(qkv_folds, "FOLD_QKV", False)
    assert len(_launches(lower_cuda(graph, in_place=pairs))) == 2 + 6 * 2
    monkeypatch.setattr(rope_cache_writes, "ROPE_CACHE_WRITES", False)
    assert len(_launches(lower_cuda(graph, in_place=pairs))) == 2 + 7 * 2


def _placed(graph: og.Graph, pairs: dict[str, str]) -> dict[str, Location]:
    """Locations as `lower_cuda` has them before the folds: in-place outputs in their inputs."""
    locations = storage(graph)[0]
    for output, source in pairs.items():
        locations[output] = locations[source]
    return locations


def test_which_products_fold() -> None:
    graph = _llama(layers=1)
    pairs = in_place_candidates(graph)
    folds = qkv_folds.product_folds(graph, _placed(graph, pairs), pairs)
    kinds = {p: (f.rope is not None, f.write is not None) for p, f in folds.items()}
    assert kinds == {"l0.q": (True, False), "l0.k": (True, True), "l0.v": (False, True)}
    # copying cache writes: the planner put the copied key cache over q's and k's bytes (both
    # dead by then), so neither may keep its rotated value there; their ropes' own bytes are
    # touched by nothing from the product to the rope: the rotated values go there
    locations = _placed(graph, {})
    assert locations["l0.k_cache_new"].offset <= locations["l0.q"].offset
    folds = qkv_folds.product_folds(graph, locations, {})
    assert {p: (f.write is None, f.in_rope_bytes) for p, f in folds.items()} == {
        "l0.q": (True, True),
        "l0.k": (True, True),
    }


def test_q_keeps_its_bytes_only_where_nothing_else_is_placed_there() -> None:
    graph = _qkv("f16", 64, 4, 2, 16)
    pairs = in_place_candidates(graph)
    locations = _placed(graph, pairs)
    assert set(qkv_folds.product_folds(graph, locations, pairs)) == {"q", "k", "v"}
    q = locations["q"]
    moved = dict(locations)  # %qs (after %q_rot's readers begin) placed over %q's bytes
    moved["qs"] = Location(q.space, q.key, q.offset + 2)
    folds = qkv_folds.product_folds(graph, moved, pairs)
    assert set(folds) == {"q", "k", "v"} and folds["q"].in_rope_bytes  # %q_rot's bytes are free
    rotated = locations["q_rot"]  # ... unless %k, issued between %q and %q_rot, is there too
    moved["k"] = Location(rotated.space, rotated.key, rotated.offset)
    assert set(qkv_folds.product_folds(graph, moved, pairs)) == {"k", "v"}
    streams = run_pipeline(
        og.parse(_qkv_text()), ONE_STREAM.replace("max-streams=1", "max-streams=2")
    )
    if len({n.stream for n in streams.nodes if not n.is_event}) > 1:
        pairs = in_place_candidates(streams)
        assert "q" not in qkv_folds.product_folds(streams, _placed(streams, pairs), pairs)


def _qkv_text() -> str:
    return QKV.format(dt="f16", k=64, h=4, kh=2, d=16, nq=64, nk=32)


def test_an_output_or_a_second_reader_blocks_the_fold() -> None:
    text = _qkv_text().replace("output %qs, %kc, %vc", "output %qs, %kc, %vc, %k4")
    graph = run_pipeline(og.parse(text), ONE_STREAM)
    pairs = in_place_candidates(graph)
    assert set(qkv_folds.product_folds(graph, _placed(graph, pairs), pairs)) == {"q", "v"}
    text = _qkv_text().replace(
        "  %qs = neg(%q_rot)", "  %q2 = neg(%q) : f16[1,64]\n  %qs = neg(%q_rot)"
    )
    text = text.replace("output %qs,", "output %q2, %qs,")
    graph = run_pipeline(og.parse(text), ONE_STREAM)
    pairs = in_place_candidates(graph)
    assert set(qkv_folds.product_folds(graph, _placed(graph, pairs), pairs)) == {"k", "v"}


def _same_bits_folded_or_not(graph: og.Graph, weights: dict, inputs: dict, launches: int) -> None:
    pairs = in_place_candidates(graph)
    folded = lower_cuda(graph, in_place=pairs)
    assert sum(len(m) for m in _launches(folded) if {"q", "k", "v"} & set(m)) in (0, 3)
    assert len(_launches(folded)) == launches
    got = cuda_emulator.run_plan(folded, inputs, weights)
    saved = qkv_folds.FOLD_QKV
    qkv_folds.FOLD_QKV = False
    try:
        plain = cuda_emulator.run_plan(lower_cuda(graph, in_place=pairs), inputs, weights)
    finally:
        qkv_folds.FOLD_QKV = saved
    if int(inputs["pos"][0]) >= 16:  # no row fits: the caches stay as they were
        for name, cache in (("kc", "k_cache"), ("vc", "v_cache")):
            np.testing.assert_array_equal(got[name], inputs[cache])
            np.testing.assert_array_equal(plain[name], inputs[cache])
        return
    want = run_reference(graph, inputs, weights)
    for name in graph.output_names():
        np.testing.assert_array_equal(got[name], plain[name])
        err = nmse(np.asarray(got[name], np.float64), np.asarray(want[name], np.float64))
        assert err < 1e-4, (name, err)


@NEEDS_GXX
@pytest.mark.parametrize(
    ("dt", "k", "h", "kh", "d"),
    [
        ("f16", 64, 4, 2, 16),  # single pass, chunked head halves
        ("f16", 2100, 8, 2, 128),  # split-K, tiles of whole heads
        ("f32", 2100, 2, 1, 512),  # split-K, chunked head halves
        ("bf16", 300, 4, 4, 64),
        # unfolded, these k and v products alone would take one column thread a tile (a single
        # pass): they take the fold's even layout instead, so the sums agree
        ("f16", 768, 6, 2, 128),
        ("f16", 1280, 10, 2, 128),
    ],
)
def test_folded_products_give_the_unfolded_bits(dt: str, k: int, h: int, kh: int, d: int) -> None:
    graph = _qkv(dt, k, h, kh, d)
    inputs, weights = random_inputs(graph, 2), random_weights(graph, 2)
    # inside, the last row, outside the cache (no row written); big products: one position
    for pos in (3, 15, 16) if k < 2048 else (7,):
        inputs["pos"] = np.array([pos], np.int32)
        _same_bits_folded_or_not(graph, weights, inputs, 2)


@pytest.mark.parametrize("k", [768, 1280])
def test_a_product_a_rope_reads_has_the_folds_layout_folded_or_not(k: int) -> None:
    """k and v of K = 768 or 1280 rows (f16, 256 columns): alone, the layout gives them one
    column thread a tile, which cannot hold rope's column pairs; a product whose result a rope
    reads takes the fold's layout even where the rope is not folded (a graph of several streams,
    or the folds off), so both plans sum it in the same order. v (no rope) keeps its own."""
    graph = _qkv("f16", k, 10, 2, 128)
    assert qkv_folds.rope_read_products(graph) == {"q", "k"}
    pairs = in_place_candidates(graph)

    def grids(plan: CudaPlan) -> dict[str, tuple[int, int, int]]:
        return {s.node: s.grid for s in plan.steps if isinstance(s, KernelStep)}

    folded = grids(lower_cuda(graph, in_place=pairs, merge_launches=False))
    saved = qkv_folds.FOLD_QKV
    qkv_folds.FOLD_QKV = False
    try:
        plain = grids(lower_cuda(graph, in_place=pairs, merge_launches=False))
    finally:
        qkv_folds.FOLD_QKV = saved
    assert "k_rot" in plain and "k_rot" not in folded  # the rope is its own kernel unfolded
    assert plain["k"] == folded["k"] and plain["q"] == folded["q"]
    assert plain["k"][0] < 256 // 8  # not one tile of 8 columns per block: an even layout


@NEEDS_GXX
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_llama_decode_folded_gives_the_unfolded_bits(dt: str) -> None:
    graph = _llama(dt)
    inputs, weights = random_inputs(graph, 3), random_weights(graph, 3)
    inputs["pos"] = np.array([5], np.int32)
    inputs["kv_len"] = np.array([6], np.int32)
    _same_bits_folded_or_not(graph, weights, inputs, 2 + 5 * 2)


@NEEDS_GXX
@pytest.mark.parametrize("dt", ["f32", "f16"])
def test_rotated_values_in_the_ropes_bytes_give_the_unfolded_bits(dt: str) -> None:
    """Copying cache writes: the copied key cache sits over q's and k's bytes, so the q and k
    products store their rotated values in their ropes' bytes (kept in the product's bytes, the
    copy would overwrite them before the attention reads them)."""
    graph = _llama(dt)
    inputs, weights = random_inputs(graph, 4), random_weights(graph, 4)
    inputs["pos"] = np.array([5], np.int32)
    inputs["kv_len"] = np.array([6], np.int32)
    folds = qkv_folds.product_folds(graph, _placed(graph, {}), {})
    assert sum(f.in_rope_bytes for f in folds.values()) == 4  # q and k of both layers
    folded = lower_cuda(graph, in_place={})
    got = cuda_emulator.run_plan(folded, dict(inputs), weights)
    saved = qkv_folds.FOLD_QKV
    qkv_folds.FOLD_QKV = False
    try:
        unfolded = lower_cuda(graph, in_place={})
    finally:
        qkv_folds.FOLD_QKV = saved
    assert len(_launches(folded)) < len(_launches(unfolded))
    plain = cuda_emulator.run_plan(unfolded, dict(inputs), weights)
    want = run_reference(graph, inputs, weights)
    for name in graph.output_names():
        np.testing.assert_array_equal(got[name], plain[name])
        err = nmse(np.asarray(got[name], np.float64), np.asarray(want[name], np.float64))
        assert err < 1e-4, (name, err)


def test_a_write_position_computed_after_the_product_blocks_its_fold() -> None:
    text = _qkv_text().replace(
        "  input %pos : i32[1]\n", "  input %pos : i32[1]\n  input %one : i32[1]\n"
    )
    text = text.replace("  %q4 = reshape", "  %wp = add(%pos, %one) : i32[1]\n  %q4 = reshape")
    text = text.replace("_t, %pos) :", "_t, %wp) :")
    graph = run_pipeline(og.parse(text), ONE_STREAM)
    pairs = in_place_candidates(graph)
    assert set(qkv_folds.product_folds(graph, _placed(graph, pairs), pairs)) == {"q"}


def _factors_before_wait(graph: og.Graph) -> dict[str, bool]:
    """{folded product with rope: whether its rope factors come before its PDL wait}."""
    pairs = in_place_candidates(graph)
    folds = qkv_folds.product_folds(graph, _placed(graph, pairs), pairs)
    found = {}
    for name, fold in folds.items():
        if fold.rope is None:
            continue
        text = fold.launch.kernel.source
        assert text.count("og_rc = og_c;") == 1 and "const float og_c = og_rc" in text
        assert "cos(angle)" not in text[text.index("float og_r = ") :]  # none left in the store
        wait = text.index("og_grid_dependency_wait();")
        found[name] = text.index("og_rc = og_c;") < wait
        if found[name]:  # the position's load ahead of the first weight batch's
            assert text.index("og_rpos = ") < text.index("og_wv0[0][0] = ") < wait
    return found


def test_rope_factors_come_before_the_wait_only_for_an_input_position() -> None:
    assert _factors_before_wait(_qkv("f16", 64, 4, 2, 16)) == {"q": True, "k": True}
    # the position computed in the step (a kernel writes it): the factors after the wait
    text = _qkv_text().replace(
        "  input %pos : i32[1]\n", "  input %pos0 : i32[1]\n  input %one : i32[1]\n"
    )
    text = text.replace("  %q = matmul", "  %pos = add(%pos0, %one) : i32[1]\n  %q = matmul")
    assert _factors_before_wait(run_pipeline(og.parse(text), ONE_STREAM)) == {
        "q": False,
        "k": False,
    }


@NEEDS_GXX
@pytest.mark.parametrize(("dt", "k"), [("f16", 64), ("bf16", 2100)])
def test_rope_factors_first_give_the_same_bits(
    dt: str, k: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    graph = _qkv(dt, k, 4, 2, 64)
    inputs, weights = random_inputs(graph, 4), random_weights(graph, 4)
    inputs["pos"] = np.array([9], np.int32)
    pairs = in_place_candidates(graph)
    first = cuda_emulator.run_plan(lower_cuda(graph, in_place=pairs), inputs, weights)
    monkeypatch.setattr(product_kernel, "ROPE_FACTORS_FIRST", False)
    plan = lower_cuda(graph, in_place=pairs)
    assert "og_rc" not in plan.source()
    late = cuda_emulator.run_plan(plan, inputs, weights)
    for name in graph.output_names():
        np.testing.assert_array_equal(first[name], late[name])
