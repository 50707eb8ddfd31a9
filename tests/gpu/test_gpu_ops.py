"""Every op of the op table on the GPU against the reference interpreter, over several shapes.

Each op gets one graph holding all its cases (so one module compile per op); the program runs it
twice: eagerly (then captures the CUDA graph) and as a replay. Both runs must match the reference
within `gpu_support.BOUNDS` and each other bit for bit. Graphs here have no memory plan, so this
also covers the runtime's unplanned fallback (one buffer per value). That every op has a case is
checked without a GPU (tests/codegen/test_op_cases.py), and the same cases run on the CPU in the
emulator (tests/codegen/test_op_kernels_emulated.py).
"""

from __future__ import annotations

import pytest

import optgraph as og
from tests.support.gpu_support import assert_close, reference, require_gpu, same_bits
from tests.support.op_cases import case_graph_text, params

pytestmark = pytest.mark.gpu
require_gpu()

from optgraph.api.programs import cuda_program


@pytest.mark.parametrize(("op", "dtype"), params())
def test_op_matches_reference(op: str, dtype: str) -> None:
    graph = og.parse(case_graph_text(op, dtype))
    inputs, weights, want = reference(graph)
    program = cuda_program(graph, weights=weights)
    first = program.run(inputs)  # eager, then capture
    second = program.run(inputs)  # replay
    assert program.counters.captures == 1 and program.counters.replays == 1
    assert_close(graph, first, want)
    assert same_bits(first, second)
