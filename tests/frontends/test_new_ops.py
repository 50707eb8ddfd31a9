"""erf, sin and cos, the ops exports use that the IR gained for the importers: reference semantics
against NumPy/float64 and the generated CUDA kernels run in the CPU emulator."""

from __future__ import annotations

import math

import numpy as np
import pytest

import optgraph as og
from optgraph.reference.interpreter import nmse, random_inputs, run_reference
from tests.support import cuda_emulator
from tests.support.op_cases import case_graph_text

NEW_OPS = ("erf", "sin", "cos")
EXACT = {"erf": np.vectorize(math.erf), "sin": np.sin, "cos": np.cos}


@pytest.mark.parametrize("op", NEW_OPS)
def test_reference_semantics(op: str) -> None:
    graph = og.parse(f"graph g {{ input %x : f32[64]\n %y = {op}(%x) : f32[64]\n output %y }}")
    x = np.linspace(-4.0, 4.0, 64, dtype=np.float32)
    got = run_reference(graph, {"x": x}, {})["y"]
    np.testing.assert_allclose(got, EXACT[op](x.astype(np.float64)), rtol=1e-6, atol=1e-7)


def test_verifier_rejects_integer_operands() -> None:
    graph = og.parse("graph g { input %x : i32[4]\n %y = sin(%x) : i32[4]\n output %y }")
    with pytest.raises(og.OptGraphError, match="sin"):
        og.verify(graph)


def _all_new_ops(dtype: str) -> og.Graph:
    """One graph with every new op on several shapes (one emulator build per dtype)."""
    lines = []
    for k, shape in enumerate(("4,64", "3,5,7", "1", "1000")):
        lines.append(f"input %x{k} : {dtype}[{shape}]")
        lines += [f"%{op}{k} = {op}(%x{k}) : {dtype}[{shape}]" for op in NEW_OPS]
    outputs = ", ".join(f"%{op}{k}" for k in range(4) for op in NEW_OPS)
    return og.parse("graph new_ops {\n" + "\n".join(lines) + f"\noutput {outputs}\n}}")


def test_op_cases_cover_the_new_ops() -> None:
    for op in NEW_OPS:
        og.verify(og.parse(case_graph_text(op, "f16")))


@pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")
@pytest.mark.parametrize("dtype", ["f32", "f16"])
def test_cuda_kernels_match_reference_in_the_emulator(dtype: str) -> None:
    graph = _all_new_ops(dtype)
    inputs = random_inputs(graph, 0)
    want = run_reference(graph, inputs, {})
    got = cuda_emulator.run_graph(graph, inputs, {})
    bound = {"f32": 1e-7, "f16": 1e-6}[dtype]
    for name, value in got.items():
        error = nmse(np.asarray(value, np.float64), np.asarray(want[name], np.float64))
        assert error <= bound, f"{dtype} %{name}: nmse {error:.3e}"
