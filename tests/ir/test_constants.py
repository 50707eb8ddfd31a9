"""Constants in the IR (`weight %c : i64[3] = [0, 1, 2]`, optgraph/ir/constants.py): every dtype
prints and parses back to the same bytes through both parsers, bad values are located errors,
verify checks a value's size, and the executors take a constant's value when no array is given
under its name (an array given is used instead)."""

from __future__ import annotations

import ml_dtypes
import numpy as np
import pytest

import optgraph as og
from optgraph.errors import OptGraphError
from optgraph.ir.constants import array_bytes, constant_array, with_constants
from optgraph.ir.graph import Graph, Output, TensorType, Weight
from optgraph.ir.parser import parse_with_lark
from optgraph.reference.interpreter import run_reference

TEXT = """graph g {
  input %x : i64[3]
  weight %c : i64[3] = [0, 1, -2]
  weight %f : f32[2,2] host !{device = 0} = [0.1, -inf, nan, 1e+30]
  weight %h : bf16[2] = [0.1, 3]
  weight %g : f16[2] = [-0.0, 65504.0]
  weight %b : bool[2] = [true, false]
  weight %i : i32[1,0] = []
  weight %w : f32[3]
  %y = add(%x, %c) : i64[3]
  output %y
}
"""


def test_every_dtype_prints_and_parses_back_to_the_same_bytes() -> None:
    graph = og.parse(TEXT)
    assert graph == parse_with_lark(TEXT)  # the line-at-a-time fast path and lark agree
    again = og.parse(og.print_graph(graph))
    assert again == graph and og.print_graph(again) == og.print_graph(graph)
    values = {w.name: constant_array(w) for w in graph.weights if w.value is not None}
    assert values["c"].tolist() == [0, 1, -2] and values["c"].dtype == np.int64
    f = values["f"].reshape(-1)
    assert f[0] == np.float32(0.1) and f[1] == -np.inf and np.isnan(f[2]) and f[3] == 1e30
    assert values["h"].dtype == ml_dtypes.bfloat16
    assert values["h"].tolist() == [ml_dtypes.bfloat16(0.1), 3]
    assert np.signbit(values["g"][0]) and values["g"][1] == 65504
    assert values["b"].tolist() == [True, False] and values["i"].shape == (1, 0)
    assert "w" not in values  # a weight without a value is the user's
    assert "weight %h : bf16[2] = [0.100097656, 3.0]" in og.print_graph(graph)


def test_random_arrays_round_trip_exactly() -> None:
    rng = np.random.default_rng(0)
    for dtype, array in (
        ("f32", rng.standard_normal(50).astype(np.float32) * 1e3),
        ("f16", rng.standard_normal(50).astype(np.float16)),
        ("bf16", rng.standard_normal(50).astype(ml_dtypes.bfloat16)),
        ("i64", rng.integers(-(2**62), 2**62, 50)),
        ("i32", rng.integers(-(2**31), 2**31 - 1, 50, dtype=np.int32)),
    ):
        t = TensorType(dtype, (5, 10))
        weight = Weight("c", t, value=array_bytes(array.reshape(5, 10), t))
        graph = Graph("g", weights=(weight,), outputs=(Output("c"),))
        parsed = og.parse(og.print_graph(graph))
        assert parsed == graph, dtype
        assert constant_array(parsed.weights[0]).tobytes() == array.tobytes()


@pytest.mark.parametrize(
    ("declaration", "message"),
    [
        ("weight %c : i64[3] = [0, 1]", "weight '%c': 2 values for i64[3] (3 elements)"),
        ("weight %c : i64[2] = [0, 1.5]", "a i64[2] constant takes integers only"),
        ("weight %c : i32[1] = [9999999999]", "9999999999 is out of range for i32"),
        ("weight %c : bool[1] = [1]", "a bool[1] constant takes true and false only"),
        ("weight %c : f32[1] = [true]", "a f32[1] constant takes numbers, not true or false"),
        ("weight %c : q8_0[1,32] = [1]", "a constant cannot have dtype q8_0"),
        ("weight %c : f32[1] = [maybe]", "expected a literal"),
    ],
)
def test_bad_values_are_located_errors(declaration: str, message: str) -> None:
    text = f"graph g {{\n  {declaration}\n  output %c\n}}\n"
    with pytest.raises(OptGraphError) as error:
        og.parse(text)
    assert message in str(error.value) and ":2:" in str(error.value)


def test_verify_checks_the_size_of_a_value() -> None:
    t = TensorType("i64", (3,))
    graph = Graph("g", weights=(Weight("c", t, value=b"\0" * 16),), outputs=(Output("c"),))
    with pytest.raises(OptGraphError, match="a constant's value has 16 bytes, not 24"):
        og.verify(graph)


def test_a_constant_not_given_takes_its_value_and_a_given_array_wins() -> None:
    graph = og.parse(TEXT)
    x = np.array([5, 6, 7])
    others = {"f": np.zeros((2, 2), np.float32), "h": np.zeros(2, ml_dtypes.bfloat16)}
    weights = {"w": np.zeros(3, np.float32), **others}
    filled = with_constants(graph, weights)
    assert set(filled) == {w.name for w in graph.weights}
    assert run_reference(graph, {"x": x}, weights)["y"].tolist() == [5, 7, 5]
    program = og.compile(graph, target="cpu")
    assert program.run({"x": x}, weights)["y"].tolist() == [5, 7, 5]
    assert program.run({"x": x})["y"].tolist() == [5, 7, 5]  # default weights: its value too
    given = {**weights, "c": np.array([1, 1, 1])}
    assert run_reference(graph, {"x": x}, given)["y"].tolist() == [6, 7, 8]
