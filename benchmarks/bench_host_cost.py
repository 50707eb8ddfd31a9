"""Host cost of one call: `CudaProgram.run(inputs, out=...)`, a bound step, PyTorch's graph replay.

    python benchmarks/bench_host_cost.py [--calls 2000] [--markdown FILE]

For each model (the 6-op diamond, the MoE block, the launch-bound Llama decode step of the
head-to-head suite) and each way of calling it, after a warm-up (which captures the CUDA graph):

- `host µs/call`: `calls` calls issued back to back, timed on the host with `perf_counter` from
  the first call to the return of the last (no synchronization in between). A call that waits for
  the previous run before it starts pays the GPU time here too.
- `µs/step`: the same `calls` calls followed by a synchronization, per call: what a serving loop
  that never reads its results in between gets, host and GPU overlapped.

Ways of calling: `og-run` (`program.run(inputs, out=out)`: the arrays checked in full only where
laid out otherwise than in the call before, and the call waits for the previous run's staging
copies); `og-step`
(`step = program.bind(inputs, out)` once, then `step()`: one graph launch); `torch-graph`
(`torch.cuda.CUDAGraph.replay()` of the same graph run node by node in PyTorch). Needs CuPy and a
GPU; the PyTorch row needs PyTorch.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

CallAndStream = tuple[Callable[[], Any], Any]


def _models() -> list[Any]:
    import cupy as cp
    from gen_llama import generate_llama

    import optgraph as og
    from benchmarks.harness.gpu_variants import Model
    from benchmarks.harness.head_to_head import LLAMA_LAUNCH, decode_inputs, device_weights
    from optgraph.reference.interpreter import random_inputs, random_weights

    found = []
    for name in ("diamond", "moe_block"):
        graph = og.parse_file(ROOT / "examples" / f"{name}.ir")
        weights = {k: cp.asarray(v) for k, v in random_weights(graph, 0).items()}
        found.append(Model(name, graph, random_inputs(graph, 0), weights))
    graph = og.parse(generate_llama(**LLAMA_LAUNCH))
    found.append(Model("llama_launch", graph, decode_inputs(graph), device_weights(graph)))
    return found


def _optgraph(model: Any, bound: bool) -> CallAndStream:
    import cupy as cp

    from optgraph.api.programs import cuda_program
    from optgraph.codegen.plan.in_place_outputs import in_place_candidates
    from optgraph.passes.manager import plan_memory_if_missing, run_pipeline
    from optgraph.reference.kernels import numpy_dtype

    graph = plan_memory_if_missing(run_pipeline(model.graph, "default"))
    program = cuda_program(graph, weights=model.weights)
    inputs = model.device_inputs()
    types = graph.value_types()
    in_place = in_place_candidates(graph)  # KV caches updated where they are
    out = {}
    for name in dict.fromkeys(graph.output_names()):
        source = in_place.get(name)
        t = types[name]
        out[name] = inputs[source] if source else cp.empty(t.shape, dtype=numpy_dtype(t.dtype))
    if bound:
        return program.bind(inputs, out), program.stream
    return (lambda: program.run(inputs, out=out)), program.stream


def _torch_graph(model: Any) -> CallAndStream:
    from benchmarks.harness.head_to_head_variants import torch_variant

    run, stream = torch_variant("graph")(model)
    return run, stream


def measure(call: Callable[[], Any], stream: Any, calls: int) -> tuple[float, float]:
    """(host µs per call, µs per step with the GPU's work included), see the module docstring."""
    for _ in range(20):  # warm-up: compile, capture, first replays
        call()
    stream.synchronize()
    start = time.perf_counter()
    for _ in range(calls):
        call()
    issued = time.perf_counter()
    stream.synchronize()
    done = time.perf_counter()
    return (issued - start) / calls * 1e6, (done - start) / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000, help="calls timed per row")
    parser.add_argument("--markdown", metavar="FILE", help="also write the table there")
    args = parser.parse_args(argv)
    from benchmarks.harness.timing import device_name, print_report

    builders: dict[str, Callable[[Any], CallAndStream]] = {
        "og-run": lambda m: _optgraph(m, bound=False),
        "og-step": lambda m: _optgraph(m, bound=True),
        "torch-graph": _torch_graph,
    }
    lines = [
        f"device: {device_name()}; date: {time.strftime('%Y-%m-%d')}; calls: {args.calls}",
        "",
        "| model | way | host µs/call | µs/step |",
        "|---|---|---|---|",
    ]
    for model in _models():
        for way, build in builders.items():
            try:
                call, stream = build(model)
                host, step = measure(call, stream, args.calls)
                lines.append(f"| {model.name} | {way} | {host:.1f} | {step:.1f} |")
            except Exception as err:  # noqa: BLE001 (a row that cannot run says why; others run)
                lines.append(f"| {model.name} | {way} | {type(err).__name__}: {err} | |")
            print(lines[-1], flush=True)
    text = "\n".join(lines) + "\n"
    print_report(text, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
