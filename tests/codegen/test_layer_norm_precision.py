"""layer_norm on rows far from zero (issue 13, class 7): 1000 ± 1 against float64.

Centering by a float32 mean rounds the mean to the ulp of 1000 (6e-5) and every centered value
with it: 5e-5 relative error before the shifted two-pass variance, ~1e-7 after. Checked on the
reference, the planned executor and the CUDA kernel in the CPU emulator (registers-cached rows,
rows read per pass, and a fused prologue).
"""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import run_reference
from tests.support import cuda_emulator

BOUND = 1e-6  # max error relative to the largest output, against float64


def _graph(cols: int, prologue: bool) -> og.Graph:
    x = "%s" if prologue else "%x"
    extra = f"  %s = add(%x, %d) : f32[4,{cols}]\n" if prologue else ""
    return og.parse(f"""graph ln {{
  input %x : f32[4,{cols}]
  input %d : f32[4,{cols}]
  weight %w : f32[{cols}]
  weight %b : f32[{cols}]
{extra}  %y = layer_norm({x}, %w, %b) : f32[4,{cols}]
  output %y
}}
""")


def _data(cols: int) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    rng = np.random.default_rng(cols)
    x = (1000.0 + rng.uniform(-1.0, 1.0, (4, cols))).astype(np.float32)
    d = rng.uniform(-0.5, 0.5, (4, cols)).astype(np.float32)
    w = (1.0 + 0.1 * rng.standard_normal(cols)).astype(np.float32)
    b = (0.1 * rng.standard_normal(cols)).astype(np.float32)
    return {"x": x, "d": d}, {"w": w, "b": b}


def _float64(inputs: dict[str, np.ndarray], weights: dict[str, np.ndarray], prologue: bool):
    x = inputs["x"].astype(np.float64)
    if prologue:
        x = (inputs["x"] + inputs["d"]).astype(np.float64)  # the add rounds in float32 too
    c = x - x.mean(axis=-1, keepdims=True)
    y = c / np.sqrt((c * c).mean(axis=-1, keepdims=True) + 1e-5)
    return y * weights["w"].astype(np.float64) + weights["b"].astype(np.float64)


def _error(got: np.ndarray, want: np.ndarray) -> float:
    return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())


@pytest.mark.parametrize("prologue", [False, True])
def test_reference_and_planned_executor_are_precise(prologue: bool) -> None:
    graph = _graph(4096, prologue)
    inputs, weights = _data(4096)
    want = _float64(inputs, weights, prologue)
    assert _error(run_reference(graph, inputs, weights)["y"], want) < BOUND
    got = og.compile(graph, target="cpu").run(inputs, weights)["y"]
    assert _error(got, want) < BOUND


@pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
@pytest.mark.parametrize(
    ("cols", "prologue"),
    [(4096, False), (20000, False), (1000, True)],
    ids=["cached-row", "row-per-pass", "fused-prologue"],
)
def test_cuda_kernel_is_precise_in_the_emulator(cols: int, prologue: bool) -> None:
    graph = _graph(cols, prologue)
    if prologue:
        graph = run_pipeline(graph, "fuse")
        assert [n.op for n in graph.nodes] == ["fused"]
    inputs, weights = _data(cols)
    got = cuda_emulator.run_graph(graph, inputs, weights)["y"]
    assert _error(got, _float64(inputs, weights, prologue)) < BOUND


PRODUCT = """graph ln_product {
  input %x : f32[1,1024]
  weight %w : f32[1024]
  weight %b : f32[1024]
  weight %m : f32[1024,256]
  %n = layer_norm(%x, %w, %b) : f32[1,1024]
  %y = matmul(%n, %m) : f32[1,256]
  output %y
}
"""


@pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
def test_norm_prologue_of_a_one_row_product_is_precise_in_the_emulator() -> None:
    graph = run_pipeline(og.parse(PRODUCT), "fuse")
    assert [n.op for n in graph.nodes] == ["fused"]  # the norm is the product's row prologue
    inputs, weights = _data(1024)
    rng = np.random.default_rng(7)
    weights["m"] = (rng.standard_normal((1024, 256)) / 32).astype(np.float32)
    normalized = _float64({"x": inputs["x"][:1]}, weights, prologue=False)
    want = normalized @ weights["m"].astype(np.float64)
    got = cuda_emulator.run_graph(graph, {"x": inputs["x"][:1]}, weights)["y"]
    assert _error(got, want) < 10 * BOUND  # the product's own float32 sums add ~1e-7 · √K
