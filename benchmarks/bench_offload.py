"""Weight streaming on the GPU: Llama decode and prefill steps whose weights are 2-4x the budget.

    python benchmarks/bench_offload.py [--ratio 3] [--layers 8] [--hidden 2048] [--ffn 5632]
        [--vocab 32000] [--prefill-seq 256] [--iters 5] [--repeats 3] [--markdown FILE]
    python benchmarks/bench_offload.py --dry-run        # plan only (no GPU): budgets and segments

For each mode (decode: batch 1, one new token, KV cache 512; prefill: `--prefill-seq` tokens) the
model is planned once (`fuse`, `assign-streams{max-streams=2}`, `insert-sync`, memory plan), the
budget is set to (resident weight bytes) / `--ratio`, and these programs are timed in one process:

| variant | what runs |
|---|---|
| resident | every weight on the device: the compute alone (the same kernels as below) |
| sync | `plan-prefetch{sync=true}`: each segment copied on its reader's stream right before it |
| depth N | `plan-prefetch{depth=N}`: copies on a copy stream into N slots, overlapping compute |
| copy alone | the depth-2 program's own weight copies (same pinned sources, slots and sizes), back to back on one stream, no compute |

A step is one replay of the captured CUDA graph (inputs staged, outputs copied back); each figure
is the median over `--repeats` timings of `--iters` back-to-back replays between two CUDA events.
Pinned bandwidth is one 1 GiB host-to-device copy from pinned memory, timed the same way in the
same run. Reported: ms per step; overlap = depth-2 step / max(copy alone, resident) (target <=
1.10); copy efficiency = copy-alone bandwidth / pinned bandwidth (target >= 0.80); whether every
streamed program's outputs equal the resident program's bit for bit.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import json
import statistics
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

from gen_llama import generate_llama

import optgraph as og
from optgraph.analysis.segments import device_memory, format_size
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline
from optgraph.runtime.reference import random_inputs
from optgraph.runtime.reference_kernels import numpy_dtype

PLAN = "verify,dce,cse,fuse,assign-streams{max-streams=2},insert-sync,analyze-lifetimes,plan-memory"
VARIANTS = {
    "sync": ",sync=true",
    "depth 1": ",depth=1",
    "depth 2": ",depth=2",
    "depth 3": ",depth=3",
}


def fast_weights(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Well-scaled random weights, quickly (uniform; norm weights near 1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for w in graph.weights:
        values = rng.random(w.type.shape, dtype=np.float32) - np.float32(0.5)
        if w.name.endswith("norm"):
            values = 1 + 0.1 * values
        elif w.type.rank == 2:
            values *= np.float32(2 / np.sqrt(w.type.shape[0]))
        out[w.name] = values.astype(numpy_dtype(w.type.dtype))
    return out


def plan_variants(args: argparse.Namespace, mode: str) -> tuple[Graph, dict[str, Graph], int]:
    seq = 1 if mode == "decode" else args.prefill_seq
    text = generate_llama(
        layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads,
        ffn=args.ffn, vocab=args.vocab, dtype="f16", batch=1, seq=seq, cache_len=512, mode=mode,
    )  # fmt: skip
    source = og.parse(text)
    resident = run_pipeline(source, PLAN)
    memory = device_memory(resident)
    budget = memory.resident_weights // args.ratio
    graphs = {"resident": resident}
    for name, options in VARIANTS.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            graphs[name] = run_pipeline(resident, f"plan-prefetch{{budget={budget}{options}}}")
    return source, graphs, budget


def describe(graphs: dict[str, Graph], budget: int) -> list[str]:
    lines = []
    for name, g in graphs.items():
        m = device_memory(g)
        segments = {w.ann.segment for w in g.weights if w.ann.segment is not None}
        lines.append(
            f"  {name:9s} peak {format_size(m.peak):>11s} (budget {format_size(budget)}), "
            f"resident {format_size(m.resident_weights)}, "
            f"streamed {format_size(m.streamed_weights)}"
            f" in {len(segments)} segments, slots {format_size(m.slots)}"
        )
    return lines


def _time(cp: Any, stream: Any, launch: Any, iters: int, repeats: int) -> float:
    """Median ms of one `launch()` over `repeats` timings of `iters` back-to-back launches."""
    times = []
    for _ in range(repeats):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record(stream)
        for _ in range(iters):
            launch()
        end.record(stream)
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / iters)
    return statistics.median(times)


def pinned_bandwidth(cp: Any, nbytes: int = 1 << 30) -> float:
    host = cp.cuda.alloc_pinned_memory(nbytes)
    np.frombuffer(host, np.uint8, nbytes)[:] = 1
    dev = cp.cuda.alloc(nbytes)
    stream = cp.cuda.Stream(non_blocking=True)
    rt = cp.cuda.runtime
    copy = lambda: rt.memcpyAsync(dev.ptr, host.ptr, nbytes, 1, stream.ptr)
    copy()
    stream.synchronize()
    ms = _time(cp, stream, copy, 3, 3)
    return nbytes / (ms * 1e-3)


def _time_replays(cp: Any, program: Any, args: argparse.Namespace) -> float:
    """ms per replay of the program's captured CUDA graph."""
    exec_ = program._cache.get(program.last_key).exec
    stream = program.stream
    launch = cp.cuda.runtime.graphLaunch
    return _time(cp, stream, lambda: launch(exec_, stream.ptr), args.iters, args.repeats)


def _time_copies(cp: Any, program: Any, args: argparse.Namespace) -> tuple[int, float]:
    """(bytes, ms) of the program's own prefetch copies, back to back on one stream."""
    from optgraph.codegen.cuda_plan import CopyStep

    (variant,) = program._variants.values()
    prefetched = {n.name for n in variant.graph.nodes if n.op == "prefetch"}
    copies = [
        (variant.pointer(s.dst, {}), variant.pointer(s.src, {}), s.nbytes)
        for s in variant.plan.steps
        if isinstance(s, CopyStep) and s.node in prefetched
    ]
    side = cp.cuda.Stream(non_blocking=True)
    memcpy = cp.cuda.runtime.memcpyAsync

    def copy_all() -> None:
        for dst, src, n in copies:
            memcpy(dst, src, n, 1, side.ptr)

    return sum(c[2] for c in copies), _time(cp, side, copy_all, args.iters, args.repeats)


def measure(args: argparse.Namespace, mode: str) -> dict[str, Any]:
    import cupy as cp

    from optgraph.program import cuda_program

    source, graphs, budget = plan_variants(args, mode)
    print(f"{mode}: weights {format_size(sum(w.type.nbytes for w in source.weights))}")
    print("\n".join(describe(graphs, budget)), flush=True)
    inputs, weights = random_inputs(source), fast_weights(source)
    row: dict[str, Any] = {"mode": mode, "budget": budget}
    reference_out = None
    exact = True
    for name, graph in graphs.items():
        program = cuda_program(graph, weights=weights)
        program.run(inputs)  # eager, then captured
        out = program.run(inputs)  # a replay
        if reference_out is None:
            reference_out = out
        exact &= all(out[k].tobytes() == reference_out[k].tobytes() for k in out)
        row[name] = _time_replays(cp, program, args)
        if name == "depth 2":
            row["streamed_bytes"], row["copy alone"] = _time_copies(cp, program, args)
        program.close()
        del program
        gc.collect()
        print(f"  {name}: {row[name]:.3f} ms", flush=True)
    row["exact"] = exact
    return row


def table(rows: list[dict[str, Any]], pinned: float, device: str) -> str:
    head = (
        "| mode | budget | streamed / step | resident (compute) | copy alone | sync | depth 1 "
        "| depth 2 | depth 3 | depth 2 / max(copy, compute) | copy GB/s (of pinned) | exact |"
    )
    lines = [
        (
            f"**{device}, {datetime.date.today().isoformat()}**, pinned host-to-device "
            f"{pinned / 1e9:.1f} GB/s (1 GiB copy, same run)."
        ),
        "",
        head,
        "|" + "---|" * 12,
    ]
    for r in rows:
        copy_bw = r["streamed_bytes"] / (r["copy alone"] * 1e-3)
        overlap = r["depth 2"] / max(r["copy alone"], r["resident"])
        lines.append(
            f"| {r['mode']} | {format_size(r['budget'])} | {format_size(r['streamed_bytes'])} "
            f"| {r['resident']:.2f} ms | {r['copy alone']:.2f} ms | {r['sync']:.2f} ms "
            f"| {r['depth 1']:.2f} ms | {r['depth 2']:.2f} ms | {r['depth 3']:.2f} ms "
            f"| {overlap:.3f} | {copy_bw / 1e9:.1f} ({copy_bw / pinned:.0%}) "
            f"| {'yes' if r['exact'] else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ratio", type=int, default=3, help="resident weight bytes / budget")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=5632)
    p.add_argument("--vocab", type=int, default=16384)
    p.add_argument("--prefill-seq", type=int, default=256)
    p.add_argument("--modes", default="decode,prefill")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--markdown", metavar="FILE")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--dry-run", action="store_true", help="plan only, no GPU")
    args = p.parse_args()
    modes = args.modes.split(",")
    if args.dry_run:
        for mode in modes:
            _, graphs, budget = plan_variants(args, mode)
            print(mode)
            print("\n".join(describe(graphs, budget)))
        return 0
    import cupy as cp

    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    pinned = pinned_bandwidth(cp)
    print(f"{device}: pinned H2D {pinned / 1e9:.1f} GB/s", flush=True)
    rows = [measure(args, mode) for mode in modes]
    text = table(rows, pinned, device)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps({"device": device, "pinned": pinned, "rows": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
