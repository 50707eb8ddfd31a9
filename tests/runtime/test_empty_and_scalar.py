"""Empty and rank-0 tensors (issue 13, class 5): the reference and the planned executor agree, and
what has no value (a maximum of nothing, attention over no keys, rows of an empty table) is a
located error at verify, not a crash at run time."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.errors import OptGraphError
from optgraph.reference.interpreter import (
    load_weights,
    random_inputs,
    random_weights,
    run_reference,
    save_weights,
)
from optgraph.runtime.cpu.planned_executor import execute

SCALARS = """graph scalars {
  input %x : f32[]
  weight %w : f32[]
  weight %v : f32[4]
  %y = mul(%x, %w) : f32[]
  %z = add(%v, %y) : f32[4]
  %s = sum(%z) : f32[]
  output %y, %s
}
"""

EMPTY = """graph empty {
  input %x : f32[0,8]
  input %ids : i32[0]
  weight %table : f32[0,8]
  %r = relu(%x) : f32[0,8]
  %s = sum(%r) {axes = [0]} : f32[8]
  %m = max(%r) {axes = [1]} : f32[0]
  %g = get_rows(%table, %ids) : f32[0,8]
  %t = softmax(%x) {axis = 1} : f32[0,8]
  %e = transpose(%x) {perm = [1, 0]} : f32[8,0]
  %u = softmax(%e) {axis = 1} : f32[8,0]
  output %s, %m, %g, %t, %u
}
"""


@pytest.mark.parametrize("text", [SCALARS, EMPTY], ids=["scalars", "empty"])
@pytest.mark.parametrize("streams", [1, 2])
def test_reference_and_planned_executor_agree(text: str, streams: int) -> None:
    graph = og.parse(text)
    inputs, weights = random_inputs(graph, seed=3), random_weights(graph, seed=3)
    for name, decl_type in [(d.name, d.type) for d in (*graph.inputs, *graph.weights)]:
        values = inputs.get(name, weights.get(name))
        assert values is not None and values.shape == decl_type.shape, name
    expected = run_reference(graph, inputs, weights)
    pipeline = f"verify,dce,cse,fuse,assign-streams{{max-streams={streams}}},insert-sync,"
    pipeline += "analyze-lifetimes,plan-memory"
    program = og.compile(graph, pipeline, target="cpu")
    for seed in range(3):
        got = execute(program.program, inputs, weights, seed=seed).outputs
        assert list(got) == list(expected)
        for name in expected:
            assert got[name].shape == expected[name].shape, name
            np.testing.assert_array_equal(got[name], expected[name])


def test_rank0_weights_survive_a_file_round_trip(tmp_path: Path) -> None:
    graph = og.parse(SCALARS)
    weights = random_weights(graph, seed=1)
    path = tmp_path / "w.npz"
    save_weights(path, weights)
    loaded = load_weights(path, graph)
    assert loaded["w"].shape == () and float(loaded["w"]) == float(weights["w"])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("%y = max(%x) {axes = [1]} : f32[3]", "max: reduces over the empty axis 1 of f32[3,0]"),
        ("%y = mean(%x) : f32[]", "mean: reduces over the empty axis 1 of f32[3,0]"),
        (
            (
                "%q = reshape(%x) {shape = [1,1,3,0]} : f32[1,1,3,0]\n"
                "  %k = reshape(%x) {shape = [1,1,0,0]} : f32[1,1,0,0]\n"
                "  %y = attention(%q, %k, %k) : f32[1,1,3,0]"
            ),
            "attention: attends over zero keys",
        ),
        (
            "  %t = reshape(%x) {shape = [0,3]} : f32[0,3]\n  %y = get_rows(%t, %n) : f32[2,3]",
            "get_rows: gathers 2 rows from a table with no rows (f32[0,3])",
        ),
    ],
    ids=["max", "mean", "attention", "get_rows"],
)
def test_ops_without_a_value_are_errors_at_verify(body: str, message: str) -> None:
    text = f"graph g {{\n  input %x : f32[3,0]\n  input %n : i32[2]\n  {body}\n  output %y\n}}\n"
    with pytest.raises(OptGraphError) as info:
        og.verify(og.parse(text))
    assert message in str(info.value)
    assert info.value.span is not None and info.value.span.line >= 4


def test_attention_with_no_visible_key_is_zero_in_both_executors() -> None:
    text = """graph g {
  input %q : f32[1,2,1,4]
  input %k : f32[1,2,3,4]
  input %len : i32[1]
  %y = attention(%q, %k, %k, %len) : f32[1,2,1,4]
  output %y
}
"""
    graph = og.parse(text)
    inputs = random_inputs(graph)
    inputs["len"] = np.zeros(1, dtype=np.int32)
    expected = run_reference(graph, inputs, {})
    np.testing.assert_array_equal(expected["y"], np.zeros((1, 2, 1, 4), np.float32))
    got = og.compile(graph, target="cpu").run(inputs, {})
    np.testing.assert_array_equal(got["y"], expected["y"])
