"""KV caches updated in place on the GPU (codegen/plan/in_place_outputs.py): a decode step run with
each new cache bound to its input array equals the reference, replay after replay, and captures
one graph; binding separate arrays still works (copies), in the same program."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.plan.in_place_outputs import in_place_candidates
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from optgraph.reference.kernels import numpy_dtype
from tests.support.gpu_support import require_gpu

pytestmark = pytest.mark.gpu
require_gpu()

import cupy as cp

from optgraph.api.programs import cuda_program

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from gen_llama import generate_llama


@pytest.mark.parametrize("dtype", ["f16", "f32"])
def test_decode_with_caches_in_place_matches_reference(dtype: str) -> None:
    graph = og.parse(
        generate_llama(layers=2, hidden=128, heads=4, kv_heads=2, ffn=256, vocab=128, dtype=dtype)
    )
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    pairs = in_place_candidates(planned)
    assert len(pairs) == 4
    inputs, weights = random_inputs(graph, 11), random_weights(graph, 11)
    inputs["pos"] = np.array([9], np.int32)
    inputs["kv_len"] = np.array([10], np.int32)
    want = run_reference(graph, inputs, weights)
    program = cuda_program(planned, weights=weights)
    tol = 2e-2 if dtype == "f16" else 1e-4
    for bind_in_place in (True, False, True):
        dev = {k: cp.asarray(v) for k, v in inputs.items()}
        types = planned.value_types()
        out = {}
        for name in dict.fromkeys(planned.output_names()):
            t = types[name]
            fresh = cp.empty(t.shape, dtype=numpy_dtype(t.dtype))
            out[name] = dev[pairs[name]] if bind_in_place and name in pairs else fresh
        for _ in range(3):  # eager, capture, replay
            program.run(dev, out=out)
        program.synchronize()
        for name in planned.output_names():
            np.testing.assert_allclose(
                cp.asnumpy(out[name]).astype(np.float64),
                np.asarray(want[name], np.float64),
                atol=tol,
                rtol=tol,
                err_msg=f"%{name} (in place: {bind_in_place})",
            )
        plan = program.plan()
        placed = [n for n in pairs if plan.locations[n] == plan.locations[pairs[n]]]
        assert len(placed) == (4 if bind_in_place else 0)
