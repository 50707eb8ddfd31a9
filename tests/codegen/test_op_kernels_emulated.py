"""Every op's CUDA kernels on the CPU, over every case of tests/support/op_cases.py: the CPU twin
of tests/gpu/test_gpu_ops.py, so a change to any kernel fails here without a GPU.

The generated source runs in the emulator (tests/support/cuda_emulator.py `run_plan`): all cases
of one dtype are one unplanned graph (`all_cases_graph_text`), lowered like the GPU runtime
lowers it (`lower_cuda`, one launch per kernel, each value in its own buffer; cuBLAS calls as a
float32 loop nest, copies as memcpy) and built once; each (op, dtype) test then compares its own
outputs with the reference interpreter. Tolerance, NMSE by result dtype, the GPU tests' own
(tests/support/gpu_support.py says why):

    f32 1e-7    f16 1e-6    bf16 1e-4    i32, i64, bool: exact (shape and dtype always exact)

Emulated runs need g++ (C++20) and skip without it; the coverage check below never skips.
"""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.lower_cuda import CudaPlan, lower_cuda
from optgraph.ir.ops import OPS, op_names
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.support import cuda_emulator
from tests.support.gpu_support import BOUNDS
from tests.support.op_cases import all_cases_graph_text, case_prefix, params

EMULATED = params()
needs_gxx = pytest.mark.skipif(not cuda_emulator.available(), reason="needs g++ (C++20)")

Run = tuple[og.Graph, CudaPlan, dict[str, np.ndarray], dict[str, np.ndarray]]
_runs: dict[str, Run | Exception] = {}


def _emulated(dtype: str) -> Run:
    """(graph, plan, emulated outputs, reference outputs) of every case in `dtype`, built once
    (a failed build fails every test of the dtype with the same error)."""
    if dtype not in _runs:
        graph = og.parse(all_cases_graph_text(dtype))
        inputs, weights = random_inputs(graph, 0), random_weights(graph, 0)
        plan = lower_cuda(graph, merge_launches=False)
        try:
            got = cuda_emulator.run_plan(plan, inputs, weights)
            _runs[dtype] = (graph, plan, got, run_reference(graph, inputs, weights))
        except Exception as err:  # noqa: BLE001 - kept, re-raised by each test of the dtype
            _runs[dtype] = err
    run = _runs[dtype]
    if isinstance(run, Exception):
        raise run
    return run


def test_every_op_has_an_emulated_case() -> None:
    kernels = {op for op in op_names() if OPS[op].category != "collective"}  # NCCL runs those
    missing = kernels - {op for op, _ in EMULATED}
    assert not missing, f"ops of the op table with no emulated case: {sorted(missing)}"


@needs_gxx
@pytest.mark.parametrize(("op", "dtype"), EMULATED)
def test_op_kernels_match_reference(op: str, dtype: str) -> None:
    graph, plan, got, want = _emulated(dtype)
    prefix = case_prefix(op)
    ran = [s for s in plan.steps if getattr(s, "node", "").startswith(prefix)]
    assert ran, f"{op} ({dtype}): no launch, cuBLAS call or copy was emulated"
    types = graph.value_types()
    names = [n for n in graph.output_names() if n.startswith(prefix)]
    assert names, f"{op} ({dtype}): the case has no output"
    for name in names:
        g, w, t = got[name], want[name], types[name]
        label = f"%{name.removeprefix(prefix)} ({t})"
        assert g.shape == w.shape and g.dtype == w.dtype, (
            label,
            g.shape,
            g.dtype,
            w.shape,
            w.dtype,
        )
        if t.dtype in BOUNDS:
            err = nmse(np.asarray(g, np.float64), np.asarray(w, np.float64))
            assert err <= BOUNDS[t.dtype], f"{label}: nmse {err:.3e} > {BOUNDS[t.dtype]:g}"
        else:
            assert np.array_equal(g, w), f"{label} differs from the reference"
