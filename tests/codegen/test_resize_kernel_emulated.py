"""The resize kernel (codegen/kernels/resize.py) in the CPU emulator equals the reference bit for
bit in f32: the same float32 coordinates (round-to-nearest intrinsics, no fma contraction), the
same rows and columns, the same blend; f16 and bf16 round the same float32 value once."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.reference.interpreter import random_inputs, run_reference
from tests.support import cuda_emulator

pytestmark = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")

ATTRS = [
    "size = [14, 9]",
    'coordinates = "half_pixel", nearest = "round_prefer_ceil", size = [13, 3]',
    'coordinates = "pytorch_half_pixel", nearest = "round_prefer_floor", size = [1, 6]',
    'nearest = "ceil", scale_h = 3.3, scale_w = 0.7, size = [16, 3]',
    'coordinates = "half_pixel", mode = "linear", size = [13, 11]',
    'coordinates = "half_pixel", mode = "linear", scale_h = 1.7, scale_w = 1.3, size = [8, 6]',
    'coordinates = "align_corners", mode = "linear", size = [9, 2]',
    'coordinates = "asymmetric", mode = "linear", size = [3, 17]',
]


@pytest.mark.parametrize("dtype", ["f32", "f16", "bf16"])
def test_every_mode_equals_the_reference_bits(dtype: str) -> None:
    lines = [f"  input %x : {dtype}[2,3,5,7]"]
    for i, attrs in enumerate(ATTRS):
        h, w = (int(v) for v in attrs.split("size = [")[1].rstrip("]").split(", "))
        lines.append(f"  %y{i} = resize(%x) {{{attrs}}} : {dtype}[2,3,{h},{w}]")
    lines.append("  output " + ", ".join(f"%y{i}" for i in range(len(ATTRS))))
    graph = og.parse("graph g {\n" + "\n".join(lines) + "\n}\n")
    inputs = random_inputs(graph, 5)
    want = run_reference(graph, inputs, {})
    got = cuda_emulator.run_plan(lower_cuda(graph), inputs, {}, graph)
    for name, value in want.items():
        assert got[name].dtype == value.dtype
        assert np.array_equal(got[name], value), name
