"""Every example on the GPU with 1, 2 and 4 streams: replayed 100 times, always the same bits.

The pipeline assigns streams (`min-branch-us=0`, so even these small graphs fork), inserts the
events and plans memory; the program captures one CUDA graph of all streams and replays it. Every
replay must equal the first run bit for bit, the results must match the reference interpreter,
and scheduling must not change a single bit: 1, 2 and 4 streams, eager and graph, all agree.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import optgraph as og
from optgraph.passes.manager import run_pipeline
from tests.support.gpu_support import assert_close, reference, require_gpu, same_bits

pytestmark = pytest.mark.gpu
require_gpu()

from optgraph.api.programs import cuda_program
from optgraph.codegen.lowering_options import LoweringOptions

EXAMPLES = sorted((Path(__file__).resolve().parents[2] / "examples").glob("*.ir"))
REPLAYS = 100


def pipeline(streams: int, fuse: bool = False) -> str:
    head = "verify,dce,cse," + ("fuse," if fuse else "")
    return (
        f"{head}assign-streams{{max-streams={streams},min-branch-us=0}},insert-sync,"
        "analyze-lifetimes,plan-memory"
    )


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_replays_identically_on_any_stream_count(path: Path) -> None:
    source = og.parse_file(path)
    inputs, weights, want = reference(source)
    results = {}
    for streams in (1, 2, 4):
        graph = run_pipeline(source, pipeline(streams))
        program = cuda_program(graph, weights=weights)
        first = program.run(inputs)
        assert_close(graph, first, want)
        for _ in range(REPLAYS):
            again = program.run(inputs)
            assert same_bits(first, again), f"{streams} streams: a replay differs"
        assert program.counters.captures == 1
        assert program.counters.replays == REPLAYS
        assert program.counters.allocations_refused == 0
        results[streams] = first
        program.close()
    assert same_bits(results[1], results[2]) and same_bits(results[1], results[4])
    eager = cuda_program(
        run_pipeline(source, pipeline(4)), weights=weights, options=LoweringOptions(use_graph=False)
    )
    assert same_bits(eager.run(inputs), results[1])
    assert eager.counters.captures == 0 and eager.counters.eager_runs == 1


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_fused_example_matches_reference(path: Path) -> None:
    source = og.parse_file(path)
    inputs, weights, want = reference(source)
    graph = run_pipeline(source, pipeline(2, fuse=True))
    program = cuda_program(graph, weights=weights)
    first = program.run(inputs)
    assert_close(graph, first, want)
    for _ in range(10):
        assert same_bits(first, program.run(inputs))
