"""The block-parallel cumsum and argmax kernels on chosen data in the CPU emulator: argmax ties
pick the first index (as torch and ONNX do) also across threads and warps, a NaN wins, lines
longer than a block's tile and more lines than a grid's 65535 blocks; cumsum of integers is
exact across tiles."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.cuda_dispatch import node_code
from optgraph.reference.interpreter import run_reference
from tests.support import cuda_emulator

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")


def _run(
    text: str, inputs: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    graph = og.parse(text)
    return cuda_emulator.run_graph(graph, inputs, {}), run_reference(graph, inputs, {})


def test_argmax_ties_pick_the_first_index_and_nan_wins() -> None:
    x = np.zeros((4, 1000), np.float32)
    x[0, [7, 300, 999]] = 5.0  # ties in different warps and tiles: 7
    x[1, [999, 640]] = 2.0  # 640 before 999, in the second half of the block's threads
    x[2, [900, 5]] = np.nan  # the first NaN
    x[3, :] = -np.inf  # all equal: 0
    text = """graph g {
  input %x : f32[4,1000]
  %y = argmax(%x) {axis = 1} : i64[4]
  output %y
}"""
    got, want = _run(text, {"x": x})
    assert got["y"].tolist() == want["y"].tolist() == [7, 640, 5, 0]


def test_argmax_of_integers_with_ties_along_a_strided_axis() -> None:
    x = np.random.default_rng(0).integers(0, 3, size=(3, 300, 5)).astype(np.int32)
    text = """graph g {
  input %x : i32[3,300,5]
  %y = argmax(%x) {axis = 1, keepdims = true} : i64[3,1,5]
  output %y
}"""
    got, want = _run(text, {"x": x})
    assert got["y"].tolist() == want["y"].tolist()
    assert want["y"].tolist() == np.argmax(x, axis=1, keepdims=True).tolist()


def test_integer_cumsum_is_exact_across_tiles() -> None:
    x = np.random.default_rng(1).integers(-1000, 1000, size=(2, 1500)).astype(np.int64)
    text = """graph g {
  input %x : i64[2,1500]
  %y = cumsum(%x) {axis = 1} : i64[2,1500]
  output %y
}"""
    got, want = _run(text, {"x": x})
    assert got["y"].tolist() == want["y"].tolist() == np.cumsum(x, axis=1).tolist()


MANY_LINES = """graph g {
  input %x : i32[66000,2]
  %c = cumsum(%x) {axis = 1} : i32[66000,2]
  %a = argmax(%x) {axis = 1} : i64[66000]
  output %c, %a
}"""


def test_more_lines_than_blocks_loop_over_a_capped_grid() -> None:
    graph = og.parse(MANY_LINES)
    for node in graph.nodes:
        (launch,) = node_code(node, [graph.value_types()["x"]])
        assert launch.grid == (65535, 1, 1) and launch.block == (32, 1, 1)
        assert "line += gridDim.x" in launch.kernel.source


@pytest.mark.slow  # 66000 blocks of fibers: about half a minute in the emulator
def test_more_lines_than_blocks_in_the_emulator() -> None:
    x = np.random.default_rng(2).integers(-5, 5, size=(66000, 2)).astype(np.int32)
    got, want = _run(MANY_LINES, {"x": x})
    for name in ("c", "a"):
        assert got[name].tolist() == want[name].tolist(), name
