"""A moe's experts on the CPU: the reference (each selected expert decoded, then NumPy) against
the CPU kernels on the stored blocks (`runtime/cpu/quantized_nodes.py`), for a whole moe node
and for the part `split-experts{cpu-experts=N}` leaves on the CPU.

    python benchmarks/bench_cpu_moe.py [--hidden 2048] [--ffn 5632] [--experts 8] [--k 2]
        [--tokens 1] [--cpu-experts 2] [--threads N] [--repeats 3]

Gate and up are q4_k, down q8_0 (H and F multiples of 256). Each row: the best of `--repeats`
wall-clock timings of one evaluation of the node (x and the logits seeded random), the largest
difference from the reference's value, and how many experts the tokens selected in the node.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from functools import partial
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optgraph as og
from optgraph.passes.manager import run_pipeline
from optgraph.passes.split_experts import expert_weights
from optgraph.reference.interpreter import evaluate_node, random_inputs, random_weights
from optgraph.reference.moe import route
from optgraph.runtime.cpu.quantized import default_threads
from optgraph.runtime.cpu.quantized_nodes import evaluate_quantized


def _graph(args: argparse.Namespace) -> og.Graph:
    t, h, f, e = args.tokens, args.hidden, args.ffn, args.experts
    graph = og.parse(
        f"graph moe {{\n  input %x : f32[{t},{h}]\n  input %logits : f32[{t},{e}]\n"
        f"  weight %gate : q4_k[{e},{f},{h}]\n  weight %up : q4_k[{e},{f},{h}]\n"
        f"  weight %down : q8_0[{e},{h},{f}]\n"
        f"  %y = moe(%x, %logits, %gate, %up, %down) {{k = {args.k}, norm_topk = true}} : "
        f"f32[{t},{h}]\n  output %y\n}}\n"
    )
    og.verify(graph)
    return graph


def _best(run: Callable[[], np.ndarray], repeats: int) -> tuple[float, np.ndarray]:
    times, value = [], np.zeros(0)
    for _ in range(repeats):
        start = time.perf_counter()
        value = run()
        times.append(time.perf_counter() - start)
    return min(times), value


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--hidden", type=int, default=2048)
    parser.add_argument("--ffn", type=int, default=5632)
    parser.add_argument("--experts", type=int, default=8)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--tokens", type=int, default=1)
    parser.add_argument("--cpu-experts", type=int, default=2)
    parser.add_argument("--threads", type=int, default=None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    source = _graph(args)
    inputs, weights = random_inputs(source, seed=1), random_weights(source, seed=2)
    split = run_pipeline(source, f"split-experts{{cpu-experts={args.cpu_experts}}}")
    pieces = expert_weights(source, split, weights)
    values = dict(inputs) | pieces
    ids, _ = route(inputs["logits"], args.k, "softmax_topk", True)
    cpu_parts = [n for n in split.nodes if n.op == "moe" and "experts" in n.attrs][1:]
    threads = args.threads or default_threads()
    print(
        f"moe: T = {args.tokens}, H = {args.hidden}, F = {args.ffn}, E = {args.experts}, "
        f"k = {args.k}; q4_k gate/up, q8_0 down; {threads} threads"
    )
    print("| node | experts selected | reference (ms) | CPU kernels (ms) | speedup | max diff |")
    print("|---|---|---|---|---|---|")
    for graph, node in [(source, source.nodes[0]), *((split, n) for n in cpu_parts)]:
        types = graph.value_types()
        operand_types = [types[o] for o in node.operands]
        operands = [values[o] for o in node.operands]
        lo, hi = node.attrs.get("experts", (0, args.experts))  # type: ignore[misc]
        selected = len({int(e) for e in ids.reshape(-1) if lo <= e < hi})
        reference = partial(evaluate_node, node, operands, operand_types)
        kernels = partial(evaluate_quantized, node, operands, operand_types, threads=threads)
        slow, want = _best(reference, args.repeats)
        fast, got = _best(kernels, args.repeats)
        diff = float(np.abs(got - want).max())
        print(
            f"| `%{node.name}` | {selected} of {hi - lo} | {slow * 1e3:.1f} | {fast * 1e3:.1f} "
            f"| {slow / fast:.1f}x | {diff:.1e} (of {float(np.abs(want).max()):.2f}) |"
        )


if __name__ == "__main__":
    main()
