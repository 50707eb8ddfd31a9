"""Sizes at their limits (issue 13, class 4): located errors, never an overflow, a hang or a crash."""

from __future__ import annotations

import time
import tracemalloc
from pathlib import Path

import pytest

import optgraph as og
from optgraph.cli.main import main
from optgraph.errors import OptGraphError
from optgraph.ir.graph import Graph, Input, Node, Output, TensorType
from optgraph.ir.limits import MAX_STREAM_ID, MAX_TENSOR_BYTES
from optgraph.reference.interpreter import random_inputs


def _model(dim: str, ann: str = "") -> str:
    return f"""graph g {{
  input %x : f32[{dim}]
  %y = relu(%x) : f32[{dim}]{ann}
  output %y
}}
"""


def _compile(tmp_path: Path, text: str, capsys: pytest.CaptureFixture[str]) -> str:
    path = tmp_path / "model.ir"
    path.write_text(text)
    assert main(["compile", str(path)]) == 1
    out, err = capsys.readouterr()
    assert out == "" and "Traceback" not in err
    return err


@pytest.mark.parametrize("dim", [2**62, 2**63, 2**64 + 1, MAX_TENSOR_BYTES // 4 + 1])
def test_dims_beyond_int64_bytes_are_located_errors(
    dim: int, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _compile(tmp_path, _model(str(dim)), capsys)
    assert err.startswith(f"{tmp_path / 'model.ir'}:2:9: error: %x: f32[{dim}] holds ")
    assert "a tensor may hold at most 281,474,976,710,656 bytes" in err


def test_the_largest_tensor_allowed_verifies() -> None:
    og.verify(og.parse(_model(str(MAX_TENSOR_BYTES // 4))))


def test_many_large_tensors_together_are_an_error() -> None:
    largest = TensorType("f32", (MAX_TENSOR_BYTES // 4,))
    nodes = tuple(Node(f"y{i}", "relu", ("x",), type=largest) for i in range(20_000))
    graph = Graph("g", (Input("x", largest),), (), nodes, (Output("y0"),))
    with pytest.raises(OptGraphError, match="its tensors hold .* together"):
        og.verify(graph)


def test_a_5000_digit_integer_is_a_parse_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _compile(tmp_path, _model("9" * 5000), capsys)
    assert err.startswith(f"{tmp_path / 'model.ir'}:2:18: error: integer literal too large")
    attr = _model("4").replace("relu(%x)", "softmax(%x) {axis = " + "1" * 5000 + "}")
    err = _compile(tmp_path, attr, capsys)
    assert ":3:28: error: integer literal too large (5000 digits)" in err


def test_a_huge_stream_id_is_rejected_at_once() -> None:
    text = _model("4", " !{stream = 100000000000}")
    start = time.perf_counter()
    with pytest.raises(OptGraphError) as info:
        og.compile(og.parse(text), target="cpu")
    assert time.perf_counter() - start < 30  # minutes and 24 GB before the limit
    assert f"stream 100000000000 is above the largest stream id {MAX_STREAM_ID}" in str(info.value)
    assert info.value.span is not None and info.value.span.line == 3


def test_a_tensor_that_cannot_be_allocated_is_an_error_not_a_crash(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # 160 TB: under the verifier's limit, over any 64-bit process's address space.
    path = tmp_path / "model.ir"
    path.write_text(_model("40000000000000"))
    assert main(["run", str(path), "--device", "cpu", "-q"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("error: run: not enough memory") and "Traceback" not in err
    assert "this run needs at least" in err  # refused up front, with the figure


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16", "i32", "bool"])
def test_random_inputs_are_drawn_without_a_float64_copy(dtype: str) -> None:
    graph = og.parse(_model("1048576").replace("f32", dtype).replace("relu", "neg"))
    tracemalloc.start()
    try:
        (value,) = random_inputs(graph).values()
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    # float64 drawing peaked at 8 bytes an element plus the result; float32 at most 4 + result
    assert peak <= 4 * value.size + value.nbytes + 65536
