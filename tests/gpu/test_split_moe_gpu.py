"""The MoE decode step of benchmarks/bench_split.py on the GPU: the split program (routed experts
as host functions inside one CUDA graph) matches the reference, replays bit-stably, and equals the
synchronous way (same lowered steps, eager, the host synchronizing at every boundary) bit for
bit. (Streamed programs with the spread resident layout: tests/gpu/test_offload.py.)"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.passes.manager import run_pipeline
from optgraph.runtime.reference import nmse, random_inputs, random_weights, run_reference
from tests.support.gpu_support import require_gpu

pytestmark = pytest.mark.gpu
cupy = require_gpu()

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
from moe_decode import MoeSizes, generate_moe_decode
from split_plan import SPLIT
from split_sync_way import SyncWay

from optgraph.program import cuda_program
from optgraph.runtime.cuda import CHECK_BOUNDS

SIZES = MoeSizes(
    layers=3, hidden=256, heads=4, kv_heads=2, experts=8, expert_ffn=64, shared_ffn=128,
    vocab=512, cache_len=32,
)  # fmt: skip


def test_split_moe_matches_reference_and_the_sync_way() -> None:
    source = og.parse(generate_moe_decode(SIZES))
    split = run_pipeline(source, SPLIT)
    inputs = random_inputs(source, seed=3)
    inputs["pos"][:] = 5
    inputs["kv_len"][:] = 6
    weights = random_weights(source, seed=4)
    want = run_reference(source, inputs, weights)
    program = cuda_program(split, weights=weights)
    try:
        outs = [program.run(inputs) for _ in range(3)]  # eager + capture, then replays
        assert program.counters.replays >= 2
        for name, value in want.items():
            assert nmse(outs[-1][name], value) <= CHECK_BOUNDS["f32"], name
            assert outs[-1][name].tobytes() == outs[1][name].tobytes(), name
        sync = SyncWay(cupy, program)(inputs)
        for name in want:
            assert np.asarray(sync[name]).tobytes() == outs[-1][name].tobytes(), name
    finally:
        program.close()
