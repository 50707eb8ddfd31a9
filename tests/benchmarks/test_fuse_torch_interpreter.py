"""The PyTorch baseline interpreter (benchmarks/harness/torch_interpreter.py) against the
reference.

Skipped where PyTorch is not installed (CI); runs on the CPU, and on CUDA where there is a GPU.
Every example, fused and unfused, must match the NumPy reference interpreter.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]

import optgraph as og
from benchmarks.harness.torch_interpreter import TorchModel, to_numpy
from optgraph.passes.fuse import FusePass
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference

EXAMPLES = sorted((ROOT / "examples").glob("*.ir"))
DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("fused", [False, True], ids=["unfused", "fused"])
@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_examples_match_reference(path: Path, fused: bool, device: str) -> None:
    graph = og.parse_file(str(path))
    inputs, weights = random_inputs(graph, 2), random_weights(graph, 2)
    expected = run_reference(graph, inputs, weights)
    run_graph = FusePass().run(graph) if fused else graph
    model = TorchModel(run_graph, device=device)
    torch.backends.cuda.matmul.allow_tf32 = False
    with torch.no_grad():
        actual = to_numpy(model(model.tensors(inputs, weights)))
    # Different summation orders (and f32 transcendental libraries): a loose but meaningful bound.
    for name, value in expected.items():
        np.testing.assert_allclose(
            actual[name].astype(np.float64), value.astype(np.float64), rtol=2e-3, atol=2e-3
        )


def test_decode_loop_feedback_ops_match_reference() -> None:
    """argmax (first maximum), cast and integer add, as the decode-loop benchmark feeds back."""
    graph = og.parse(
        "graph g {\n input %x : f32[3,7]\n input %p : i32[1]\n input %one : i32[1]\n"
        ' %t = argmax(%x) {axis = -1} : i64[3]\n %t32 = cast(%t) {dtype = "i32"} : i32[3]\n'
        " %k = argmax(%x) {axis = 0, keepdims = true} : i64[1,7]\n"
        " %q = add(%p, %one) : i32[1]\n output %t32, %k, %q\n}\n"
    )
    x = np.random.default_rng(0).standard_normal((3, 7)).astype(np.float32)
    x[1, 2] = x[1, 5] = x[1].max() + 1  # a tie: the first index wins in both
    inputs = {"x": x, "p": np.array([41], np.int32), "one": np.array([1], np.int32)}
    expected = run_reference(graph, inputs, {})
    with torch.no_grad():
        got = to_numpy(
            TorchModel(graph, device="cpu")({k: torch.tensor(v) for k, v in inputs.items()})
        )
    for name, want in expected.items():
        np.testing.assert_array_equal(got[name], want)
