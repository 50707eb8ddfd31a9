"""Hybrid CPU+GPU: an MoE decode step whose routed experts stay in host memory and run on the CPU.

    python benchmarks/bench_split.py [--layers 4] [--hidden 2048] [--experts 16] [--expert-ffn 256]
        [--shared-ffn 1024] [--iters 20] [--repeats 5] [--markdown FILE] [--json FILE]
    python benchmarks/bench_split.py --dry-run     # no GPU: placement, splits, sync counts

The model (`moe_decode.py`): one token through `--layers` layers of attention over a KV cache and
an MoE FFN whose router picks 2 of `--experts` experts; the experts' weight tables are placed on
the `host`, so `split-backends` gathers the two picked experts' weights and runs them on the CPU
beside their tables; attention, router, shared expert, residuals and head run on the GPU. The same
split program (pipeline `SPLIT`) is run two ways, and the whole model on the GPU a third:

| variant | what runs |
|---|---|
| split (optgraph) | one CUDA graph: CPU nodes as host functions on the host stream, copies asynchronous from pinned memory, one host<->device wait per split boundary and direction |
| sync | the same lowered steps issued eagerly (no graph); at each split boundary the host synchronizes every stream, copies synchronously (`cudaMemcpy`) and runs the CPU nodes itself |
| all GPU | the experts' tables on the device too (pipeline `GPU`), one CUDA graph |

A step is one run with staged inputs and outputs copied back; each figure is the median over
`--repeats` timings of `--iters` back-to-back steps between CUDA events (the sync way returns
only after its last synchronous copy, so its events bracket the whole step too). Reported: ms per
step, split / sync speedup (target >= 1.35x), host<->device synchronizations per step (split:
cross-boundary waits in the lowered program, checked against `min_host_device_syncs` of the
placement; sync: the stream synchronizations and synchronous copies it makes), and the largest
difference between the variants' logits (split and sync run the same kernels and CPU functions:
equal bit for bit; all-GPU computes the experts on the GPU: within rounding).
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

from moe_decode import MoeSizes
from split_plan import describe, plan_graphs


def dry_run(args: argparse.Namespace) -> int:
    from optgraph.codegen.cuda_plan import lower_cuda

    source, split, _ = plan_graphs(args)
    facts = describe(source, split, lower_cuda(split))
    print(f"moe decode: {args.layers} layers, {args.experts} experts (top 2), host weights "
          f"{facts['host_weights']}")  # fmt: skip
    print(f"split: {facts['splits']} splits, {facts['cpu_ops']} CPU ops")
    print(
        f"host<->device syncs per step: split {facts['plan_syncs']} in the lowered program "
        f"({facts['ir_syncs']} in the IR; the placement's minimum is {facts['min_syncs']}); "
        f"sync way {facts['sync_way_syncs']}"
    )
    ok = facts["plan_syncs"] == facts["ir_syncs"] == facts["min_syncs"]
    print("syncs at the minimum: " + ("yes" if ok else "NO"))
    return 0 if ok else 1


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.dry_run:
        return dry_run(args)
    from split_sync_way import measure_all

    row = measure_all(args, *plan_graphs(args))
    text = table(row)
    print(text)
    if args.markdown:
        Path(args.markdown).write_text(text)
    if args.json:
        Path(args.json).write_text(json.dumps(row))
    return 0


def table(r: dict[str, Any]) -> str:
    speedup = r["sync"] / r["split"]
    title = (
        f"**{r['device']}, {datetime.date.today().isoformat()}**: MoE decode, {r['layers']} "
        f"layers, {r['experts']} experts (top 2, ffn {r['expert_ffn']}), host weights "
        f"{r['host_weights']}; {r['splits']} splits, {r['cpu_ops']} CPU ops."
    )
    head = (
        "| variant | ms / step | host<->device syncs / step (+1: the caller's wait) | vs sync "
        "| logits vs split (max rel. diff) |"
    )
    rows = [
        ("split (optgraph, one CUDA graph)", r["split"],
         f"{r['plan_syncs']} + 1 (placement's minimum {r['min_syncs']} + 1)",
         f"**{speedup:.2f}x**", "-"),
        ("sync (per-boundary waits, synchronous copies, no graph)", r["sync"],
         str(r["sync_way_counted"]), "1.00x", f"{r['sync_diff']:.1e}"),
        ("all GPU (one CUDA graph)", r["gpu"], "0 + 1", f"{r['sync'] / r['gpu']:.2f}x",
         f"{r['gpu_diff']:.1e}"),
    ]  # fmt: skip
    lines = [title, "", head, "|---|---|---|---|---|"]
    lines += [f"| {a} | {ms:.3f} | {c} | {d} | {e} |" for a, ms, c, d, e in rows]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    defaults = MoeSizes()
    for name in ("layers", "hidden", "heads", "kv_heads", "experts", "expert_ffn", "shared_ffn"):
        p.add_argument("--" + name.replace("_", "-"), type=int, default=getattr(defaults, name))
    p.add_argument("--vocab", type=int, default=defaults.vocab)
    p.add_argument("--cache-len", type=int, default=defaults.cache_len)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--markdown", metavar="FILE")
    p.add_argument("--json", metavar="FILE")
    p.add_argument("--dry-run", action="store_true", help="plan and count syncs only, no GPU")
    return p


if __name__ == "__main__":
    sys.exit(main())
