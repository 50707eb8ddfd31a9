"""Calibrate and check `assign-streams`' fork cost model on the GPU.

    python benchmarks/bench_stream_threshold.py [--iters 100] [--warmup 10] [--only NAMES]
        [--budget-s 200] [--json FILE]

Part 1, launch figures (the constants of `analysis/fork_cost.py`), from chains of `--chain` tiny
kernels (`neg` of 256 floats) in one CUDA graph each, PDL on:

- one stream: the time per kernel is the kernel latency (`kernel_latency`);
- the same chain alternating between two streams, so every edge is a record + wait: the extra
  time per edge is the wait latency (`wait_latency`);
- four such chains on four streams: the time per kernel of all four is the launch spacing
  while streams overlap (`kernel_spacing`); for reference, the four chains on one stream, in
  lockstep (consecutive independent kernels: merged launches) and one after the other.

Part 2, models: the launch-bound Llama decode of the head-to-head suite (hidden 512, 8 layers),
the realistic one (hidden 4096, 8 layers, weights drawn on the device), then the examples
`moe_block`, `inception_block`, `gpt2_block`, `llama_decode`, each fused and run as one CUDA
graph: on one stream (`assign-streams{max-streams=1}`) and with each variant of `VARIANTS`
(the default first). Variants that give the same program as an earlier one are not run again.
Each cell: median latency (CUDA events, host issue included, as in bench_gpu.py), streams and
waits, kernel launches after merging; `1s / x` above 1 means x is faster than one stream.
Models start after `--budget-s` seconds are skipped (the GPU machine's time is scarce).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

import optgraph as og
from benchmarks.harness.gpu_variants import FUSED_ONE_STREAM, PLAN, Model
from benchmarks.harness.timing import device_name, median_us
from optgraph.api.programs import cuda_program
from optgraph.codegen.lower_cuda import GemmStep, KernelStep, lower_cuda
from optgraph.ir.graph import Graph
from optgraph.ir.printer import print_graph
from optgraph.passes.manager import FUSION, run_pipeline
from optgraph.reference.interpreter import random_inputs, random_weights
from optgraph.reference.kernels import numpy_dtype

EXAMPLES = ("moe_block", "inception_block", "gpt2_block", "llama_decode")
# (column, assign-streams options); the default first
VARIANTS = (
    ("default", ""),
    ("no merge in model", "merged-launches=false"),
    ("wait-us=2", "wait-us=2"),
    ("wait-us=1", "wait-us=1"),
    ("wait-us=3", "wait-us=3"),  # the next calibration step (docs/benchmarks.md, fork cost)
    ("T=5 (old default)", "min-branch-us=5"),
    ("every chain", "min-branch-us=0"),
)


def pipeline(options: str | None) -> str:
    """The fused pipeline with `assign-streams{options}` (None: one stream)."""
    if options is None:
        return FUSED_ONE_STREAM
    return f"verify,dce,cse,{FUSION},assign-streams{{{options}}},insert-sync,{PLAN}"


def time_graph(graph: Graph, model: Model, iters: int, warmup: int) -> float:
    """Median latency (us) of one scheduled, planned graph as one CUDA graph."""
    import cupy as cp

    program = cuda_program(graph, weights=model.weights)
    try:
        inputs = model.device_inputs()
        types = graph.value_types()
        out = {
            name: cp.empty(types[name].shape, dtype=numpy_dtype(types[name].dtype))
            for name in dict.fromkeys(graph.output_names())
        }
        return median_us(lambda: program.run(inputs, out=out), program.stream, iters, warmup)
    finally:
        program.close()


def shape_of(graph: Graph) -> str:
    """`streams s / waits w / launches` of a scheduled graph (launches after merging; cuBLAS
    calls counted as launches too)."""
    steps = lower_cuda(graph).steps
    launches = sum(isinstance(s, KernelStep | GemmStep) for s in steps)
    streams = len({n.stream for n in graph.nodes})
    waits = sum(1 for n in graph.nodes if n.op == "wait")
    return f"{streams}s/{waits}w/{launches}L"


# -- part 1: launch figures ----------------------------------------------------------------------


def chain_text(length: int, chains: int, streams: Callable[[int, int], int], lockstep: bool) -> str:
    """`chains` chains of `length` neg kernels reading one input; node (c, i) on streams(c, i)."""
    order = (
        [(c, i) for i in range(length) for c in range(chains)]
        if lockstep
        else [(c, i) for c in range(chains) for i in range(length)]
    )
    lines = ["graph chains {", "  input %x : f32[256]"]
    for c, i in order:
        src = "%x" if i == 0 else f"%c{c}.{i - 1}"
        lines.append(f"  %c{c}.{i} = neg({src}) : f32[256] !{{stream = {streams(c, i)}}}")
    lines.append("  output " + ", ".join(f"%c{c}.{length - 1}" for c in range(chains)))
    lines.append("}")
    return "\n".join(lines)


def launch_figures(length: int, iters: int, warmup: int) -> tuple[list[str], dict[str, float]]:
    cases = {
        "chain, one stream": (1, lambda c, i: 0, False),
        "chain, alternating two streams": (1, lambda c, i: i % 2, False),
        "4 chains, four streams": (4, lambda c, i: c, True),
        "4 chains, one stream, lockstep (merged launches)": (4, lambda c, i: 0, True),
        "4 chains, one stream, one after the other": (4, lambda c, i: 0, False),
    }
    times: dict[str, float] = {}
    lines = ["| case | kernels | launches | µs | µs per kernel |", "|---|---|---|---|---|"]
    for name, (chains, streams, lockstep) in cases.items():
        graph = og.parse(chain_text(length, chains, streams, lockstep))
        graph = run_pipeline(graph, f"insert-sync,{PLAN}")
        model = Model(name, graph, random_inputs(graph, 0), {})
        us = times[name] = time_graph(graph, model, iters, warmup)
        kernels = chains * length
        launches = shape_of(graph).split("/")[-1]
        lines.append(f"| {name} | {kernels} | {launches} | {us:.1f} | {us / kernels:.2f} |")
        print(lines[-1], flush=True)
    one = times["chain, one stream"]
    alternating = times["chain, alternating two streams"]
    four = times["4 chains, four streams"]
    lines += [
        "",
        f"kernel latency ≈ {one / length:.2f} µs (one stream, per kernel); "
        + f"wait latency ≈ {(alternating - one) / (length - 1):.2f} µs (per cross-stream edge); "
        + f"spacing ≈ {four / (4 * length):.2f} µs (four streams, per kernel of all)",
    ]
    return lines, times


# -- part 2: models ------------------------------------------------------------------------------


def load_models(only: set[str] | None) -> list[tuple[str, Callable[[], Model]]]:
    from gen_llama import generate_llama

    from benchmarks.harness.head_to_head import (
        LLAMA_LAUNCH,
        LLAMA_REAL,
        decode_inputs,
        device_weights,
    )

    def llama(name: str, spec: dict[str, Any]) -> Callable[[], Model]:
        def make() -> Model:
            graph = og.parse(generate_llama(**spec))
            return Model(name, graph, decode_inputs(graph), device_weights(graph))

        return make

    def example(name: str) -> Callable[[], Model]:
        def make() -> Model:
            graph = og.parse_file(ROOT / "examples" / f"{name}.ir")
            return Model(name, graph, random_inputs(graph, 0), random_weights(graph, 0))

        return make

    makers = [("llama_launch", llama("llama_launch", LLAMA_LAUNCH))]
    makers.append(("llama_real", llama("llama_real", LLAMA_REAL)))
    makers += [(n, example(n)) for n in EXAMPLES]
    return [(n, m) for n, m in makers if only is None or n in only]


def model_row(model: Model, iters: int, warmup: int) -> tuple[str, dict[str, Any]]:
    one_graph = run_pipeline(model.graph, pipeline(None))
    one = time_graph(one_graph, model, iters, warmup)
    seen: dict[str, tuple[str, float]] = {print_graph(one_graph): ("1 stream", one)}
    cells: list[str] = []
    record: dict[str, Any] = {"1 stream": {"us": one, "shape": shape_of(one_graph)}}
    for column, options in VARIANTS:
        graph = run_pipeline(model.graph, pipeline(options))
        text = print_graph(graph)
        if text in seen:
            same, us = seen[text]
            cells.append(f"= {same}")
        else:
            us = time_graph(graph, model, iters, warmup)
            seen[text] = (column, us)
            cells.append(f"{us:.1f} ({shape_of(graph)}) {one / us:.2f}×")
        record[column] = {"us": us, "shape": shape_of(graph)}
    row = f"| {model.name} | {one:.1f} ({shape_of(one_graph)}) | " + " | ".join(cells) + " |"
    return row, record


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--chain", type=int, default=64, help="kernels per chain in part 1")
    parser.add_argument("--only", default=None, help="comma-separated model names")
    parser.add_argument("--budget-s", type=float, default=200.0)
    parser.add_argument("--json", default=None, help="write the figures as JSON here")
    args = parser.parse_args(argv)
    import cupy as cp  # after the arguments: --help works where CuPy is missing

    began = time.monotonic()
    device = device_name()
    lines = [f"device: {device}, date: {datetime.date.today()}", ""]
    figures, chain_us = launch_figures(args.chain, args.iters, args.warmup)
    lines += figures
    head = "| model | 1 stream (µs) | " + " | ".join(f"{c} (µs)" for c, _ in VARIANTS) + " |"
    lines += ["", head, "|" + "---|" * (2 + len(VARIANTS))]
    print("\n".join(lines[-3:]), flush=True)
    records: dict[str, Any] = {}
    only = set(args.only.split(",")) if args.only else None
    for name, make in load_models(only):
        if time.monotonic() - began > args.budget_s:
            lines.append(f"| {name} | skipped: over the {args.budget_s:.0f} s budget |")
            continue
        row, records[name] = model_row(make(), args.iters, args.warmup)
        lines.append(row)
        print(row, flush=True)
        cp.get_default_memory_pool().free_all_blocks()
    lines.append(f"\n(total {time.monotonic() - began:.0f} s)")
    print("\n" + "\n".join(lines))
    if args.json:
        out = {"device": device, "chains_us": chain_us, "chain": args.chain, "models": records}
        Path(args.json).write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
