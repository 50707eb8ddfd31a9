"""Quantized weights on the GPU (codegen/kernels/quantized.py): every block type's one-row
product (M = 1 and a few rows), the prefill product (dequantized into scratch, then cuBLAS),
get_rows of a quantized table and dequantize, through the default pipeline, eager then replayed
(bit-identical), against gguf's dequantization: decoded values bit for bit, products within the
per-dtype bounds (tests/support/gpu_support.py); the emulator runs the same graphs
(tests/codegen/test_quantized_graphs_emulated.py). q6_k products in their integer form
(`quantized_integer_dot`): the Q4_K_M shapes, odd blocks a row, four rows, extreme scales; q8_0
products in their integer form (opt-in): the Q8_0 shapes, K not whole groups of 256, odd blocks
a row, four rows, the largest d with codes -128 and 127."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import optgraph as og
from tests.codegen.test_quantized_graphs_emulated import _check, _graph, _values
from tests.codegen.test_quantized_integer_dot_emulated import _q6_k_blocks, _q8_0_blocks
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


@pytest.mark.parametrize(
    ("n", "k", "rows", "dtype", "extreme"),
    [
        (32000, 4096, 1, "f16", False),  # the logits head of a Q4_K_M file
        (4096, 14336, 1, "bf16", False),  # a down product
        (37, 1280, 4, "f32", True),  # 5 blocks a row: rows alternate their 4-byte phase
        (21, 256, 2, "f32", True),  # one 210-byte block a row
        (50, 2048, 3, "f16", False),
    ],
)
def test_q6_k_products_in_integer_form(
    n: int, k: int, rows: int, dtype: str, extreme: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The program's product is `quantized_integer_dot`'s q6_k kernel; eager and replayed runs
    agree bit for bit and match gguf's dequantized product within the dtype's bound (f32 rows
    also with extreme scales and zero blocks, `_q6_k_blocks`)."""
    w = _q6_k_blocks(n, k, seed=n) if extreme else random_blocks("q6_k", n, k, seed=n)
    _integer_product("q6_k", w, k, rows, dtype, "og_q6k_quarter", monkeypatch)


@pytest.mark.parametrize(
    ("n", "k", "rows", "dtype", "extreme"),
    [
        (32000, 4096, 1, "f16", False),  # the logits head of a Q8_0 file
        (4096, 14336, 1, "bf16", False),  # a down product
        (14336, 4096, 2, "f16", False),  # a gate/up product, two rows
        (37, 1056, 4, "f32", True),  # 33 blocks a row: rows alternate their 4-byte phase
        (21, 288, 2, "f32", False),  # 9 blocks a row: the last group of 8 one block
        (19, 2080, 1, "f32", True),  # 65 blocks a row (f16 results would overflow here)
        (50, 2048, 3, "f16", False),
    ],
)
def test_q8_0_products_in_integer_form(
    n: int, k: int, rows: int, dtype: str, extreme: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The program's product is `quantized_integer_dot`'s q8_0 kernel (opt-in); eager and
    replayed runs agree bit for bit and match gguf's dequantized product within the dtype's
    bound (random blocks with zero blocks, d 0 and codes -128/127 among them, or every block's d
    the largest f16: `_q8_0_blocks`)."""
    w = _q8_0_blocks(n, k, seed=n, extreme=extreme)
    _integer_product("q8_0", w, k, rows, dtype, "og_q8_0_quarter", monkeypatch)


def _integer_product(
    qtype: str,
    w: np.ndarray,
    k: int,
    rows: int,
    dtype: str,
    marker: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`x @ wᵀ` of `qtype` blocks `w` (n rows of k values) with its integer form switched on
    (opt-in): the kernel named by `marker` is in the program, eager and replayed runs agree bit
    for bit, and the result is within the dtype's bound of gguf's dequantized product."""
    from optgraph.codegen.kernels import quantized

    monkeypatch.setattr(quantized, "INTEGER_DOT_TYPES", frozenset({"q4_k", qtype}))
    n = w.shape[0]
    text = (
        f"graph g {{\n  input %x : {dtype}[{rows},{k}]\n  weight %w : {qtype}[{n},{k}]\n"
        f"  %y = matmul(%x, %w) {{transpose_b = true}} : {dtype}[{rows},{n}]\n  output %y\n}}\n"
    )
    graph = og.parse(text)
    numpy = {"f32": np.float32, "f16": np.float16, "bf16": ml_dtypes.bfloat16}[dtype]
    x = np.random.default_rng(k).standard_normal((rows, k)).astype(numpy)
    want = x.astype(np.float64) @ reference(qtype, w).reshape(n, k).astype(np.float64).T
    program = cuda_program(run_pipeline(graph, "default"), weights={"w": w})
    assert marker in program.lowered.main.plan.source()
    first, second = program.run({"x": x}), program.run({"x": x})
    program.close()
    assert same_bits(first, second)
    got = np.asarray(first["y"], np.float64)
    want = want.astype(numpy).astype(np.float64)
    nmse = float(np.sum((got - want) ** 2) / np.sum(want**2))
    assert nmse <= {"f32": 1e-7, "f16": 1e-6, "bf16": 1e-4}[dtype], (qtype, n, k, rows, nmse)
