"""Several GPUs: tensor-parallel 2 against one GPU, pipeline-parallel 2 against weight streaming.

    python benchmarks/bench_multi_gpu.py [--cases tp,pp] [--layers 8] [--hidden 4096]
        [--heads 32] [--kv-heads 8] [--ffn 11008] [--vocab 32000] [--cache-len 1024]
        [--budget-ratio 1.5] [--iters 50] [--warmup 10] [--markdown FILE]
    python benchmarks/bench_multi_gpu.py --dry-run     # plan only (no GPU): bytes per device

The model is the realistic Llama decode step of issue #15 by default (`examples/gen_llama.py`:
hidden 4096, 8 layers, f16, batch 1, one new token, KV cache 1024), with well-scaled random
weights. Two cases, each timed in one run:

| case | one GPU | two GPUs |
|---|---|---|
| tp | the default pipeline, every weight resident | `tensor-parallel{ways=2},default` |
| pp | `--vram-budget` = resident weight bytes / `--budget-ratio`: weights streamed from pinned host memory (`plan-prefetch`) | `pipeline-parallel{stages=2},default`, each stage's weights resident on its GPU |

A step is one replay of the captured CUDA graph(s) with inputs and outputs bound as device arrays
(KV caches in place where the program allows), timed alone between CUDA events on stream 0 and
synchronized; the figure is the median over `--iters` steps after `--warmup`. Two GPUs: every
rank starts each replay right after a one-element NCCL all_reduce over both (a barrier), and a
step's time is the slower rank's, so a pipeline's last stage, which waits for the first, counts
the whole step. Outputs of one `run` of each program are
compared with the reference interpreter on the CPU (NMSE, bound 1e-6 for f16 per the issue).

Refuses, saying so, where CuPy is missing or fewer than 2 GPUs are present. Keep NVLink multicast
off: the runtime sets NCCL_NVLS_ENABLE=0 in every process it starts.
"""

from __future__ import annotations

import argparse
import datetime
import gc
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

from gen_llama import generate_llama

import optgraph as og
from benchmarks.bench_offload import fast_weights
from optgraph.analysis.segments import device_memory, format_size
from optgraph.ir.graph import Graph
from optgraph.passes.manager import format_pipeline, parse_pipeline, run_pipeline, with_vram_budget

NMSE_BOUND = {"f16": 1e-6, "bf16": 1e-4, "f32": 1e-7}
SPEEDUP_TARGET = {"tp": 1.7, "pp": 1.0}
UNPLANNED_DROPS = {"analyze-lifetimes", "plan-memory"}


def model(args: argparse.Namespace) -> Graph:
    text = generate_llama(
        layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads,
        ffn=args.ffn, vocab=args.vocab, dtype=args.dtype, batch=1, seq=1,
        cache_len=args.cache_len, mode="decode",
    )  # fmt: skip
    return og.parse(text)


def pipelines(source: Graph, case: str, ratio: float) -> tuple[str, str, int | None]:
    """(one-GPU pipeline, two-GPU pipeline, the one GPU's budget in bytes or None)."""
    if case == "tp":
        return "default", "tensor-parallel{ways=2},default", None
    resident = device_memory(og.compile(source, "default", "cpu").graph).resident_weights
    budget = int(resident / ratio)
    return with_vram_budget("default", str(budget)), "pipeline-parallel{stages=2},default", budget


def weight_bytes_per_device(graph: Graph) -> list[int]:
    per = [0] * graph.device_count()
    for w in graph.weights:
        for d in w.ann.devices:
            per[d] += w.type.nbytes
    return per


def dry_run(args: argparse.Namespace) -> int:
    source = model(args)
    print(f"model: weights {format_size(sum(w.type.nbytes for w in source.weights))}")
    for case in args.cases.split(","):
        single, multi, budget = pipelines(source, case, args.budget_ratio)
        graph = og.compile(source, multi, "cpu").graph
        per = ", ".join(format_size(b) for b in weight_bytes_per_device(graph))
        print(f"{case}: one GPU `{single}`; two GPUs `{multi}`: weights per device {per}")
        if budget is not None:
            print(f"  one GPU's budget {format_size(budget)}")
    return 0


def _time_single(program: Any, inputs: dict[str, Any], args: argparse.Namespace) -> float:
    import cupy as cp

    from benchmarks.harness.timing import median_us
    from optgraph.reference.kernels import numpy_dtype

    runtime = program._cuda_runner()
    dev_in = {k: cp.asarray(v) for k, v in inputs.items()}
    plan = runtime.lowered.main.plan
    in_place = {o: dev_in[i] for o, i in runtime.lowered.in_place.items() if i in dev_in}
    out = {
        n: in_place[n] if n in in_place else cp.empty(t.shape, numpy_dtype(t.dtype))
        for n, t in ((n, plan.types[n]) for n in dict.fromkeys(plan.outputs))
    }
    step = program.bind(dev_in, out, program.default_weights())
    step()  # eager, then captured
    return median_us(step, runtime.stream, args.iters, args.warmup) / 1000.0


def two_gpu_runner(source: Graph, pipeline: str, peer: bool = True) -> tuple[Any, Graph, str]:
    """(the runner, its graph, how it is planned): per-device arenas (the pipeline as given), or,
    where lowering refuses that plan, the same pipeline without its memory plan (one buffer per
    value), said in the table."""
    from optgraph.api.program_devices import MultiDeviceRunner
    from optgraph.codegen.cuda_source import CodegenError
    from optgraph.codegen.rank_programs import lower_ranks

    graph = og.compile(source, pipeline, "cpu").graph
    try:
        return (
            MultiDeviceRunner(source, lower_ranks(graph), peer_reduce=peer),
            graph,
            "per-device arenas",
        )
    except CodegenError as err:
        print(f"  the planned two-GPU program is refused ({err.message}); running it unplanned")
    kept = [p for p in parse_pipeline(pipeline) if p.name not in UNPLANNED_DROPS]
    graph = run_pipeline(source, format_pipeline(kept))
    runner = MultiDeviceRunner(source, lower_ranks(graph), peer_reduce=peer)
    return runner, graph, "unplanned (planned refused)"


def measure(case: str, source: Graph, args: argparse.Namespace) -> dict[str, Any]:
    from optgraph.reference.interpreter import nmse, random_inputs, run_reference

    single_pipeline, multi_pipeline, budget = pipelines(source, case, args.budget_ratio)
    inputs, weights = random_inputs(source), fast_weights(source)
    print(f"{case}: reference on the CPU ...", flush=True)
    want = run_reference(source, inputs, weights)
    row: dict[str, Any] = {"case": case, "budget": budget}

    def error(outputs: dict[str, Any]) -> float:
        return max(nmse(np.asarray(outputs[n]), want[n]) for n in source.output_names())

    single = og.compile(source, single_pipeline, target="cuda")
    single._default_weights = weights  # the same arrays, uploaded once
    row["nmse 1"] = error(single.run(inputs, weights))
    row["ms 1"] = _time_single(single, inputs, args)
    single.close()
    del single
    gc.collect()
    print(f"  one GPU: {row['ms 1']:.3f} ms", flush=True)
    for peer in (True, False) if args.nccl_too else (True,):
        runner, graph, row["plan 2"] = two_gpu_runner(source, multi_pipeline, peer)
        row["weights per device"] = weight_bytes_per_device(graph)
        key = "" if peer else " nccl"
        try:
            row["nmse 2" + key] = error(runner.run(inputs, weights))
            times = runner.time(inputs, weights, args.warmup, args.iters)
            row["ms 2" + key] = times.step_ms
        finally:
            runner.close()
        ranks = ", ".join(f"{t:.3f}" for t in times.rank_ms)
        print(f"  two GPUs{key}: {times.step_ms:.3f} ms (ranks alone {ranks})", flush=True)
    return row


def table(rows: list[dict[str, Any]], device: str, dtype: str) -> str:
    bound = NMSE_BOUND[dtype]
    lines = [
        f"**{device} x2, {datetime.date.today().isoformat()}**, NMSE bound {bound:g} ({dtype}).",
        "",
        (
            "| case | one GPU (ms) | two GPUs (ms) | speedup | target | weights per GPU "
            "| one GPU's budget | NMSE one | NMSE two | two-GPU memory | two GPUs, NCCL only (ms) |"
        ),
        "|" + "---|" * 11,
    ]
    for r in rows:
        speedup = r["ms 1"] / r["ms 2"]
        target = SPEEDUP_TARGET[r["case"]]
        per = " / ".join(format_size(b) for b in r["weights per device"])
        budget = "-" if r["budget"] is None else format_size(r["budget"])
        met = "met" if speedup >= target else "NOT met"
        nccl = f"{r['ms 2 nccl']:.3f}" if "ms 2 nccl" in r else "-"
        errors = [
            f"{e:.1e}" + (" (above)" if e > bound else "") for e in (r["nmse 1"], r["nmse 2"])
        ]
        lines.append(
            f"| {r['case']} | {r['ms 1']:.3f} | {r['ms 2']:.3f} | {speedup:.2f}x "
            f"| >= {target:g}x ({met}) | {per} | {budget} | {errors[0]} "
            f"| {errors[1]} | {r['plan 2']} | {nccl} |"
        )
    return "\n".join(lines) + "\n"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    p.add_argument("--cases", default="tp,pp", help="comma-separated: tp, pp")
    p.add_argument("--layers", type=int, default=8)
    p.add_argument("--hidden", type=int, default=4096)
    p.add_argument("--heads", type=int, default=32)
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--ffn", type=int, default=11008)
    p.add_argument("--vocab", type=int, default=32000)
    p.add_argument("--cache-len", type=int, default=1024)
    p.add_argument("--dtype", default="f16", choices=sorted(NMSE_BOUND))
    p.add_argument("--budget-ratio", type=float, default=1.5, help="pp: resident bytes / budget")
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument(
        "--nccl-too",
        action="store_true",
        help="also time the two GPUs with every collective through NCCL",
    )
    p.add_argument("--markdown", metavar="FILE")
    p.add_argument("--dry-run", action="store_true", help="plan only, no GPU")
    return p


def main() -> int:
    args = parser().parse_args()
    if args.dry_run:
        return dry_run(args)
    try:
        import cupy as cp

        gpus = int(cp.cuda.runtime.getDeviceCount())
    except Exception as err:  # noqa: BLE001 - no CuPy, no driver: refuse, saying why
        print(f"bench_multi_gpu: needs 2 GPUs and CuPy; none usable here ({err})")
        return 2
    if gpus < 2:
        print(f"bench_multi_gpu: needs 2 GPUs, found {gpus}; run it on a 2-GPU machine")
        return 2
    from benchmarks.harness.timing import device_name, print_report

    source = model(args)
    print(f"model: weights {format_size(sum(w.type.nbytes for w in source.weights))}", flush=True)
    rows = [measure(case, source, args) for case in args.cases.split(",")]
    text = table(rows, device_name(), args.dtype)
    print_report(text, args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
