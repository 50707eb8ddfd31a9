"""matmul on integer operands: i32/i64 types, the refusals (mixed int/float, bool, i32 vs i64,
each located) and the reference's exact product that wraps around in the dtype."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.errors import VerifyError
from optgraph.reference.interpreter import run_reference
from tests.ir.test_ops_types import error, infer


def test_integer_matmul_types() -> None:
    assert infer("matmul", "i32[2,8]", "i32[8,4]") == "i32[2,4]"
    assert infer("matmul", "i64[3,2,8]", "i64[8,4]") == "i64[3,2,4]"
    assert infer("matmul", "i64[8,2]", "i64[4,8]", transpose_a=True, transpose_b=True) == (
        "i64[2,4]"
    )
    assert infer("matmul", "i32[5,1,2,8]", "i32[3,8,4]") == "i32[5,3,2,4]"
    assert error("matmul", "i32[2,8]", "f32[8,4]") == "matmul: operand dtypes differ (i32 vs f32)"
    assert error("matmul", "f16[2,8]", "i64[8,4]") == "matmul: operand dtypes differ (f16 vs i64)"
    assert error("matmul", "i32[2,8]", "i64[8,4]") == "matmul: operand dtypes differ (i32 vs i64)"
    assert error("matmul", "bool[2,8]", "bool[8,4]") == (
        "matmul: expected a float or integer (i32, i64) operand, got bool[2,8]"
    )


def test_mixed_int_float_matmul_is_located() -> None:
    text = (
        "graph g {\n  input %x : i32[2,8]\n  input %w : f32[8,4]\n"
        "  %y = matmul(%x, %w) : f32[2,4]\n  output %y\n}\n"
    )
    with pytest.raises(VerifyError) as info:
        og.verify(og.parse(text))
    (d,) = info.value.diagnostics
    assert d.span is not None and (d.span.line, d.span.col) == (4, 8)
    assert d.message == "matmul: operand dtypes differ (i32 vs f32)"


def _exact(a: np.ndarray, b: np.ndarray) -> list[list[int]]:
    """a @ b in Python integers: no overflow, no float."""
    return [[sum(int(x) * int(y) for x, y in zip(row, col)) for col in b.T] for row in a]


def _wrapped(value: int, bits: int) -> int:
    half = 2 ** (bits - 1)
    return (value + half) % 2**bits - half


@pytest.mark.parametrize(
    ("dtype", "np_dtype", "bits"), [("i32", np.int32, 32), ("i64", np.int64, 64)]
)
def test_reference_integer_matmul_is_exact_and_wraps(dtype: str, np_dtype: type, bits: int) -> None:
    text = (
        f"graph g {{\n  input %a : {dtype}[3,5]\n  input %b : {dtype}[4,5]\n"
        f"  %y = matmul(%a, %b) {{transpose_b = true}} : {dtype}[3,4]\n  output %y\n}}\n"
    )
    graph = og.parse(text)
    og.verify(graph)
    rng = np.random.default_rng(0)
    info = np.iinfo(np_dtype)
    a = rng.integers(info.min, info.max, (3, 5), dtype=np_dtype, endpoint=True)
    b = rng.integers(info.min, info.max, (4, 5), dtype=np_dtype, endpoint=True)
    got = run_reference(graph, {"a": a, "b": b}, {})["y"]
    assert got.dtype == np_dtype
    exact = _exact(a, b.T)
    assert got.tolist() == [[_wrapped(v, bits) for v in row] for row in exact]
    # Values this size overflow: the wrap is what is compared, not a no-op.
    assert any(not info.min <= v <= info.max for row in exact for v in row)
