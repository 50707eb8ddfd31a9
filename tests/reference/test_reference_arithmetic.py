"""div and mod on integers and floats, less_equal and greater_equal: the reference against
Python's and C's arithmetic, PyTorch and onnx's reference evaluator, hand-computed edge cases
(zero divisors, the lowest integer divided by -1, NaN), and the CUDA kernels on the same edge
values in the CPU emulator."""

from __future__ import annotations

import math

import numpy as np
import pytest

import optgraph as og
from optgraph.errors import VerifyError
from optgraph.ir.graph import AttrValue, Node, TensorType
from optgraph.ir.ops import infer_type
from optgraph.reference.interpreter import evaluate_node, run_reference
from tests.support import cuda_emulator

A = np.array([-7, 7, -7, 7, 0, 5, -1, 13, -13, 3], np.int32)
B = np.array([2, 2, -2, -2, 3, 0, 4, -5, -5, -1], np.int32)


def ev(op: str, *args: np.ndarray, **attrs: AttrValue) -> np.ndarray:
    node = Node("y", op, tuple(f"a{i}" for i in range(len(args))), attrs)
    return evaluate_node(node, list(args))


def test_integer_div_truncates_and_mod_takes_the_divisors_sign() -> None:
    want_div = [0 if b == 0 else math.trunc(a / b) for a, b in zip(A.tolist(), B.tolist())]
    want_mod = [0 if b == 0 else a % b for a, b in zip(A.tolist(), B.tolist())]
    want_rem = [0 if b == 0 else int(math.fmod(a, b)) for a, b in zip(A.tolist(), B.tolist())]
    assert ev("div", A, B).tolist() == want_div
    assert ev("mod", A, B).tolist() == want_mod
    assert ev("mod", A, B, fmod=True).tolist() == want_rem
    assert ev("div", A, B).dtype == np.int32
    assert ev("div", A[:4], B[:4]).tolist() == [-3, 3, 3, -3]  # -7 / 2 = -3 (not floor's -4)
    assert ev("mod", A[:4], B[:4]).tolist() == [1, 1, -1, -1]
    assert ev("mod", A[:4], B[:4], fmod=True).tolist() == [-1, 1, -1, 1]


def test_lowest_integer_by_minus_one_wraps() -> None:
    for dtype in (np.int32, np.int64):
        low = np.array([np.iinfo(dtype).min, 9], dtype)
        minus_one = np.array([-1, -1], dtype)
        assert ev("div", low, minus_one).tolist() == [np.iinfo(dtype).min, -9]
        assert ev("mod", low, minus_one).tolist() == [0, 0]


def test_float_mod_and_div() -> None:
    a = np.array([-7.5, 7.5, -7.5, 7.5, 1.0, 0.0], np.float32)
    b = np.array([2.0, 2.0, -2.0, -2.0, 0.0, 3.0], np.float32)
    got = ev("mod", a, b)
    assert got[:4].tolist() == [0.5, 1.5, -1.5, -0.5] and math.isnan(got[4]) and got[5] == 0
    assert ev("mod", a, b, fmod=True)[:4].tolist() == [-1.5, 1.5, -1.5, 1.5]
    assert ev("div", a[:4], b[:4]).tolist() == [-3.75, 3.75, 3.75, -3.75]


def test_less_equal_and_greater_equal_are_false_for_nan() -> None:
    a = np.array([1.0, 2.0, np.nan, 3.0], np.float32)
    b = np.array([2.0, 2.0, 1.0, np.nan], np.float32)
    assert ev("less_equal", a, b).tolist() == [True, True, False, False]
    assert ev("greater_equal", a, b).tolist() == [False, True, False, False]
    assert ev("less_equal", A, B).tolist() == (A <= B).tolist()


def test_mod_rules() -> None:
    node = Node("y", "mod", ("a", "b"), {"fmod": 1})
    with pytest.raises(VerifyError, match="mod: attribute 'fmod' must be a bool, got 1"):
        infer_type(node, [TensorType("i32", (2,))] * 2)
    bools = TensorType("bool", (2,))
    node = Node("y", "div", ("a", "b"), {})
    with pytest.raises(VerifyError, match="div: expected a numeric operand, got bool"):
        infer_type(node, [bools, bools])


def test_matches_pytorch_and_onnx() -> None:
    torch = pytest.importorskip("torch")
    ta, tb = torch.from_numpy(A), torch.from_numpy(np.where(B == 0, 1, B).astype(np.int32))
    nb = tb.numpy()
    assert ev("div", A, nb).tolist() == torch.div(ta, tb, rounding_mode="trunc").tolist()
    assert ev("mod", A, nb).tolist() == torch.remainder(ta, tb).tolist()
    assert ev("mod", A, nb, fmod=True).tolist() == torch.fmod(ta, tb).tolist()
    onnx = pytest.importorskip("onnx")
    from onnx import helper
    from onnx.reference import ReferenceEvaluator

    for op, attrs, fmod in (
        ("Div", {}, False),
        ("Mod", {"fmod": 0}, False),
        ("Mod", {"fmod": 1}, True),
    ):
        node = helper.make_node(op, ["a", "b"], ["y"], **attrs)
        tensor = helper.make_tensor_value_info
        graph = helper.make_graph(
            [node], "g",
            [tensor("a", onnx.TensorProto.INT32, [10]), tensor("b", onnx.TensorProto.INT32, [10])],
            [tensor("y", onnx.TensorProto.INT32, [10])],
        )  # fmt: skip
        (want,) = ReferenceEvaluator(helper.make_model(graph)).run(None, {"a": A, "b": nb})
        mine = ev("div", A, nb) if op == "Div" else ev("mod", A, nb, fmod=fmod)
        assert mine.tolist() == want.tolist(), op


@pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
@pytest.mark.parametrize("dtype", ["i32", "i64"])
def test_kernels_on_edge_values_in_the_emulator(dtype: str) -> None:
    graph = og.parse(f"""graph edges {{
  input %a : {dtype}[12]
  input %b : {dtype}[12]
  %q = div(%a, %b) : {dtype}[12]
  %m = mod(%a, %b) : {dtype}[12]
  %r = mod(%a, %b) {{fmod = true}} : {dtype}[12]
  %le = less_equal(%a, %b) : bool[12]
  %ge = greater_equal(%a, %b) : bool[12]
  output %q, %m, %r, %le, %ge
}}""")
    np_dtype = np.int32 if dtype == "i32" else np.int64
    low = np.iinfo(np_dtype).min
    inputs = {
        "a": np.concatenate([A, [low, low]]).astype(np_dtype),
        "b": np.concatenate([B, [-1, 7]]).astype(np_dtype),
    }
    got = cuda_emulator.run_graph(graph, inputs, {})
    want = run_reference(graph, inputs, {})
    for name, value in want.items():
        assert got[name].tolist() == value.tolist(), name
