"""Weight streaming on the GPU: Llama steps whose weights are 2-4x the budget.

    python benchmarks/bench_offload.py [--modes decode,prefill,balanced] [--ratio 3] [--layers 8]
        [--hidden 2048] [--ffn 5632] [--vocab 16384] [--prefill-seq 256] [--balanced-batch auto]
        [--variants ...] [--iters 5] [--repeats 3] [--markdown FILE] [--json FILE]
    python benchmarks/bench_offload.py --dry-run     # no GPU: budgets, segments, what each plan
                                                     # orders, and its estimated step

Modes (one generated Llama, f16):

- `decode`: batch 1, one new token, KV cache 512; `prefill`: `--prefill-seq` tokens. Both are
  copy-bound (compute is a tenth of the copying).
- `balanced`: a prefill of `--balanced-batch` sequences of `--balanced-seq` tokens (vocab
  `--balanced-vocab`, so the logits of every token stay a small copy), where compute and copying
  take about as long: the batch is chosen from the pinned bandwidth and the f16 GEMM rate
  measured in the same run (`auto`; on `--dry-run` from the last H100 run's figures, compute at
  `--compute-scale` times its roofline, or `--pinned-gbs`/`--f16-tflops`) so that the estimated
  compute is `--balance` (1.2) times the estimated copying: exactly equal, a depth-2 pipeline
  pays its fill and drain in full; a fifth more compute leaves the copy stream slack and still
  makes synchronous copies cost about as much as the compute.

The budget is what the step needs besides its weights (arena, inputs) + (weight bytes) /
`--ratio`: the weights are `ratio` times the room the budget leaves them. Every plan is told the
pinned bandwidth (`host-bandwidth`: measured, or `--pinned-gbs` on a dry run), with which it
weighs ring bytes against resident segments.

Each mode is planned once (`fuse`, `assign-streams{max-streams=2}`, `insert-sync`, memory plan),
then these programs are timed in one process:

| variant | what runs |
|---|---|
| resident | every weight on the device: the compute alone (the same kernels as below) |
| sync | `plan-prefetch{sync=true}`: each segment copied on its reader's stream right before it |
| depth N | `plan-prefetch{depth=N}`: copies on a copy stream into a ring of at least N segments, overlapping compute |
| depth 2 least-ring | `plan-prefetch{depth=2,ring-bytes=0}`: the ring neither grown nor traded for residents |
| depth 2 no-pdl | depth 2 lowered without PDL and merged launches (tells a runtime effect from a plan one) |
| depth 2 eager | depth 2 issued call by call on its streams, no CUDA graph (whether the graph's mapping of streams serializes copies) |
| copy alone | the depth-2 program's own weight copies (same pinned sources, offsets and sizes), back to back on one stream, no compute |

A step is one replay of the captured CUDA graph (inputs staged, outputs copied back); each figure
is the median over `--repeats` timings of `--iters` back-to-back replays between two CUDA events.
Pinned bandwidth is one 1 GiB host-to-device copy from pinned memory, timed the same way in the
same run. Reported: ms per step; overlap = depth-2 step / max(copy alone, resident) (target <=
1.10); depth 2 / sync (target <= 0.6 in the balanced mode); copy efficiency = copy-alone bandwidth
/ pinned bandwidth; whether every streamed program's outputs equal the resident program's bit for
bit; and the plan's own estimate of the depth-2 step (`offload_plan.estimate_step`, with this
run's bandwidth and GEMM rate, compute scaled by the resident step over its roofline estimate),
so a measured step far above it points at the runtime.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

from gen_llama import generate_llama

import optgraph as og
from benchmarks.harness.offload_plan import (
    NOMINAL_COMPUTE_SCALE,
    NOMINAL_F16,
    NOMINAL_PINNED,
    describe,
    estimate_step,
    plan_order,
    streamed_plans,
)
from benchmarks.harness.offload_timing import (
    gemm_rate,
    pinned_bandwidth,
    time_programs,
    time_replays,
)
from benchmarks.harness.timing import print_report
from optgraph.analysis.segments import format_size
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline
from optgraph.reference.interpreter import random_inputs
from optgraph.reference.kernels import numpy_dtype

PLAN = "verify,dce,cse,fuse,assign-streams{max-streams=2},insert-sync,analyze-lifetimes,plan-memory"
VARIANTS = {
    "sync": ",sync=true",
    "depth 1": ",depth=1",
    "depth 2": ",depth=2",
    "depth 2 least-ring": ",depth=2,ring-bytes=0",
    "depth 3": ",depth=3",
    "depth 2 no-pdl": ",depth=2",
    "depth 2 eager": ",depth=2",
}
# Lowering options per variant (the default elsewhere).
OPTIONS = {
    "depth 2 no-pdl": LoweringOptions(pdl=False, merge_launches=False),
    "depth 2 eager": LoweringOptions(use_graph=False),
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


def balanced_batch(
    args: argparse.Namespace, pinned: float, f16_flops: float, measured: bool = False
) -> int:
    """Sequences per balanced step: the resident program's compute takes `--balance` times as long
    as the depth-2 plan's copies at `pinned` bytes/s (`offload_plan.estimate_step`), scaled from
    a probe of a few sequences (compute grows with the tokens, the streamed bytes barely).

    `measured` (on a GPU): the probe's compute is timed, not estimated. The estimate prices
    compute at the f16 GEMM rate; on the H100 the prefill's other kernels made the resident step
    3x slower than that (batch 23 computed 32 ms against 10 ms of copying), far from balanced."""
    if args.balanced_batch != "auto":
        return int(args.balanced_batch)
    probe = 2 if measured else 8
    _, graphs, _ = plan_variants(args, "balanced", pinned, probe, ["depth 2"])
    copy = estimate_step(graphs["depth 2"], pinned, f16_flops).copy_ms
    if measured:
        import cupy as cp

        from optgraph.api.programs import cuda_program

        source = graphs["resident"]
        program = cuda_program(source, weights=fast_weights(source))
        program.run(random_inputs(source))  # eager, then captured
        program.run(random_inputs(source))
        compute = time_replays(cp, program, args)
        program.close()
    else:
        scale = args.compute_scale
        compute = estimate_step(graphs["resident"], pinned, f16_flops, scale).compute_ms
    return max(1, round(probe * args.balance * copy / compute))


def model_text(args: argparse.Namespace, mode: str, batch: int = 1) -> str:
    balanced = mode == "balanced"
    return generate_llama(
        layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads,
        ffn=args.ffn, vocab=args.balanced_vocab if balanced else args.vocab, dtype="f16",
        batch=batch if balanced else 1,
        seq={"decode": 1, "prefill": args.prefill_seq}.get(mode, args.balanced_seq),
        cache_len=512, mode="decode" if mode == "decode" else "prefill",
    )  # fmt: skip


def plan_variants(
    args: argparse.Namespace,
    mode: str,
    pinned: float,
    batch: int = 1,
    variants: list[str] | None = None,
) -> tuple[Graph, dict[str, Graph], int]:
    """The resident plan and each variant's streamed one (`offload_plan.streamed_plans`)."""
    source = og.parse(model_text(args, mode, batch))
    names = variants or args.variants.split(",")
    resident = run_pipeline(source, PLAN)
    graphs, budget = streamed_plans(resident, args.ratio, pinned, {n: VARIANTS[n] for n in names})
    return source, graphs, budget


def measure(args: argparse.Namespace, mode: str, pinned: float, f16_flops: float) -> dict[str, Any]:
    import cupy as cp


    batch = balanced_batch(args, pinned, f16_flops, measured=True) if mode == "balanced" else 1
    source, graphs, budget = plan_variants(args, mode, pinned, batch)
    print(
        f"{mode}: batch {batch}, weights {format_size(sum(w.type.nbytes for w in source.weights))}"
    )
    print("\n".join(describe(graphs, budget)), flush=True)
    inputs, weights = random_inputs(source), fast_weights(source)
    row: dict[str, Any] = {"mode": mode, "budget": budget, "batch": batch}
    timings, exact, _ = time_programs(cp, graphs, weights, inputs, args, OPTIONS)
    row.update(timings)
    row["exact"] = exact
    # The estimate with compute scaled to this run's resident step (the roofline's error).
    estimated = estimate_step(graphs["resident"], pinned, f16_flops).compute_ms
    row["compute_scale"] = row["resident"] / max(estimated, 1e-9)
    row["estimate"] = estimate_step(
        graphs["depth 2"], pinned, f16_flops, row["compute_scale"]
    ).step_ms
    return row


def _cell(row: dict[str, Any], name: str) -> str:
    return f"{row[name]:.2f} ms" if name in row else "-"


def table(rows: list[dict[str, Any]], pinned: float, f16_flops: float, device: str) -> str:
    names = [n for n in VARIANTS if any(n in r for r in rows)]
    head = (
        "| mode | budget | streamed / step | resident (compute) | copy alone | "
        + " | ".join(names)
        + " | depth 2 / max(copy, compute) | depth 2 / sync | depth 2 estimated "
        "| copy GB/s (of pinned) | exact |"
    )
    lines = [
        (
            f"**{device}, {datetime.date.today().isoformat()}**, pinned host-to-device "
            f"{pinned / 1e9:.1f} GB/s (1 GiB copy), f16 GEMM {f16_flops / 1e12:.0f} TFLOP/s "
            "(8192 rows at the FFN shape), same run."
        ),
        "",
        head,
        "|" + "---|" * (10 + len(names)),
    ]
    for r in rows:
        copy_bw = r["streamed_bytes"] / (r["copy alone"] * 1e-3)
        overlap = r["depth 2"] / max(r["copy alone"], r["resident"])
        mode = r["mode"] + (f" (batch {r['batch']})" if r["mode"] == "balanced" else "")
        lines.append(
            f"| {mode} | {format_size(r['budget'])} | {format_size(r['streamed_bytes'])} "
            f"| {r['resident']:.2f} ms | {r['copy alone']:.2f} ms | "
            + " | ".join(_cell(r, n) for n in names)
            + f" | {overlap:.3f} | "
            + (f"{r['depth 2'] / r['sync']:.3f}" if "sync" in r else "-")
            + f" | {r['estimate']:.2f} ms (compute x{r['compute_scale']:.2f}) "
            + f"| {copy_bw / 1e9:.1f} ({copy_bw / pinned:.0%}) "
            f"| {'yes' if r['exact'] else 'NO'} |"
        )
    return "\n".join(lines) + "\n"


def dry_run(args: argparse.Namespace, modes: list[str]) -> None:
    """Plans, what they order, and their estimated steps at nominal (or given) figures."""
    pinned, f16_flops, scale = args.pinned_gbs * 1e9, args.f16_tflops * 1e12, args.compute_scale
    print(
        f"estimates at {pinned / 1e9:.0f} GB/s pinned, {f16_flops / 1e12:.0f} TFLOP/s f16, "
        f"compute x{scale:g}"
    )
    for mode in modes:
        batch = balanced_batch(args, pinned, f16_flops) if mode == "balanced" else 1
        _, graphs, budget = plan_variants(args, mode, pinned, batch)
        print(f"{mode}" + (f" (batch {batch} x {args.balanced_seq} tokens)" if batch > 1 else ""))
        print("\n".join(describe(graphs, budget)))
        resident = estimate_step(graphs["resident"], pinned, f16_flops, scale).compute_ms
        sync = (
            estimate_step(graphs["sync"], pinned, f16_flops, scale).step_ms
            if "sync" in graphs
            else 0
        )
        for name, graph in graphs.items():
            if name == "resident":
                continue
            e = estimate_step(graph, pinned, f16_flops, scale)
            print(
                f"  {name:18s} estimated {e.step_ms:7.2f} ms: copy {e.copy_ms:.2f}, compute "
                f"{resident:.2f}, step / max {e.step_ms / max(e.copy_ms, resident):.3f}"
                + (f", step / sync {e.step_ms / sync:.3f}" if sync else "")
            )
        if "depth 2" in graphs and args.show_order:
            print("  depth 2 plan order:")
            print("\n".join(plan_order(graphs["depth 2"])))


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--ratio", type=int, default=3, help="resident weight bytes / budget")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=2048)
    p.add_argument("--heads", type=int, default=16)
    p.add_argument("--kv-heads", type=int, default=4)
    p.add_argument("--ffn", type=int, default=5632)
    p.add_argument("--vocab", type=int, default=16384)
    p.add_argument("--prefill-seq", type=int, default=256)
    p.add_argument("--balanced-seq", type=int, default=512)
    p.add_argument("--balanced-batch", default="auto", help="sequences, or auto")
    p.add_argument("--balanced-vocab", type=int, default=512)
    p.add_argument(
        "--balance", type=float, default=1.2, help="balanced mode: compute / copying (estimated)"
    )
    p.add_argument("--modes", default="decode,prefill,balanced")
    p.add_argument(
        "--variants",
        default="sync,depth 2,depth 2 least-ring,depth 3,depth 2 no-pdl,depth 2 eager",
    )
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--markdown", metavar="FILE")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--dry-run", action="store_true", help="plan only, no GPU")
    p.add_argument("--show-order", action="store_true", help="dry run: the depth-2 plan order")
    p.add_argument("--pinned-gbs", type=float, default=NOMINAL_PINNED / 1e9)
    p.add_argument("--f16-tflops", type=float, default=NOMINAL_F16 / 1e12)
    p.add_argument(
        "--compute-scale",
        type=float,
        default=NOMINAL_COMPUTE_SCALE,
        help="dry run: real compute / the roofline estimate (H100 balanced prefill: 1.6)",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    p = build_parser()
    args = p.parse_args(argv)
    modes = args.modes.split(",")
    unknown = [v for v in args.variants.split(",") if v not in VARIANTS]
    if unknown or not {"sync", "depth 2"} <= set(args.variants.split(",")):
        p.error(f"--variants: from {', '.join(VARIANTS)}, with sync and depth 2")
    if args.dry_run:
        dry_run(args, modes)
        return 0
    import cupy as cp

    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    pinned = pinned_bandwidth(cp)
    f16_flops = gemm_rate(cp, args)
    print(f"{device}: pinned H2D {pinned / 1e9:.1f} GB/s, f16 GEMM {f16_flops / 1e12:.0f} TFLOP/s")
    rows = [measure(args, mode, pinned, f16_flops) for mode in modes]
    text = table(rows, pinned, f16_flops, device)
    print_report(text, args.markdown)
    if args.json:
        payload = {"device": device, "pinned": pinned, "f16_flops": f16_flops, "rows": rows}
        Path(args.json).write_text(json.dumps(payload))
    return 0


if __name__ == "__main__":
    sys.exit(main())
