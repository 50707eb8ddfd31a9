"""Split counts of one-row products that share a launch (codegen/plan/sibling_splits.py,
geometry.splits): which products get fewer splits, the merged launch in one wave, the
splits of equal whole batches, nothing without merged launches, and in the CPU emulator the same
bits folded or not (the folds and the plain products take the same counts)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.kernels.one_row.geometry import MIN_BLOCKS, SMS, splits
from optgraph.codegen.lower_cuda import KernelStep, lower_cuda, storage
from optgraph.codegen.plan import sibling_splits
from optgraph.codegen.plan.in_place_outputs import in_place_candidates
from optgraph.ir.layout import alias_roots
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights
from tests.codegen.test_qkv_folds import NEEDS_GXX, _qkv, _same_bits_folded_or_not

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from gen_llama import generate_llama

ONE_STREAM_FUSED = (
    "verify,dce,cse,fuse,assign-streams{max-streams=1},insert-sync,analyze-lifetimes,plan-memory"
)


def _decode_layer() -> og.Graph:
    """One decode layer at the realistic sizes (q 4096 x 4096, k and v 4096 x 1024, f16)."""
    text = generate_llama(
        layers=1, hidden=4096, heads=32, kv_heads=8, ffn=14336, vocab=256, dtype="f16",
        cache_len=64,
    )  # fmt: skip
    return run_pipeline(og.parse(text), ONE_STREAM_FUSED)


def _chosen(graph: og.Graph) -> dict[str, int]:
    return sibling_splits.sibling_splits(
        graph, alias_roots(graph), graph.value_types(), storage(graph)[1]
    )


def _grids(graph: og.Graph, **options: bool) -> dict[tuple[str, ...], tuple[int, int, int]]:
    plan = lower_cuda(graph, in_place=in_place_candidates(graph), **options)
    return {s.members: s.grid for s in plan.steps if isinstance(s, KernelStep)}


def test_k_and_v_take_fewer_splits_and_the_launch_is_one_wave() -> None:
    graph = _decode_layer()
    assert _chosen(graph) == {"l0.k": 10, "l0.v": 10}  # at most; q keeps its 5, k and v had 33
    grids = _grids(graph)  # 10 splits would leave a short last one: 8 of 8 whole batches
    assert grids[("l0.q", "l0.k", "l0.v")] == (32 * 5 + 2 * 4 * 8, 1, 1)
    assert grids[("l0.q", "l0.k", "l0.v")][0] <= MIN_BLOCKS * SMS
    alone = _grids(graph, merge_launches=False)  # no merged launch: each its own layout
    assert alone[("l0.k",)] == (4, 33, 1) and alone[("l0.q",)] == (32, 5, 1)


def test_the_setting_off_and_groups_within_a_wave_change_nothing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    small = _qkv("f16", 64, 4, 2, 16)  # single-pass products: one block each tile
    assert _chosen(small) == {}
    monkeypatch.setattr(sibling_splits, "SIBLING_SPLITS", False)
    assert _chosen(_decode_layer()) == {}


def test_splits_of_equal_whole_batches() -> None:
    assert splits(4096, 4) == (33, 125)  # alone: about a block a multiprocessor
    assert splits(4096, 4, 10, 64) == (8, 512)  # 64 batches: 8 splits of 8 batches
    assert splits(4096, 4, 16, 64) == (16, 256)
    assert splits(4096, 32, 5, 128) == (4, 1024)  # 32 batches: 4 splits of 8
    count, rows = splits(4100, 4, 10, 64)  # not whole batches: whole ones but the last
    assert rows % 64 == 0 and (count - 1) * rows < 4100 <= count * rows and count <= 10


@NEEDS_GXX
def test_folded_and_plain_products_take_the_same_splits() -> None:
    graph = _qkv("f16", 2304, 32, 8, 128)  # q 2304 x 4096, k and v 2304 x 1024 (split-K)
    assert _chosen(graph) == {"k": 10, "v": 10}
    assert _grids(graph)[("q", "k", "v")] == (32 * 5 + 2 * 4 * 9, 1, 1)  # 36 batches: 9 of 4
    inputs, weights = random_inputs(graph, 5), random_weights(graph, 5)
    inputs["pos"] = np.array([6], np.int32)
    _same_bits_folded_or_not(graph, weights, inputs, 2)


def test_a_transposed_product_is_no_member() -> None:
    """Three one-row products of one row, merged: with k's weight stored transposed (the one-row
    kernel does not take it, `fusion_rules.one_row_product`) k joins no group, though its shapes
    would fit one."""
    text = """graph g {
  input %x : f16[1,4096]
  weight %wq : f16[4096,4096]
  weight %wk : f16[4096,4096]
  weight %wv : f16[4096,1024]
  %q = matmul(%x, %wq) : f16[1,4096]
  %k = matmul(%x, %wk) {transpose_b = true} : f16[1,4096]
  %v = matmul(%x, %wv) : f16[1,1024]
  output %q
  output %k
  output %v
}
"""
    transposed = _chosen(run_pipeline(og.parse(text), ONE_STREAM_FUSED))
    plain = _chosen(
        run_pipeline(og.parse(text.replace(" {transpose_b = true}", "")), ONE_STREAM_FUSED)
    )
    assert "k" in plain  # the same group with k plain: k gives up splits
    assert "k" not in transposed
