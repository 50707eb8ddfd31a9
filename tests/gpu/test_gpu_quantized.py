"""Quantized weights on the GPU (codegen/kernels/quantized.py): every block type's one-row
product (M = 1 and a few rows), the prefill product (dequantized into scratch, then cuBLAS),
get_rows of a quantized table and dequantize, through the default pipeline, eager then replayed
(bit-identical), against gguf's dequantization: decoded values bit for bit, products within the
per-dtype bounds (tests/support/gpu_support.py); the emulator runs the same graphs
(tests/codegen/test_quantized_graphs_emulated.py)."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from tests.codegen.test_quantized_graphs_emulated import _check, _graph, _values
from tests.codegen.test_quantized_kernels_emulated import random_blocks, reference
from tests.support.gpu_support import flushed_to_zero, require_gpu, same_bits

pytestmark = pytest.mark.gpu
require_gpu()

from optgraph.api.programs import cuda_program
from optgraph.ir.graph import QUANT_BLOCKS
from optgraph.passes.manager import run_pipeline

TYPES = sorted(QUANT_BLOCKS)


@pytest.mark.parametrize("qtype", TYPES)
@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
@pytest.mark.parametrize("m", [1, 3, 64])
def test_quantized_graph_matches_gguf(qtype: str, dtype: str, m: int) -> None:
    k = QUANT_BLOCKS[qtype][0] * (16 if QUANT_BLOCKS[qtype][0] == 32 else 8)
    graph = _graph(qtype, dtype, m, k)
    inputs, weights, want = _values(qtype, dtype, m, k)
    program = cuda_program(run_pipeline(graph, "default"), weights=weights)
    first = program.run(inputs)
    second = program.run(inputs)
    program.close()
    assert same_bits(first, second)
    # The device flushes float32 subnormals (mxfp4's smallest scales decode to them).
    want = {name: flushed_to_zero(np.asarray(v)) for name, v in want.items()}
    _check({name: np.asarray(v) for name, v in first.items()}, want, dtype)


def test_llama_sized_one_row_products() -> None:
    """The decode products of an 8B Q4_K_M model's layer shapes (4096 x 4096, 14336 x 4096 in
    q4_k, 4096 x 14336 in q6_k), f16 rows."""
    for qtype, n, k in (("q4_k", 4096, 4096), ("q4_k", 14336, 4096), ("q6_k", 4096, 14336)):
        text = (
            f"graph g {{\n  input %x : f16[1,{k}]\n  weight %w : {qtype}[{n},{k}]\n"
            f"  %y = matmul(%x, %w) {{transpose_b = true}} : f16[1,{n}]\n  output %y\n}}\n"
        )
        graph = og.parse(text)
        rng = np.random.default_rng(0)
        x = rng.standard_normal((1, k)).astype(np.float16)
        w = random_blocks(qtype, n, k)
        want = x.astype(np.float64) @ reference(qtype, w).reshape(n, k).astype(np.float64).T
        program = cuda_program(run_pipeline(graph, "default"), weights={"w": w})
        got = np.asarray(program.run({"x": x})["y"], np.float64)
        program.close()
        want16 = want.astype(np.float16).astype(np.float64)
        nmse = float(np.sum((got - want16) ** 2) / np.sum(want16**2))
        assert nmse <= 1e-6, (qtype, n, k, nmse)
