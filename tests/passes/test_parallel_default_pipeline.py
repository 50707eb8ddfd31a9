"""The whole default pipeline after tensor-parallel or pipeline-parallel: the fused, scheduled,
synced and memory-planned graph has no race in any device's arena (`analysis/races.find_races`,
per device, collectives and send/recv joining the devices' clocks), and its lowered program, run
on the planned executor over the emulated devices (one arena per device, two seeded random
interleavings of every device's streams, collectives computed at a rendezvous), computes what the
reference interpreter computes on the original graph: bit-identical after pipeline-parallel,
within the bounds of tests/passes/test_tensor_parallel.py after tensor-parallel.

This test found a lifetimes bug of values read by replicated nodes (free before their last read),
fixed in mgpu-core's per-lane visible points.
"""

from __future__ import annotations

import numpy as np
import pytest

from optgraph.analysis.races import find_races
from optgraph.api.program_devices import run_emulated
from optgraph.codegen.plan.lower_arena import lower
from optgraph.passes.manager import plan_memory_if_missing, run_pipeline
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.passes.test_tensor_parallel import BOUNDS
from tests.support.parallel_models import PARALLEL_MODELS, dtype_of

MODELS = ["llama_decode", "gpt2_block", "moe_block", "gen_gqa", "gen_f16", "gen_bias_tied"]
PIPELINES = [
    "tensor-parallel{ways=2},default",
    "tensor-parallel{ways=4},default",
    "pipeline-parallel{stages=2},default",
]


@pytest.mark.parametrize("pipeline", PIPELINES)
@pytest.mark.parametrize("name", MODELS)
def test_default_pipeline_after_the_split(name: str, pipeline: str) -> None:
    graph = PARALLEL_MODELS[name]
    inputs, weights = random_inputs(graph, 3), random_weights(graph, 3)
    want = run_reference(graph, inputs, weights)
    planned = plan_memory_if_missing(run_pipeline(graph, pipeline))
    assert planned.device_count() > 1
    assert find_races(planned) == []
    program = lower(planned)
    for seed in (0, 1):  # whole arrays in (caches cut by KV head), split outputs joined
        got = run_emulated(graph, program, inputs, weights, seed)
        assert list(got) == list(want)
        for output, value in want.items():
            if pipeline.startswith("pipeline"):
                assert got[output].tobytes() == value.tobytes(), output
            else:
                error = nmse(got[output].astype(np.float64), value.astype(np.float64))
                assert error <= BOUNDS[dtype_of(graph)], (output, error)
