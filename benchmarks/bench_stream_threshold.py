"""Calibrate `assign-streams{min-branch-us}` on the GPU: one stream against chains at thresholds.

    python benchmarks/bench_stream_threshold.py [--thresholds 5,10,20,40] [--iters 100]

For each model (the launch-bound Llama decode of the head-to-head suite and the examples), the
fused graph runs as one CUDA graph on one stream and with `assign-streams{policy=chains,
min-branch-us=T}` for each threshold T; the table gives the latency (median, CUDA events, host
issue included, as in bench_gpu.py), the streams and waits each threshold leaves, and
`1 stream / chains` (above 1: the streams pay). The default threshold should be one at which no
model is slower than one stream.
"""

from __future__ import annotations

import argparse
import datetime
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples"), str(ROOT / "benchmarks")]

import cupy as cp
from bench_gpu import FUSED_ONE_STREAM, PLAN, Model, _optgraph, median_us
from head_to_head import LLAMA_LAUNCH

import optgraph as og
from optgraph.passes.manager import FUSION, run_pipeline
from optgraph.runtime.reference import random_inputs, random_weights

EXAMPLES = ("moe_block", "inception_block", "gpt2_block", "llama_decode")


def chains(threshold: float) -> str:
    return (
        f"verify,dce,cse,{FUSION},assign-streams{{policy=chains,min-branch-us={threshold}}},"
        f"insert-sync,{PLAN}"
    )


def load_models() -> list[Model]:
    from gen_llama import generate_llama

    graphs = [("llama_launch", og.parse(generate_llama(**LLAMA_LAUNCH)))]
    graphs += [(n, og.parse_file(ROOT / "examples" / f"{n}.ir")) for n in EXAMPLES]
    return [Model(n, g, random_inputs(g, 0), random_weights(g, 0)) for n, g in graphs]


def schedule_shape(model: Model, pipeline: str) -> str:
    graph = run_pipeline(model.graph, pipeline)
    streams = len({n.stream for n in graph.nodes})
    waits = sum(1 for n in graph.nodes if n.op == "wait")
    return f"{streams}s/{waits}w"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--thresholds", default="5,10,20,40")
    parser.add_argument("--iters", type=int, default=100)
    parser.add_argument("--warmup", type=int, default=10)
    args = parser.parse_args(argv)
    thresholds = [float(t) for t in args.thresholds.split(",")]
    head = "| model | 1 stream (µs) | " + " | ".join(f"chains T={t:g} (µs)" for t in thresholds)
    head += " | " + " | ".join(f"1s / T={t:g}" for t in thresholds) + " |"
    lines = [f"date: {datetime.date.today()}", "", head, "|" + "---|" * (2 + 2 * len(thresholds))]
    for model in load_models():
        run, stream = _optgraph(FUSED_ONE_STREAM, True)(model)
        one = median_us(run, stream, args.iters, args.warmup)
        cells: list[str] = []
        ratios: list[str] = []
        for t in thresholds:
            pipeline = chains(t)
            run, stream = _optgraph(pipeline, True)(model)
            us = median_us(run, stream, args.iters, args.warmup)
            cells.append(f"{us:.1f} ({schedule_shape(model, pipeline)})")
            ratios.append(f"{one / us:.2f}×")
        lines.append(f"| {model.name} | {one:.1f} | " + " | ".join(cells + ratios) + " |")
        print(lines[-1], flush=True)
    props: Any = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    print(f"device: {name}")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
