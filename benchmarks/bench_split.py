"""Hybrid CPU+GPU: an MoE decode step whose routed experts stay in host memory and run on the CPU.

    python benchmarks/bench_split.py [--layers 4] [--hidden 2048] [--experts 16] [--expert-ffn 256]
        [--shared-ffn 1024] [--iters 20] [--repeats 5] [--variants gpu,calling-thread,...]
        [--host-caches] [--in-process] [--processes 1] [--markdown FILE] [--json FILE]
    python benchmarks/bench_split.py --dry-run     # no GPU: placement, splits, sync counts
    python benchmarks/bench_split.py --model qwen3moe --layers 4 --in-process
                                                   # transformers' Qwen3-MoE imported (below)
    python benchmarks/split_diagnose.py            # where a split step's time goes

The model (`harness/moe_decode.py`): one token through `--layers` layers of attention over a KV
cache and an MoE FFN whose router picks 2 of `--experts` experts; the experts' weight tables are
placed on the `host`, so `split-backends` gathers the two picked experts' weights and runs them on
the CPU beside their tables; attention, router, shared expert, residuals and head run on the GPU.
The split program (pipeline `SPLIT`) runs in each of the runtime's ways of running CPU nodes
(`LoweringOptions.cpu_nodes`) and the synchronous way; the whole model on the GPU is the floor:

| variant | what runs |
|---|---|
| gpu | the experts' tables on the device too (pipeline `GPU`), one CUDA graph |
| calling-thread | optgraph's default: the CPU nodes on the thread that called `run`, the GPU work between them as one CUDA graph per part, a host wait only where a CPU node needs a GPU result |
| graph | one CUDA graph; each CPU segment one host function (`cuLaunchHostFunc`) in it |
| graph-per-node | one CUDA graph; one host function per CPU node (the runtime's earlier way) |
| sync | the same lowered steps issued eagerly (no graph); at each split boundary the host synchronizes every stream, copies synchronously (`cudaMemcpy`) and runs the CPU nodes itself |

`--model qwen3moe` (`harness/moe_imported.py`, issue #34's hybrid MoE decode): transformers'
Qwen3-MoE at Qwen3-30B-A3B's sizes (hidden 2048, 128 experts of width 768, top 8) with `--layers`
layers, random weights, imported with `og.from_torch` (the experts raised to `moe`), every
layer's experts on the host and the CPU (`split-experts{cpu-moe=LAYERS}` before `split-backends`),
the rest on the GPU; the same variants and table. Each process imports the model once (f32: 2.4
GB of experts a layer), so `--in-process` saves that time.

How each is measured, the same way for all: every variant runs **alone in a fresh process**
(`--in-process` runs them one after another in this one: a program measured after another ran
up to 3x slower on the H100), built from the same graphs, weights (seed 0) and inputs; the KV
caches stay on the device (CuPy inputs, the updated caches written into device `out` arrays) and
only the token, position and length go in and the logits come out through the host, as in a
serving loop (`--host-caches`: the caches too as NumPy, 8 MB each way per step at the default
sizes, which then dominates every variant). `--warmup` steps first (eager run, capture,
replays), then `--repeats` timings of `--iters` back-to-back steps by the wall clock (each step
returns with its logits on the host, so the clock brackets all of its work); the figure is the
median. With `--processes K` each variant runs in K fresh processes, the variants' order rotated
each round, and the figure is the median of the K medians, their range in brackets: on a noisy
host one process can run a split step far slower than the next
(docs/results/2026-11-24-h100-run-signature.md), and one process a variant cannot tell that
from the variant. Reported: ms per step, speedup over sync (target >= 1.35x), host<->device
synchronizations per step (graph ways: the cross-boundary waits of the lowered program;
calling-thread: the host's waits plus the GPU parts launched after host work; both checked
against `min_host_device_syncs` of the placement; sync: what it counted), and the largest
difference between each variant's logits and the calling-thread's (the split ways and sync run
the same kernels and CPU functions: equal bit for bit; gpu computes the experts on the GPU:
within rounding).

The overlap of the calling-thread variant (issue #34: CPU expert work overlapped with GPU work):
after its timings, `--overlap-steps` (5) more steps with every call of its issue list timed
(`harness/split_timeline.py`: each GPU part's start and end by CUDA events on stream 0, each
CPU node and host wait by the host's clock, from the step's start), so the timed steps carry no
instrumentation. The line under the table gives, per step and then the median over the steps,
the time a CPU node runs while some GPU part executes (the intersection of the union of the GPU
parts' intervals with the union of the CPU nodes'), its share of the CPU nodes' time and of the
step, the GPU idle while the host works and the host waiting while the GPU works. With
`--processes K` it is the first process's. `split_diagnose.py` prints the same line under its
piece-by-piece table (section 4), with the table itself.
"""

from __future__ import annotations

import argparse
import datetime
import json
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np

from benchmarks.harness.moe_decode import MoeSizes
from benchmarks.harness.split_plan import describe, max_rel_diff, model_title, plan_graphs
from benchmarks.harness.split_timeline import overlap_line
from benchmarks.harness.timing import print_report

VARIANT_NAMES = ("gpu", "calling-thread", "graph", "graph-per-node", "sync")
SPLIT_WAYS = ("calling-thread", "graph", "graph-per-node")
LABELS = {
    "gpu": "all GPU (one CUDA graph)",
    "calling-thread": "split, CPU nodes on the calling thread (optgraph's default)",
    "graph": "split, one CUDA graph, a host function per CPU segment",
    "graph-per-node": "split, one CUDA graph, a host function per CPU node",
    "sync": "sync (per-boundary waits, synchronous copies, no graph)",
}


def dry_run(args: argparse.Namespace) -> int:
    from optgraph.codegen.lower_cuda import lower_cuda

    source, split, _ = plan_graphs(args)
    facts = describe(source, split, lower_cuda(split))
    print(f"{model_title(args)}, host weights {facts['host_weights']}")
    print(f"split: {facts['splits']} splits, {facts['cpu_ops']} CPU ops")
    print(
        f"host<->device syncs per step: split {facts['plan_syncs']} in the lowered program "
        f"({facts['ir_syncs']} in the IR; the placement's minimum is {facts['min_syncs']}); "
        f"calling thread {facts['calling_thread_syncs']}; sync way {facts['sync_way_syncs']}"
    )
    ok = facts["plan_syncs"] == facts["ir_syncs"] == facts["min_syncs"]
    ok = ok and facts["calling_thread_syncs"] == facts["min_syncs"]
    print("syncs at the minimum: " + ("yes" if ok else "NO"))
    return 0 if ok else 1


def run_variant(args: argparse.Namespace, argv: list[str], name: str) -> dict[str, Any]:
    """One variant's row: in this process, or alone in a child (`--only NAME`)."""
    if args.in_process:
        from benchmarks.harness.split_sync_way import measure_variant

        return measure_variant(args, name)
    cmd = [sys.executable, str(Path(__file__).resolve()), *argv, "--only", name]
    try:
        done = subprocess.run(
            cmd, check=False, capture_output=True, text=True, timeout=args.timeout
        )
    except subprocess.TimeoutExpired:
        return {"variant": name, "error": f"timed out after {args.timeout} s"}
    lines = [ln for ln in done.stdout.splitlines() if ln.startswith("{")]
    if done.returncode != 0 or not lines:
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        return {"variant": name, "error": f"exit {done.returncode}: " + " | ".join(tail)}
    row: dict[str, Any] = json.loads(lines[-1])
    return row


def combined(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant's row from its runs (one per process): a lone run's row as it is; else the
    first run's row with `ms` the median step time of each run, in run order; an error if any
    run failed."""
    failed = [r for r in runs if "error" in r]
    if failed:
        return failed[0]
    if len(runs) == 1:
        return runs[0]
    return runs[0] | {"ms": [float(np.median(r["ms"])) for r in runs]}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    if args.dry_run:
        return dry_run(args)
    if args.only:
        from benchmarks.harness.split_sync_way import measure_variant

        print(json.dumps(measure_variant(args, args.only)), flush=True)
        return 0
    names = [n for n in args.variants.split(",") if n]
    unknown = [n for n in names if n not in VARIANT_NAMES]
    if unknown:
        print(f"bench_split: unknown variant {unknown[0]!r} ({', '.join(VARIANT_NAMES)})")
        return 1
    runs: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
    for k in range(args.processes):
        for name in names[k % len(names) :] + names[: k % len(names)]:  # orders rotated
            start = time.perf_counter()
            r = run_variant(args, argv, name)
            runs[name].append(r)
            what = r.get("error") or f"{np.median(r['ms']):.3f} ms/step {r['ms']}"
            print(f"  {name}: {what} ({time.perf_counter() - start:.1f} s)", flush=True)
    rows = {name: combined(found) for name, found in runs.items()}
    source, split, _ = plan_graphs(args)
    from optgraph.codegen.lower_cuda import lower_cuda

    facts = describe(source, split, lower_cuda(split))
    text = table(args, facts, rows)
    split_syncs = [r["syncs"] for n, r in rows.items() if n in SPLIT_WAYS and "syncs" in r]
    at_minimum = all(n == facts["min_syncs"] for n in split_syncs)
    text += (
        "\nsplit ways' syncs at the placement's minimum: " + ("yes" if at_minimum else "NO") + "\n"
    )
    calling = rows.get("calling-thread", {})
    if "overlap" in calling:
        first = " (its first process)" if args.processes > 1 else ""
        text += (
            f"\ncalling-thread{first}: "
            + overlap_line(calling["overlap"], calling["overlap_steps"])
            + "\n"
        )
    print_report(text, args.markdown)
    if args.json:
        Path(args.json).write_text(json.dumps({"facts": facts, "rows": rows}))
    return 0 if at_minimum and all("error" not in r for r in rows.values()) else 1


def table(args: argparse.Namespace, facts: dict[str, Any], rows: dict[str, Any]) -> str:
    ok = {n: r for n, r in rows.items() if "error" not in r}
    ms = {n: float(np.median(r["ms"])) for n, r in ok.items()}
    ref = ok.get("calling-thread") or next(iter(ok.values()), None)
    device = next((r["device"] + ", " for r in ok.values() if "device" in r), "")
    caches = "host (NumPy in and out)" if args.host_caches else "device"
    title = (
        f"**{device}{datetime.date.today().isoformat()}**: {model_title(args)}, host weights "
        f"{facts['host_weights']}; {facts['splits']} splits, {facts['cpu_ops']} CPU ops; KV "
        f"caches on the {caches}; each variant alone in its process, median of {args.repeats} "
        f"x {args.iters} steps after {args.warmup} warm-up steps"
        + (
            f"; {args.processes} processes a variant (orders rotated): the median of their "
            "medians, their range in brackets."
            if args.processes > 1
            else "."
        )
    )
    head = (
        "| variant | ms / step | host<->device syncs / step (+1: the caller's wait) | vs sync "
        "| logits vs calling-thread (max rel. diff) |"
    )
    lines = [title, "", head, "|---|---|---|---|---|"]
    for name, r in rows.items():
        if "error" in r:
            lines.append(f"| {LABELS[name]} | - | - | - | {r['error']} |")
            continue
        if name == "gpu":
            syncs = "0 + 1"
        elif name == "sync":
            syncs = str(r["syncs"])
        else:
            syncs = f"{r['syncs']} + 1 (placement's minimum {facts['min_syncs']} + 1)"
        speed = f"**{ms['sync'] / ms[name]:.2f}x**" if "sync" in ms else "-"
        diff = "-"
        if ref is not None and r is not ref:
            diff = f"{max_rel_diff(np.array(r['logits']), np.array(ref['logits'])):.1e}"
        spread = f" ({min(r['ms']):.3f}–{max(r['ms']):.3f})" if args.processes > 1 else ""
        lines.append(f"| {LABELS[name]} | {ms[name]:.3f}{spread} | {syncs} | {speed} | {diff} |")
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    defaults = MoeSizes()
    for name in ("layers", "hidden", "heads", "kv_heads", "experts", "expert_ffn", "shared_ffn"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    p.add_argument(
        "--model", choices=("synthetic", "qwen3moe"), default="synthetic",
        help="synthetic: harness/moe_decode.py; qwen3moe: transformers' Qwen3-MoE imported "
        "(harness/moe_imported.py; --in-process saves importing it once a variant)",
    )  # fmt: skip
    for name in ("hidden", "experts", "expert_ffn"):
        p.add_argument(
            f"--qwen3moe-{name.replace('_', '-')}", dest=f"qwen3moe_{name}", type=int,
            help=f"--model qwen3moe: its {name.replace('_', ' ')} (default: Qwen3-30B-A3B's)",
        )  # fmt: skip
    p.add_argument(
        "--qwen3moe-cpu-experts", type=int, metavar="N",
        help="--model qwen3moe: the last N experts of each layer on the CPU, the rest on the GPU "
        "(split-experts{cpu-experts=N}; default: every expert on the CPU)",
    )  # fmt: skip
    p.add_argument(
        "--qwen3moe-expert-dtype", default="f32",
        choices=("f32", "q8_0", "q4_0", "q4_k", "q5_k", "q6_k"),
        help="--model qwen3moe: the expert stacks' stored type (random valid blocks)",
    )  # fmt: skip
    p.add_argument("--vocab", type=int, default=defaults.vocab)
    p.add_argument("--cache-len", type=int, default=defaults.cache_len)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--warmup", type=int, default=5)
    p.add_argument("--variants", default=",".join(VARIANT_NAMES))
    p.add_argument("--host-caches", action="store_true", help="KV caches as NumPy in and out")
    p.add_argument("--in-process", action="store_true", help="every variant in this process")
    p.add_argument(
        "--processes", type=int, default=1,
        help="fresh processes a variant, in rotated orders (the table: the median over them)",
    )  # fmt: skip
    p.add_argument("--timeout", type=float, default=120.0, help="seconds per variant's process")
    p.add_argument(
        "--overlap-steps", type=int, default=5, metavar="N",
        help="calling-thread: N more steps after the timings, piece by piece, for the overlap "
        "line (0: none)",
    )  # fmt: skip
    p.add_argument("--only", choices=VARIANT_NAMES, help=argparse.SUPPRESS)
    p.add_argument("--markdown", metavar="FILE")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--dry-run", action="store_true", help="plan and count syncs only, no GPU")
    return p


if __name__ == "__main__":
    sys.exit(main())
