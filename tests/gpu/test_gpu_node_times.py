"""`CompiledProgram.node_times()` on the GPU (runtime/cuda/node_times.py): every GPU node gets a
positive time, a 4096² f16 product takes longer than a 16-element add, and the outputs of the
run it measured stay as they were (measuring re-runs nodes on their own buffers)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.support.gpu_support import require_gpu

pytestmark = pytest.mark.gpu
require_gpu()

import optgraph as og

GRAPH = """graph mixed {
  input %x : f16[4096,4096]
  input %s : f16[16]
  weight %w : f16[4096,4096]
  %p = matmul(%x, %w) : f16[4096,4096]
  %t = add(%s, %s) : f16[16]
  output %p, %t
}
"""


def test_node_times_rank_a_large_product_above_a_tiny_add() -> None:
    rng = np.random.default_rng(0)
    inputs = {
        "x": rng.standard_normal((4096, 4096)).astype(np.float16),
        "s": rng.standard_normal(16).astype(np.float16),
    }
    program = og.compile(og.parse(GRAPH), target="cuda")
    first = program.run(inputs)
    times = program.node_times()
    assert {"p", "t"} <= set(times) and all(t > 0 for t in times.values())
    assert times["p"] > 10 * times["t"]  # 137 GFLOP against 16 additions
    again = program.run(inputs)
    assert all(np.array_equal(first[k], again[k]) for k in first)
    program.close()
