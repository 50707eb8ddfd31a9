"""Integer matmul's CUDA code: our exact kernel, never cuBLAS nor the one-row float kernels, run
in the emulator on values that overflow (the wrap-around must match the reference bit for bit),
plain, batched with broadcasting, transposed, one-row and as the anchor of a fused region."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.analysis.fusion_rules import one_row_product
from optgraph.codegen.cuda_dispatch import node_code
from optgraph.codegen.cuda_source import Launch
from optgraph.codegen.kernels.matmul import Gemm
from optgraph.codegen.kernels.one_row.product_kernel import one_row_shape
from optgraph.passes.fuse import FusePass
from optgraph.reference.interpreter import run_reference
from tests.support import cuda_emulator

GRAPH = """graph g {{
  input %a : {T}[4,6]
  input %w : {T}[6,8]
  input %wt : {T}[8,6]
  input %at : {T}[6,4]
  input %x : {T}[1,6]
  input %e : {T}[2,1,3,6]
  input %f : {T}[1,3,6,8]
  input %r : {T}[4,8]
  %y0 = matmul(%a, %w) : {T}[4,8]
  %y1 = matmul(%at, %wt) {{transpose_a = true, transpose_b = true}} : {T}[4,8]
  %y2 = matmul(%x, %w) : {T}[1,8]
  %y3 = matmul(%e, %f) : {T}[2,3,3,8]
  %p = matmul(%a, %w) : {T}[4,8]
  %y4 = add(%p, %r) : {T}[4,8]
  output %y0, %y1, %y2, %y3, %y4
}}
"""
NUMPY = {"i32": np.int32, "i64": np.int64}


def _inputs(graph: og.Graph, dtype: str) -> dict[str, np.ndarray]:
    """Values spread over the whole dtype: products and sums overflow."""
    rng = np.random.default_rng(1)
    info = np.iinfo(NUMPY[dtype])
    return {
        i.name: rng.integers(info.min, info.max, i.type.shape, dtype=NUMPY[dtype], endpoint=True)
        for i in graph.inputs
    }


@pytest.mark.parametrize("dtype", ["i32", "i64"])
def test_integer_products_take_our_kernel(dtype: str) -> None:
    graph = og.parse(GRAPH.format(T=dtype))
    og.verify(graph)
    types = graph.value_types()
    for node in graph.nodes:
        if node.op != "matmul":
            continue
        operand_types = [types[o] for o in node.operands]
        work = node_code(node, operand_types)
        assert len(work) == 1 and isinstance(work[0], Launch), work
        assert work[0].kernel.name.startswith("og_int_matmul_")
        assert not any(isinstance(w, Gemm) for w in work)
        assert one_row_product(node, *operand_types) is None
        assert one_row_shape(node, *operand_types, has_prologue=True) is None


@pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
@pytest.mark.parametrize("dtype", ["i32", "i64"])
def test_integer_kernel_wraps_like_the_reference_in_the_emulator(dtype: str) -> None:
    graph = og.parse(GRAPH.format(T=dtype))
    fused = FusePass().run(graph)
    og.verify(fused)
    assert any(n.op == "fused" for n in fused.nodes)  # the product with its add epilogue
    inputs = _inputs(graph, dtype)
    want = run_reference(graph, inputs, {})
    got = cuda_emulator.run_graph(fused, inputs, {})
    for name, value in want.items():
        assert got[name].dtype == value.dtype, name
        np.testing.assert_array_equal(got[name], value, err_msg=name)
    wide = np.matmul(inputs["a"].astype(object), inputs["w"].astype(object))
    assert not np.array_equal(wide, want["y0"].astype(object))  # the values did overflow
