"""The ways the GPU benchmarks run a model: pipelines, the model record and the variants.

A *variant* is a name, a one-line description and a `build(model)` that returns a zero-argument
callable doing one run plus the stream that run starts and ends on (timed by
`timing.median_us`). bench_gpu.py times `EXAMPLE_VARIANTS`; head_to_head.py adds the PyTorch
ones (head_to_head_variants.py) to the optgraph variants built here; bench_stream_threshold.py
uses the pipelines and `Model`.

- `cupy-eager`: the graph op by op in CuPy (cupy_interpreter.py);
- `og-eager`: optgraph's kernels launched one by one (`LoweringOptions(use_graph=False)`), 1 stream;
- `og-graph-1s`: one CUDA graph, every node on one stream;
- `og-graph-chains`: one CUDA graph, streams from `assign-streams{policy=chains}`.

Inputs and outputs stay on the device (CuPy arrays bound by pointer); KV caches are updated in
the caller's arrays, as the PyTorch path does. CuPy is imported inside the functions, so the
scripts answer `--help` without it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from optgraph.api.programs import cuda_program
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.codegen.plan.in_place_outputs import in_place_candidates
from optgraph.ir.graph import Graph
from optgraph.passes.manager import FUSION, run_pipeline
from optgraph.reference.kernels import numpy_dtype

PLAN = "analyze-lifetimes,plan-memory"
ONE_STREAM = f"verify,dce,cse,assign-streams{{max-streams=1}},insert-sync,{PLAN}"
CHAINS = f"verify,dce,cse,assign-streams{{policy=chains}},insert-sync,{PLAN}"
# The fused variants run the default pipeline's fusion passes (manager.FUSION), so they follow it.
FUSED_ONE_STREAM = f"verify,dce,cse,{FUSION},assign-streams{{max-streams=1}},insert-sync,{PLAN}"
FUSED_CHAINS = f"verify,dce,cse,{FUSION},assign-streams{{policy=chains}},insert-sync,{PLAN}"


@dataclass
class Model:
    """A benchmark model: its source graph and seeded data (inputs on the host; weights on the
    host or already on the device)."""

    name: str
    graph: Graph
    inputs: dict[str, Any]
    weights: dict[str, Any]

    def device_inputs(self) -> dict[str, Any]:
        import cupy as cp

        return {k: cp.asarray(v) for k, v in self.inputs.items()}


Runner = tuple[Callable[[], Any], Any]  # (one run, the stream it starts and ends on)


@dataclass(frozen=True)
class Variant:
    name: str
    description: str
    build: Callable[[Model], Runner]


def cupy_eager(model: Model) -> Runner:
    """The graph op by op in CuPy, on the null stream."""
    import cupy as cp

    from benchmarks.harness.cupy_interpreter import CupyModel

    run = CupyModel(model.graph)
    env = {**model.device_inputs(), **{k: cp.asarray(v) for k, v in model.weights.items()}}
    return (lambda: run(env)), cp.cuda.Stream.null


def optgraph_variant(
    pipeline: str, use_graph: bool, pdl: bool = True, merge: bool = True, bound: bool = True
) -> Callable[[Model], Runner]:
    """A builder running `pipeline`, then the CUDA runtime (one CUDA graph unless `use_graph`
    is false; PDL and merged launches as given). A run is the bound step (`program.bind(inputs,
    out)`: what a serving loop calls, as PyTorch replays its CUDA graph) unless `bound` is false:
    then `program.run(inputs, out=out)`, which checks the arrays and picks the graph every call."""

    def build(model: Model) -> Runner:
        import cupy as cp

        graph = run_pipeline(model.graph, pipeline)
        options = LoweringOptions(use_graph=use_graph, pdl=pdl, merge_launches=merge)
        program = cuda_program(graph, weights=model.weights, options=options)
        inputs = model.device_inputs()
        types = graph.value_types()
        out = {}
        in_place = in_place_candidates(graph)  # KV caches updated where they are, as torch does
        for name in dict.fromkeys(graph.output_names()):
            t = types[name]
            source = in_place.get(name)
            out[name] = inputs[source] if source else cp.empty(t.shape, dtype=numpy_dtype(t.dtype))
        if bound:
            return program.bind(inputs, out), program.stream
        return (lambda: program.run(inputs, out=out)), program.stream

    return build


BASELINE = "cupy-eager"
EXAMPLE_VARIANTS: list[Variant] = [
    Variant("cupy-eager", "CuPy, op by op", cupy_eager),
    Variant(
        "og-eager", "optgraph kernels, launched one by one", optgraph_variant(ONE_STREAM, False)
    ),
    Variant(
        "og-graph-1s", "optgraph, one CUDA graph, 1 stream", optgraph_variant(ONE_STREAM, True)
    ),
    Variant("og-graph-chains", "optgraph, one CUDA graph, chains", optgraph_variant(CHAINS, True)),
]
