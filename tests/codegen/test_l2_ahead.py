"""Products that bring their weights into L2 during the decode attention before them
(codegen/kernels/one_row/l2_ahead.py: the rule and `weight_rows_to_l2`): which products the rule picks, where
the prefetches go in the kernel and how many rows they cover, and in the CPU emulator the same
bits with the rule on and off (a prefetch is only a hint)."""

from __future__ import annotations

import itertools
import re
import sys
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.kernels.one_row import l2_ahead, product_kernel
from optgraph.codegen.kernels.one_row.geometry import THREADS
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.ir.graph import Node, TensorType
from optgraph.ir.layout import alias_roots
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.support import cuda_emulator

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
from gen_llama import generate_llama

PREFETCH = "og_prefetch_l2_bulk(reinterpret_cast<const char*>(in"  # a weight prefetch
NEEDS_GXX = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")

ATTENTION_THEN_PRODUCT = """graph attn_o {{
  input %q : f16[1,16,{sq},128]
  input %k : f16[1,4,32,128]
  input %v : f16[1,4,32,128]
  input %len : i32[1]
  weight %wo : f16[2048,2048]
  %a = attention(%q, %k, %v, %len) : f16[1,16,{sq},128]
  %a2 = reshape(%a) {{shape = [{sq}, 2048]}} : f16[{sq},2048]
  %o = matmul(%a2, %wo) : f16[{sq},2048]
  output %o
}}
"""


def _picked(graph: og.Graph) -> frozenset[str]:
    return l2_ahead.l2_ahead_products(graph, alias_roots(graph), graph.value_types())


def _llama(mode: str = "decode") -> og.Graph:
    seq = 1 if mode == "decode" else 8
    text = generate_llama(
        layers=2, hidden=64, heads=4, kv_heads=2, ffn=96, vocab=64, seq=seq, mode=mode
    )
    return run_pipeline(og.parse(text), DEFAULT_PIPELINE)


def test_the_products_reading_a_decode_attention_are_picked() -> None:
    graph = _llama()
    picked = _picked(graph)
    attentions = {n.name for n in graph.nodes if n.op == "attention"}
    assert len(attentions) == 2 and len(picked) == 2  # one o-projection a layer
    roots = alias_roots(graph)
    by_name = {n.name: n for n in graph.nodes}
    for name in picked:
        node = by_name[name]
        assert node.op in ("matmul", "fused")
        assert {roots.get(o, (o, 0))[0] for o in node.operands} & attentions


def test_prefill_and_the_setting_off_pick_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    assert _picked(_llama("prefill")) == frozenset()  # 8 query rows: no decode attention
    monkeypatch.setattr(l2_ahead, "L2_AHEAD", False)
    assert _picked(_llama()) == frozenset()


def _kernel(k: int, n: int, ahead: bool, resident: bool = True) -> str:
    a, b = TensorType("f16", (1, k)), TensorType("f16", (k, n))
    anchor = Node("p", "matmul", ("#a", "#b"), {}, TensorType("f16", (1, n)))
    named = frozenset({"#b"}) if resident else frozenset()
    made = product_kernel.one_row_kernel(
        "p", ("#a", "#b"), (a, b), anchor, [], "p", anchor.type, (), named, None, ahead
    )
    assert made is not None
    return made[0].source


def _prefetched_rows(source: str) -> tuple[int, int]:
    """(first row, end row) the prefetches cover, relative to the split's first row."""
    first = re.search(r"lo = \(unsigned long long\)\(k0 \+ (\d+)u\)", source)
    end = re.search(r"hi = \(unsigned long long\)min\(k1, k0 \+ (\d+)u\)", source)
    assert first is not None and end is not None
    return int(first.group(1)), int(end.group(1))


def test_the_prefetches_come_before_the_wait_after_the_first_batch() -> None:
    source = _kernel(4096, 4096, True)
    first_load = source.index("og_wv0[0][0] = og_load_stream")
    prefetch = source.index(PREFETCH)
    assert first_load < prefetch < source.index("og_grid_dependency_wait();")
    first, end = _prefetched_rows(source)
    rows = int(re.search(r"k1 = min\(4096u, k0 \+ (\d+)u\)", source).group(1))
    assert first == product_kernel.BATCH * 16  # 16 row lanes of 16 column threads
    assert end == rows  # the whole slice: 4096 x 4096 f16 is within the budget
    for off in (_kernel(4096, 4096, False), _kernel(4096, 4096, True, resident=False)):
        assert PREFETCH not in off  # not asked for; weights loaded after the wait


def _c_expr(text: str) -> str:
    """A generated C integer expression as Python (casts and suffixes dropped, `/` floored)."""
    text = re.sub(r"\((?:unsigned long long|unsigned int)\)", "", text)
    text = re.sub(r"(\d+)(?:ull|u)\b", r"\1", text)
    return text.replace("/", "//")


def _prefetched_bytes(source: str, k0: int, k1: int, tile: int) -> list[tuple[int, int]]:
    """The [start, end) byte ranges block `tile` of the split [k0, k1) prefetches, every thread's,
    by evaluating the kernel's own prefetch statements."""
    block = source[source.index("the split's rows after the first batch") :]
    block = block[: block.index("og_grid_dependency_wait")]
    env: dict[str, int] = {"k0": k0, "k1": k1, "tile": tile}
    for name in ("lo", "hi", "part", "a", "b"):
        expr = re.search(rf"unsigned long long {name} = ([^;]+);", block).group(1)
        env[name] = eval(_c_expr(expr), {"min": min}, env)
    loop = re.search(r"for \(unsigned long long at = ([^;]+); at < b; at \+= ([^)]+)\)", block)
    size = re.search(r"og_prefetch_l2_bulk\([^+]+\+ at, ([^;]+)\);", block).group(1)
    ranges = []
    for thread in range(THREADS):
        at = eval(_c_expr(loop.group(1)), {"min": min}, {**env, "threadIdx": _Thread(thread)})
        while at < env["b"]:
            n = eval(_c_expr(size), {"min": min}, {**env, "at": at})
            ranges.append((at, at + n))
            at += eval(_c_expr(loop.group(2)), {}, env)
    return ranges


class _Thread:
    def __init__(self, x: int) -> None:
        self.x = x


def test_the_tiles_blocks_cover_the_splits_rows_without_gaps() -> None:
    """Evaluated from the kernel's own statements, the prefetches of a split's tiles' blocks
    cover the split's rows after the first batch exactly once, in 16-byte aligned pieces."""
    source = _kernel(4096, 4096, True)
    first, end = _prefetched_rows(source)
    rows = int(re.search(r"k1 = min\(4096u, k0 \+ (\d+)u\)", source).group(1))
    tiles = 4096 // (16 * 8)  # 16 column threads of 8 halves a tile
    row = 4096 * 2
    for k0 in range(0, 4096, rows):
        k1 = min(4096, k0 + rows)
        pieces = sorted(r for t in range(tiles) for r in _prefetched_bytes(source, k0, k1, t))
        lo, hi = (k0 + first) * row, min(k1, k0 + end) * row
        assert pieces[0][0] == lo and pieces[-1][1] == hi
        assert all(x[1] == y[0] for x, y in itertools.pairwise(pieces))  # no gap, no overlap
        assert all(s % 16 == 0 and (e - s) % 16 == 0 and e > s for s, e in pieces)
        assert max(e - s for s, e in pieces) <= l2_ahead.L2_AHEAD_CHUNK


def test_the_budget_bounds_the_rows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(l2_ahead, "L2_AHEAD_BYTES", 4 << 20)
    source = _kernel(4096, 4096, True)
    first, end = _prefetched_rows(source)
    rows = int(re.search(r"k1 = min\(4096u, k0 \+ (\d+)u\)", source).group(1))
    splits = -(-4096 // rows)
    assert (end - first) * splits * 4096 * 2 <= 4 << 20 < (end - first + 1) * splits * 4096 * 2
    assert PREFETCH not in _kernel(512, 512, True)  # one batch holds every row


@NEEDS_GXX
def test_the_same_bits_with_the_prefetches_or_without(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = run_pipeline(og.parse(ATTENTION_THEN_PRODUCT.format(sq=1)), DEFAULT_PIPELINE)
    inputs, weights = random_inputs(graph, 4), random_weights(graph, 4)
    inputs["len"] = np.array([20], np.int32)
    plan = lower_cuda(graph)
    assert PREFETCH in plan.source()  # the rule and the kernel apply here
    got = cuda_emulator.run_plan(plan, inputs, weights)
    monkeypatch.setattr(l2_ahead, "L2_AHEAD", False)
    plain_plan = lower_cuda(graph)
    assert PREFETCH not in plain_plan.source()
    plain = cuda_emulator.run_plan(plain_plan, inputs, weights)
    np.testing.assert_array_equal(got["o"], plain["o"])
    want = run_reference(graph, inputs, weights)["o"]
    assert nmse(np.asarray(got["o"], np.float64), np.asarray(want, np.float64)) < 1e-4
