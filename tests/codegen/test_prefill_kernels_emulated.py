"""The prefill's bandwidth kernels in the CPU emulator against the reference, each with its
setting on and off: 128-bit elementwise regions and epilogues (`elementwise.VECTOR_LOADS`),
widened transposes and slices (`data_movement.VECTOR_COPIES`), rope with one angle for
several heads (`rope.HEADS_PER_THREAD`) and the warp-per-row softmax of the tensor-core
attention (`prefill_gemm.WARP_ROWS`), and residual adds after products as epilogue
kernels; f32, f16 and bf16, with broadcast operands and misaligned views (which take the
one-element loop at run time)."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.kernels import data_movement, elementwise, rope
from optgraph.codegen.kernels.attention import prefill_gemm, variants
from optgraph.codegen.lower_cuda import CopyStep, CudaPlan, GemmStep, KernelStep, lower_cuda
from optgraph.ir.graph import TensorType
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.codegen.test_cuda_emulated import BOUNDS
from tests.support import cuda_emulator

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")

DTYPES = ["f32", "f16", "bf16"]

# Elementwise regions: full, row-broadcast, column-broadcast and scalar operands; a product
# region whose epilogue is SwiGLU's silu(gate) * up and one whose epilogue is a residual add
# plus a bias; a view that starts 8 bytes into its root (misaligned for 16-byte loads in f16/bf16).
ELEMENTWISE = """graph elementwise {
  input %x : {T}[16,64]
  input %r : {T}[16,64]
  input %b : {T}[64]
  input %c : {T}[16,1]
  input %w : {T}[32,64]
  input %u : {T}[16,64]
  input %s : {T}[17,4]
  input %t : {T}[16,4]
  %a = add(%x, %b) : {T}[16,64]
  %m = mul(%a, %c) : {T}[16,64]
  %e = silu(%m) : {T}[16,64]
  %g = matmul(%w, %r) {transpose_b = true} : {T}[32,16]
  %gt = transpose(%g) {perm = [1, 0]} : {T}[16,32]
  %gate = matmul(%x, %w) {transpose_b = true} : {T}[16,32]
  %act = silu(%gate) : {T}[16,32]
  %sw = mul(%act, %gt) : {T}[16,32]
  %down = matmul(%u, %w) {transpose_b = true} : {T}[16,32]
  %res = add(%gt, %down) : {T}[16,32]
  %tail = slice(%s) {axis = 0, start = 1, end = 17} : {T}[16,4]
  %mis = add(%tail, %t) : {T}[16,4]
  output %e, %sw, %res, %mis
}
"""
FUSED = (
    "verify,dce,cse,fuse,assign-streams{max-streams=1},insert-sync,analyze-lifetimes,plan-memory"
)

# Transposes that keep the innermost dim (widened), one that moves it (never widened), a slice
# inside the innermost dim whose start is not a multiple of a unit, get_rows of whole 16-byte
# units (f32, f16, bf16 rows of 16) and of rows that are not (4 f16 values: 8 bytes) and rope with 8 and 6 heads
# (4 and 3 heads a thread), partial rotary and scaling.
MOVEMENT = """graph movement {
  input %q : {T}[1,6,8,16]
  input %k : {T}[1,6,6,16]
  input %pos : i32[6]
  input %tab : {T}[7,16]
  input %tab2 : {T}[7,4]
  input %ids : i32[5]
  %rows = get_rows(%tab, %ids) : {T}[5,16]
  %rows2 = get_rows(%tab2, %ids) : {T}[5,4]
  %qr = rope(%q, %pos) {theta = 10000.0} : {T}[1,6,8,16]
  %kr = rope(%k, %pos) {theta = 500.0, rotary_dim = 8} : {T}[1,6,6,16]
  %qt = transpose(%qr) {perm = [0, 2, 1, 3]} : {T}[1,8,6,16]
  %kt = transpose(%kr) {perm = [0, 2, 1, 3]} : {T}[1,6,6,16]
  %ki = transpose(%k) {perm = [0, 1, 3, 2]} : {T}[1,6,16,6]
  %ks = slice(%k) {axis = 3, start = 3, end = 11} : {T}[1,6,6,8]
  %kw = slice(%k) {axis = 3, start = 8, end = 16} : {T}[1,6,6,8]
  output %qt, %kt, %ki, %ks, %kw, %rows, %rows2
}
"""


def _check(text: str, dtype: str, pipeline: str | None = None) -> CudaPlan:
    graph = og.parse(text.replace("{T}", dtype))
    inputs, weights = random_inputs(graph, 5), random_weights(graph, 5)
    want = run_reference(graph, inputs, weights)
    lowered = run_pipeline(graph, pipeline) if pipeline else graph
    plan = lower_cuda(lowered, merge_launches=False)
    got = cuda_emulator.run_plan(plan, inputs, weights)
    types = graph.value_types()
    for name in graph.output_names():
        err = nmse(np.asarray(got[name], np.float64), np.asarray(want[name], np.float64))
        bound = BOUNDS[types[name].dtype]
        assert err <= bound, f"%{name} ({types[name]}): nmse {err:.3e} > {bound:g}"
    return plan


@pytest.mark.parametrize("vector", [True, False])
@pytest.mark.parametrize("dtype", DTYPES)
def test_elementwise_regions_and_epilogues(
    dtype: str, vector: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(elementwise, "VECTOR_LOADS", vector)
    for pipeline in (None, FUSED):
        plan = _check(ELEMENTWISE, dtype, pipeline)
        wide = [k for k in plan.kernels.values() if "og_aligned" in k.source]
        assert bool(wide) == vector


def test_vector_width_and_grid() -> None:
    t16 = og.parse("graph g {\n input %x : f16[4,8]\n %y = exp(%x) : f16[4,8]\n output %y\n}\n")
    node = t16.nodes[0]
    assert node.type is not None
    assert elementwise.vector_width(node.type) == 8
    launch = elementwise.emit(node, (t16.inputs[0].type,))[0]
    assert launch.grid == (1, 1, 1) and "uint4" in launch.kernel.source
    odd = TensorType("f16", (3, 5))
    assert elementwise.vector_width(odd) == 1
    assert elementwise.vector_width(TensorType("f32", (4, 8))) == 4
    assert elementwise.vector_width(TensorType("i32", (4, 8))) == 1


@pytest.mark.parametrize("wide", [True, False])
@pytest.mark.parametrize("heads", [4, 1])
@pytest.mark.parametrize("dtype", DTYPES)
def test_copies_and_rope(
    dtype: str, heads: int, wide: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(data_movement, "VECTOR_COPIES", wide)
    monkeypatch.setattr(rope, "HEADS_PER_THREAD", heads)
    plan = _check(MOVEMENT, dtype)
    widened = [k for k in plan.kernels.values() if "reinterpret_cast<uint4*>(out)" in k.source]
    assert bool(widened) == wide


def test_copy_unit_rules(monkeypatch: pytest.MonkeyPatch) -> None:
    unit = data_movement.copy_unit
    assert unit((8, 6, 16), [16, 128, 1], 0, 2) == 16  # [0,2,1,3]-like: rows of 32 bytes
    assert unit((8, 6, 4), [4, 32, 1], 0, 2) == 8  # rows of 8 bytes
    assert unit((8, 6, 16), [16, 128, 1], 3, 2) == 2  # an odd start: elements
    assert unit((16, 6), [1, 16], 0, 2) == 2  # the innermost dim strided in the source
    assert unit((8, 6, 16), [16, 128, 1], 0, 4) == 16
    monkeypatch.setattr(data_movement, "VECTOR_COPIES", False)
    assert unit((8, 6, 16), [16, 128, 1], 0, 2) == 2


def test_rope_heads_per_thread(monkeypatch: pytest.MonkeyPatch) -> None:
    assert rope.heads_per_thread(32) == 4
    assert rope.heads_per_thread(6) == 3
    assert rope.heads_per_thread(7) == 1
    monkeypatch.setattr(rope, "HEADS_PER_THREAD", 1)
    assert rope.heads_per_thread(32) == 1


PREFILL = """graph prefill {
  input %q : {T}[2,4,7,16]
  input %k : {T}[2,2,7,16]
  input %v : {T}[2,2,7,16]
  input %len : i32[1]
  input %m : bool[2,1,7,7]
  %c = attention(%q, %k, %v) {causal = true} : {T}[2,4,7,16]
  %t = attention(%q, %k, %v) {causal = true, causal_align = "top_left", softcap = 2.0} : {T}[2,4,7,16]
  %l = attention(%q, %k, %v, %len) {causal = true, window = 3} : {T}[2,4,7,16]
  %b = attention(%q, %k, %v, %len, %m) {masked = true} : {T}[2,4,7,16]
  output %c, %t, %l, %b
}
"""


@pytest.mark.parametrize("rows", [4, 3, 0])
@pytest.mark.parametrize("dtype", DTYPES)
def test_gemm_attention_softmax_rows(
    dtype: str, rows: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(variants, "GEMM_PREFILL_MIN_ROWS", 4)
    monkeypatch.setattr(prefill_gemm, "WARP_ROWS", rows)
    graph = og.parse(PREFILL.replace("{T}", dtype))
    inputs, weights = random_inputs(graph, 7), random_weights(graph, 7)
    inputs["len"] = np.array([6], np.int32)
    want = run_reference(graph, inputs, weights)
    plan = lower_cuda(graph)
    softmax = [s for s in plan.steps if isinstance(s, KernelStep) and "softmax" in s.kernel]
    assert len(softmax) == 4
    assert all(s.block[0] == (32 * rows if rows else prefill_gemm.THREADS) for s in softmax)
    got = cuda_emulator.run_plan(plan, inputs, weights)
    for name in graph.output_names():
        err = nmse(np.asarray(got[name], np.float64), np.asarray(want[name], np.float64))
        assert err <= BOUNDS[dtype], f"%{name}: nmse {err:.3e}"


# Residual adds after products: a plain one, one with the residual first, a batched product
# (one cuBLAS call per batch), one that reads the residual as its own operand and a bias add.
RESIDUAL = """graph residual {
  input %x : {T}[8,16]
  input %w : {T}[16,16]
  input %r : {T}[8,16]
  input %bx : {T}[2,8,16]
  input %bw : {T}[2,16,16]
  input %br : {T}[2,8,16]
  input %bias : {T}[16]
  %p = matmul(%x, %w) : {T}[8,16]
  %h = add(%r, %p) : {T}[8,16]
  %p2 = matmul(%h, %w) : {T}[8,16]
  %h2 = add(%p2, %h) : {T}[8,16]
  %bp = matmul(%bx, %bw) : {T}[2,8,16]
  %bh = add(%br, %bp) : {T}[2,8,16]
  %p3 = matmul(%h2, %w) : {T}[8,16]
  %h3 = add(%p3, %bias) : {T}[8,16]
  output %h2, %bh, %h3
}
"""


@pytest.mark.parametrize("dtype", DTYPES)
def test_residual_adds_after_products(dtype: str) -> None:
    """Each product region's cuBLAS call writes the product, one epilogue kernel adds to it."""
    plan = _check(RESIDUAL, dtype, FUSED)
    gemms = [s for s in plan.steps if isinstance(s, GemmStep)]
    epilogues = {s.node for s in plan.steps if isinstance(s, KernelStep)}
    assert not any(isinstance(s, CopyStep) for s in plan.steps)
    assert epilogues == {"h", "h2", "bh", "h3"}
    assert sum(s.node == "bh" for s in gemms) == 1  # batched: one strided call
