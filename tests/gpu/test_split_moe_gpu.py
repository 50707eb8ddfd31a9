"""The MoE decode step of benchmarks/bench_split.py on the GPU, in every way the runtime runs CPU
nodes (`LoweringOptions.cpu_nodes`): the CPU nodes on the calling thread between per-part CUDA
graphs (the default), one host function per CPU segment in one graph, one per CPU node. Each
matches the reference, replays bit-stably (several replays, also with the KV caches bound on the
device and through `program.bind`), and all of them and the synchronous way (same lowered steps,
eager, the host synchronizing at every boundary) agree bit for bit. (Streamed programs with the
spread resident layout: tests/gpu/test_offload.py.)"""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.codegen.lowering_options import CPU_NODE_MODES, LoweringOptions
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.support.gpu_support import require_gpu

pytestmark = pytest.mark.gpu
cupy = require_gpu()

from benchmarks.harness.moe_decode import MoeSizes, generate_moe_decode
from benchmarks.harness.split_plan import SPLIT
from benchmarks.harness.split_sync_way import SyncWay
from optgraph.api.programs import cuda_program
from optgraph.runtime.cuda.runner import CHECK_BOUNDS

SIZES = MoeSizes(
    layers=3, hidden=256, heads=4, kv_heads=2, experts=8, expert_ffn=64, shared_ffn=128,
    vocab=512, cache_len=32,
)  # fmt: skip
REPLAYS = 5


def _case() -> tuple[og.Graph, og.Graph, dict[str, np.ndarray], dict[str, np.ndarray]]:
    source = og.parse(generate_moe_decode(SIZES))
    inputs = random_inputs(source, seed=3)
    inputs["pos"][:] = 5
    inputs["kv_len"][:] = 6
    return source, run_pipeline(source, SPLIT), inputs, random_weights(source, seed=4)


def _runs(mode: str) -> list[dict[str, np.ndarray]]:
    _, split, inputs, weights = _case()
    program = cuda_program(split, weights=weights, options=LoweringOptions(cpu_nodes=mode))
    try:
        outs = [program.run(inputs) for _ in range(2 + REPLAYS)]  # eager + capture, replays
        assert program.counters.replays >= REPLAYS
        sync = SyncWay(cupy, program, inputs, {})(inputs)
        outs.append({n: np.asarray(v) for n, v in sync.items()})
    finally:
        program.close()
    return outs


@pytest.mark.parametrize("mode", CPU_NODE_MODES)
def test_split_moe_matches_reference_replays_and_the_sync_way(mode: str) -> None:
    source, _, inputs, weights = _case()
    want = run_reference(source, inputs, weights)
    outs = _runs(mode)
    for name, value in want.items():
        assert nmse(outs[-2][name], value) <= CHECK_BOUNDS["f32"], name
        for k, out in enumerate(outs[1:], 1):  # every replay, and the sync way (last)
            assert out[name].tobytes() == outs[0][name].tobytes(), (name, k)


def test_every_way_computes_the_same_bits() -> None:
    first = {mode: _runs(mode)[-2] for mode in CPU_NODE_MODES}
    base = first["calling-thread"]
    for mode, out in first.items():
        for name, value in base.items():
            assert out[name].tobytes() == value.tobytes(), (mode, name)


@pytest.mark.parametrize("mode", CPU_NODE_MODES)
def test_device_caches_and_a_bound_step(mode: str) -> None:
    """KV caches as CuPy inputs, the new caches into device `out` arrays (the serving loop of
    bench_split.py), then the same through `program.bind`: both equal the host-array run."""
    source, split, inputs, weights = _case()
    want = run_reference(source, inputs, weights)
    program = cuda_program(split, weights=weights, options=LoweringOptions(cpu_nodes=mode))
    try:
        dev_in = {n: cupy.asarray(a) for n, a in inputs.items()}
        out = {n: cupy.empty(v.shape, v.dtype) for n, v in want.items()}
        for _ in range(2 + REPLAYS):
            program.run({**inputs, **{n: dev_in[n] for n in dev_in if "cache" in n}}, out=out)
        program.stream.synchronize()  # every output bound: run returned without waiting
        for name, value in want.items():
            assert nmse(cupy.asnumpy(out[name]), value) <= CHECK_BOUNDS["f32"], name
        bound_out = {n: cupy.empty(v.shape, v.dtype) for n, v in want.items()}
        step = program.bind(dev_in, bound_out)
        for _ in range(2 + REPLAYS):
            step()
        program.stream.synchronize()
        for name in want:
            got = cupy.asnumpy(bound_out[name])
            assert got.tobytes() == cupy.asnumpy(out[name]).tobytes(), name
    finally:
        program.close()
