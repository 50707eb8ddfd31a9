"""tensor-parallel and pipeline-parallel on the CPU: what the split graphs compute and hold.

    python benchmarks/bench_parallel_passes.py [--skip-accuracy]

Table 1, per Llama-like model of tests/support/parallel_models.py and per pipeline: the worst
NMSE of any output against the original graph, (a) in the reference interpreter (weights cut by
`shard_weights`) and (b) after the whole default pipeline (fused, scheduled, planned per device) on
the planned executor over the emulated devices (two seeded interleavings), with the races
check-races finds in its device arenas; 0 means bit-identical.

Table 2, for an 8-layer decode step (hidden 4096, 32 heads, 8 KV heads, ffn 11008, vocab 32000,
f16, 1024-row caches): weight MiB per device, collectives and the bytes of their results per step,
estimated stage times (pipeline-parallel, H100 roofline), and the pass's time (verification
included).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the models come from tests/

import optgraph as og
from optgraph.analysis.races import find_races
from optgraph.analysis.schedule_estimate import node_seconds, profile_named
from optgraph.codegen.plan.lower_arena import lower
from optgraph.ir.graph import Graph
from optgraph.passes.manager import plan_memory_if_missing, run_pipeline
from optgraph.passes.tensor_parallel import join_outputs, piece_layout, shard_inputs, shard_weights
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from optgraph.runtime.cpu.planned_executor import execute
from tests.cli.test_examples import gen_llama
from tests.support.parallel_models import PARALLEL_MODELS

PIPELINES = ("tensor-parallel{ways=2}", "tensor-parallel{ways=4}", "pipeline-parallel{stages=2}")
COLLECTIVES = ("all_reduce", "all_gather", "send")


def _worst(want: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> float:
    return max(
        0.0
        if got[k].tobytes() == v.tobytes()
        else nmse(got[k].astype(np.float64), v.astype(np.float64))
        for k, v in want.items()
    )


def accuracy_table() -> None:
    print(f"{'model':24s} {'pipeline':30s} {'reference':>10s} {'default':>10s} {'races':>6s}")
    for name, graph in PARALLEL_MODELS.items():
        inputs, weights = random_inputs(graph, 0), random_weights(graph, 0)
        want = run_reference(graph, inputs, weights)
        for pipeline in PIPELINES:
            split = run_pipeline(graph, pipeline)
            layout = piece_layout(graph, split)  # weights and KV caches cut, caches joined
            pieces = shard_weights(graph, split, weights, layout)
            cut = shard_inputs(graph, split, inputs, layout)
            alone_outputs = run_reference(split, cut, pieces)
            alone = _worst(want, join_outputs(graph, split, alone_outputs, layout))
            planned = plan_memory_if_missing(run_pipeline(split, "default"))
            program = lower(planned)
            runs = [execute(program, cut, pieces, seed=s).outputs for s in (0, 1)]
            full = max(_worst(want, join_outputs(graph, split, r, layout)) for r in runs)
            races = len(find_races(planned))
            print(f"{name:24s} {pipeline:30s} {alone:10.3g} {full:10.3g} {races:6d}")


def _weight_mib(graph: Graph) -> list[float]:
    return [
        sum(w.type.nbytes for w in graph.weights if d in w.ann.devices) / 2**20
        for d in range(graph.device_count())
    ]


def decode_step_table() -> None:
    config = {"layers": 8, "hidden": 4096, "heads": 32, "kv_heads": 8, "ffn": 11008}
    config |= {"vocab": 32000, "dtype": "f16", "cache_len": 1024}
    graph = og.parse(gen_llama.generate_llama(**config))
    total = sum(w.type.nbytes for w in graph.weights) / 2**20
    print(f"\n8-layer decode step, {len(graph.nodes)} nodes, {total:.1f} MiB of weights")
    seconds = node_seconds(graph, profile_named("h100"))
    for pipeline in (*PIPELINES, "tensor-parallel{ways=8}", "pipeline-parallel{stages=4}"):
        start = time.perf_counter()
        split = run_pipeline(graph, pipeline)
        elapsed = time.perf_counter() - start
        counts = {op: sum(1 for n in split.nodes if n.op == op) for op in COLLECTIVES}
        moved = sum(n.type.nbytes for n in split.nodes if n.op in COLLECTIVES and n.type)
        line = (
            f"{pipeline:30s} weight MiB/device {[round(m, 1) for m in _weight_mib(split)]}; "
            f"collectives {counts} ({moved / 2**20:.2f} MiB of results); pass {elapsed:.3f} s"
        )
        if pipeline.startswith("pipeline"):
            device = {n.name: n.devices[0] for n in split.nodes}
            stages = [0.0] * split.device_count()
            for node, s in zip(graph.nodes, seconds):
                stages[device[node.name]] += s
            line += "; est. stage µs " + ", ".join(f"{t * 1e6:.0f}" for t in stages)
        print(line)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--skip-accuracy", action="store_true", help="only the decode-step table")
    args = parser.parse_args()
    if not args.skip_accuracy:
        accuracy_table()
    decode_step_table()


if __name__ == "__main__":
    main()
