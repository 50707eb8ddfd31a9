"""Graphs that read quantized weights, through the dispatcher and the default pipeline, in the
CPU emulator: the one-row product (M = 1 and a few rows), the prefill product (the weight
dequantized into the node's scratch, then cuBLAS: unplanned and memory-planned), get_rows of a
quantized table and dequantize; fusion leaves a quantized product out of every region. The
expected values are gguf's dequantization times x in float64."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.analysis.fusion_rules import is_anchor
from optgraph.api.programs import plan_graph
from optgraph.codegen.cuda_dispatch import node_code, scratch_bytes
from optgraph.codegen.cuda_source import Launch
from optgraph.codegen.kernels import quantized
from optgraph.codegen.kernels.matmul import Gemm
from optgraph.codegen.lower_cuda import GemmStep, lower_cuda
from optgraph.ir.graph import QUANT_BLOCKS
from optgraph.passes.manager import run_pipeline
from tests.codegen.test_quantized_kernels_emulated import NUMPY, random_blocks, reference
from tests.support import cuda_emulator

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")

GRAPH = """graph q {{
  input %x : {T}[{M},{K}]
  input %ids : i32[3]
  weight %w : {Q}[24,{K}]
  weight %emb : {Q}[5,{K}]
  weight %b : {T}[24]
  %p = matmul(%x, %w) {{transpose_b = true}} : {T}[{M},24]
  %y = add(%p, %b) : {T}[{M},24]
  %e = get_rows(%emb, %ids) : f32[3,{K}]
  %d = dequantize(%emb) {{dtype = "{T}"}} : {T}[5,{K}]
  output %y, %e, %d
}}
"""


def _graph(qtype: str, dtype: str, m: int, k: int) -> og.Graph:
    graph = og.parse(GRAPH.format(Q=qtype, T=dtype, M=m, K=k))
    og.verify(graph)
    return graph


def _values(
    qtype: str, dtype: str, m: int, k: int
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Inputs, weights and the expected outputs (float64 products rounded to the dtype)."""
    rng = np.random.default_rng(k + m)
    x = rng.standard_normal((m, k)).astype(NUMPY[dtype])
    ids = np.array([4, 0, 2], np.int32)
    w, emb = random_blocks(qtype, 24, k, seed=1), random_blocks(qtype, 5, k, seed=2)
    b = rng.standard_normal(24).astype(NUMPY[dtype])
    wf = reference(qtype, w).reshape(24, k).astype(np.float64)
    table = reference(qtype, emb).reshape(5, k)
    p = (x.astype(np.float64) @ wf.T).astype(NUMPY[dtype])
    want = {
        "y": (p.astype(np.float64) + b.astype(np.float64)).astype(NUMPY[dtype]),
        "e": table[ids],
        "d": table.astype(NUMPY[dtype]),
    }
    return {"x": x, "ids": ids}, {"w": w, "emb": emb, "b": b}, want


def _check(got: dict[str, np.ndarray], want: dict[str, np.ndarray], dtype: str) -> None:
    for name in ("e", "d"):  # decoded values: bit for bit
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)
    g, w = got["y"].astype(np.float64), want["y"].astype(np.float64)
    nmse = float(np.sum((g - w) ** 2) / np.sum(w**2))
    assert nmse <= {"f32": 1e-7, "f16": 1e-6, "bf16": 1e-4}[dtype], nmse


CASES = [
    ("q8_0", "f32", 1, 96),
    ("q4_0", "f16", 1, 1280),
    ("q4_1", "bf16", 2, 64),
    ("q5_0", "f32", 1, 160),
    ("mxfp4", "f16", 1, 512),
    ("q4_k", "f16", 1, 512),
    ("q5_k", "bf16", 3, 256),
    ("q6_k", "f32", 1, 768),
]


@pytest.mark.parametrize(("qtype", "dtype", "m", "k"), CASES)
def test_decode_graph_after_the_default_pipeline(qtype: str, dtype: str, m: int, k: int) -> None:
    graph = _graph(qtype, dtype, m, k)
    fused = run_pipeline(graph, "default")
    og.verify(fused)
    products = [n for n in fused.nodes if n.op == "matmul"]
    assert len(products) == 1, [n.op for n in fused.nodes]  # left out of every region
    inputs, weights, want = _values(qtype, dtype, m, k)
    got = cuda_emulator.run_graph(fused, inputs, weights)
    _check(got, want, dtype)


@pytest.mark.parametrize(("qtype", "dtype"), [("q4_k", "f16"), ("q8_0", "f32"), ("q6_k", "bf16")])
@pytest.mark.parametrize("planned", [False, True])
def test_prefill_product_dequantizes_into_scratch_then_cublas(
    qtype: str, dtype: str, planned: bool
) -> None:
    m, k = 6, QUANT_BLOCKS[qtype][0] * 2
    graph = _graph(qtype, dtype, m, k)
    types = graph.value_types()
    node = next(n for n in graph.nodes if n.op == "matmul")
    operand_types = [types[o] for o in node.operands]
    work = node_code(node, operand_types)
    assert isinstance(work[0], Launch) and work[0].args == ("scratch", "in1")
    assert isinstance(work[1], Gemm) and work[1].a == "scratch" and work[1].dtype == dtype
    assert scratch_bytes(node, operand_types) == 24 * k * np.dtype(NUMPY[dtype]).itemsize
    source = plan_graph(graph, "default") if planned else graph
    plan = lower_cuda(source)
    assert any(isinstance(s, GemmStep) and s.gemm.a == "scratch" for s in plan.steps)
    inputs, weights, want = _values(qtype, dtype, m, k)
    got = cuda_emulator.run_plan(plan, inputs, weights)
    _check(got, want, dtype)


def test_rows_up_to_the_limit_take_the_kernel() -> None:
    for m, kernel in ((1, True), (quantized.KERNEL_MAX_ROWS, True), (5, False)):
        graph = _graph("q4_k", "f16", m, 256)
        types = graph.value_types()
        node = next(n for n in graph.nodes if n.op == "matmul")
        work = node_code(node, [types[o] for o in node.operands])
        assert (len(work) == 1) == kernel, m
        assert isinstance(work[0], Launch)
        assert work[0].kernel.name.startswith("og_one_row_q" if kernel else "og_dequantize_")


def test_a_quantized_product_anchors_no_region() -> None:
    graph = _graph("q8_0", "f32", 1, 64)
    types = graph.value_types()
    node = next(n for n in graph.nodes if n.op == "matmul")
    assert is_anchor(node, types) is None
    plain = og.parse(
        "graph g {\n  input %x : f32[1,64]\n  weight %w : f32[64,24]\n"
        "  %y = matmul(%x, %w) : f32[1,24]\n  output %y\n}\n"
    )
    plain_types = plain.value_types()
    assert is_anchor(plain.nodes[0], plain_types) == "product"
