"""A key's rope and its in-place KV-cache write as one kernel (codegen/decode/rope_cache_writes.py):
which pairs fold, the launches a decode layer then takes, and the results in the CPU emulator
against the reference (f32, f16, bf16; full and partial rotary, scaled rope, S = 1 and H = 1)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.decode import qkv_folds, rope_cache_writes
from optgraph.codegen.lower_cuda import CudaPlan, KernelStep, lower_cuda
from optgraph.codegen.plan.in_place_outputs import in_place_candidates
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from tests.support import cuda_emulator

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from gen_llama import generate_llama


@pytest.fixture(autouse=True)
def _without_product_folds(monkeypatch: pytest.MonkeyPatch) -> None:
    """The q/k/v products' own folds (qkv_folds.py, tested there) would take these pairs."""
    monkeypatch.setattr(qkv_folds, "FOLD_QKV", False)


NEEDS_GXX = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")

KEYS = """graph keys {{
  input %k : {dt}[1,{s},{h},8]
  input %k_cache : {dt}[1,{kh},16,8]
  input %v_cache : {dt}[1,{kh},16,8]
  input %pos : i32[{s}]
  input %wpos : i32[1]
  %k_rot = rope(%k, %pos) {{{attrs}}} : {dt}[1,{s},{h},8]
  %k_t = transpose(%k_rot) {{perm = [0, 2, 1, 3]}} : {dt}[1,{h},{s},8]
  %kc = kv_cache_write(%k_cache, %k_t, %wpos) : {dt}[1,{kh},16,8]
  %v_t = transpose(%k) {{perm = [0, 2, 1, 3]}} : {dt}[1,{h},{s},8]
  %vc = kv_cache_write(%v_cache, %v_t, %wpos) : {dt}[1,{kh},16,8]
  output %kc, %vc{extra}
}}
"""


def _keys(
    dt: str = "f16", s: int = 1, h: int = 2, attrs: str = "theta = 10000.0", extra: str = ""
) -> og.Graph:
    kh = h if s == 1 else 1
    text = KEYS.format(dt=dt, s=s, h=h, kh=kh, attrs=attrs, extra=extra)
    return run_pipeline(og.parse(text), DEFAULT_PIPELINE)


def _kernels(plan: CudaPlan) -> list[KernelStep]:
    return [s for s in plan.steps if isinstance(s, KernelStep)]


def test_pairs_need_an_in_place_write_and_no_other_reader(monkeypatch) -> None:
    graph = _keys()
    pairs = in_place_candidates(graph)
    assert pairs == {"kc": "k_cache", "vc": "v_cache"}
    assert set(rope_cache_writes.rope_cache_writes(graph, pairs)) == {"k_rot"}
    assert rope_cache_writes.rope_cache_writes(graph, {}) == {}  # a copying write: no fold
    assert rope_cache_writes.rope_cache_writes(graph, {"vc": "v_cache"}) == {}
    read_too = _keys(extra=", %k_t")  # the rotated key is also an output
    assert rope_cache_writes.rope_cache_writes(read_too, in_place_candidates(read_too)) == {}
    monkeypatch.setattr(rope_cache_writes, "ROPE_CACHE_WRITES", False)
    assert rope_cache_writes.rope_cache_writes(graph, pairs) == {}


def test_the_write_issues_nothing_and_the_rope_writes_the_cache() -> None:
    graph = _keys()
    plan = lower_cuda(graph, merge_launches=False, in_place=in_place_candidates(graph))
    steps = {s.node: s for s in _kernels(plan)}
    assert "kc" not in steps and set(steps) == {"k_rot", "vc"}
    rope = steps["k_rot"]
    assert plan.kernels[rope.kernel].name.startswith("og_rope_kv_")
    assert rope.args[0] == plan.locations["k_cache"] == plan.locations["kc"]
    assert rope.writes is not None and [w.key for w in rope.writes] == ["k_cache"]
    merged = lower_cuda(graph, in_place=in_place_candidates(graph))
    assert [s.members for s in _kernels(merged)] == [("k_rot", "vc")]  # one launch


def test_a_decode_layer_takes_six_launches() -> None:
    graph = og.parse(generate_llama(layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=64))
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    plan = lower_cuda(planned, in_place=in_place_candidates(planned))
    members = [s.members for s in _kernels(plan)]
    assert len(members) == 2 + 6 * 2  # embedding, lm head; six a layer
    assert ("l0.q_rot", "l0.k_rot", "l0.v_cache_new") in members


@NEEDS_GXX
@pytest.mark.parametrize(
    ("dt", "s", "h", "attrs"),
    [
        ("f32", 1, 2, "theta = 10000.0"),
        ("f16", 1, 2, "theta = 10000.0, rotary_dim = 4"),
        (
            "bf16",
            1,
            2,
            'theta = 500000.0, scaling = "yarn", factor = 4.0, original_max_position = 64',
        ),
        ("f16", 3, 1, "theta = 10000.0"),  # three new rows of one head: still a view
    ],
)
def test_folded_writes_match_the_reference(dt: str, s: int, h: int, attrs: str) -> None:
    graph = _keys(dt, s, h, attrs)
    pairs = in_place_candidates(graph)
    plan = lower_cuda(graph, in_place=pairs)
    assert any(plan.kernels[k.kernel].source.count("og_rope_kv_") for k in _kernels(plan))
    inputs = random_inputs(graph, 1)
    inputs["pos"] = np.arange(7, 7 + s, dtype=np.int32)
    for wpos in (5, 16 - s, 16 - s + 1):  # a row inside, the last rows, out of range (no row)
        inputs["wpos"] = np.array([wpos], np.int32)
        got = cuda_emulator.run_plan(plan, inputs, {})
        if wpos + s > 16:
            for name, cache in (("kc", "k_cache"), ("vc", "v_cache")):
                np.testing.assert_array_equal(got[name], inputs[cache])
            continue
        want = run_reference(graph, inputs, {})
        for name in ("kc", "vc"):
            np.testing.assert_array_equal(got[name], want[name])  # the rope kernel's own math


@NEEDS_GXX
@pytest.mark.parametrize("dt", ["f32", "f16", "bf16"])
def test_llama_decode_folded_matches_reference(dt: str) -> None:
    graph = og.parse(
        generate_llama(layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=64, dtype=dt)
    )
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    plan = lower_cuda(planned, in_place=in_place_candidates(planned))
    assert "og_rope_kv_" in plan.source()
    inputs, weights = random_inputs(graph, 3), random_weights(graph, 3)
    inputs["pos"] = np.array([5], np.int32)
    inputs["kv_len"] = np.array([6], np.int32)
    want = run_reference(graph, inputs, weights)
    got = cuda_emulator.run_plan(plan, inputs, weights)
    tol = {"f32": 1e-4, "f16": 2e-3, "bf16": 2e-2}[dt]
    for name in graph.output_names():
        np.testing.assert_allclose(
            np.asarray(got[name], np.float64), np.asarray(want[name], np.float64), atol=tol
        )


LATE_POSITION = """graph late {
  input %k : f16[1,1,2,8]
  input %k_cache : f16[1,2,16,8]
  input %pos : i32[1]
  input %one : i32[1]
  %k_rot = rope(%k, %pos) {theta = 10000.0} : f16[1,1,2,8]
  %wpos = add(%pos, %one) : i32[1]
  %k_t = transpose(%k_rot) {perm = [0, 2, 1, 3]} : f16[1,2,1,8]
  %kc = kv_cache_write(%k_cache, %k_t, %wpos) : f16[1,2,16,8]
  output %kc
}
"""


def test_a_write_position_computed_after_the_rope_blocks_the_fold() -> None:
    """An imported model's write position may be a node of its own, issued after the rope: the
    rope's kernel could not read it yet (found by the HF decode step in the emulator)."""
    pipeline = "verify,assign-streams{max-streams=1},insert-sync,analyze-lifetimes,plan-memory"
    graph = run_pipeline(og.parse(LATE_POSITION), pipeline)
    assert [n.name for n in graph.nodes].index("wpos") > [n.name for n in graph.nodes].index(
        "k_rot"
    )
    pairs = in_place_candidates(graph)
    assert pairs == {"kc": "k_cache"}
    assert rope_cache_writes.rope_cache_writes(graph, pairs) == {}
    early = og.parse(
        LATE_POSITION.replace("%wpos = add(%pos, %one) : i32[1]\n", "").replace(
            "  %k_rot = rope", "  %wpos = add(%pos, %one) : i32[1]\n  %k_rot = rope"
        )
    )
    early = run_pipeline(early, pipeline)
    assert set(rope_cache_writes.rope_cache_writes(early, in_place_candidates(early))) == {"k_rot"}
    if cuda_emulator.available():
        inputs = random_inputs(graph, 0)
        inputs["pos"], inputs["one"] = np.array([4], np.int32), np.array([1], np.int32)
        got = cuda_emulator.run_plan(lower_cuda(graph, in_place=pairs), inputs, {})
        np.testing.assert_array_equal(got["kc"], run_reference(graph, inputs, {})["kc"])
