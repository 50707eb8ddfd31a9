"""Where a decode step's time goes under PDL: each kernel's start, duration and the time it adds.

    python benchmarks/trace_decode_step.py [--only llama_launch,llama_real] [--variant all-on]
        [--steps 5] [--markdown FILE]

The step is `bench_decode_launches.build`'s (the bound step of a head-to-head decode model,
caches in place, one CUDA graph with Programmatic Dependent Launch, under one of that script's
`VARIANTS`). A few replays run under `torch.profiler` (CUPTI's kernel records: CuPy's and the
driver's launches are traced like PyTorch's), and the last replay's kernels are listed in issue
order, each with the node of the bound plan it runs (plan kernel steps and traced kernels are
zipped in order; a name mismatch aborts). With PDL a kernel starts during the one before it, so
its own duration overstates its cost; `adds` is how much later the step's last kernel end is
once it has run (its end minus the latest end before it): the column sums to the step. The
summary groups by the node's role (the node name without its layer prefix, `l3.attn` ->
`attn`), with the floor of the bytes each role reads from weights and inputs (the KV caches
too; the launch's planned read extents) at the copy bandwidth measured here. Needs CuPy, PyTorch and a GPU.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]


def traced_kernels(step: Any, stream: Any, steps: int) -> list[tuple[str, float, float]]:
    """(kernel name, start µs, duration µs) of every kernel of `steps` replays, in start order."""
    from torch.profiler import ProfilerActivity, profile

    for _ in range(10):
        step()
    stream.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        stream.synchronize()
    found = [
        (e.name, float(e.time_range.start), float(e.time_range.end - e.time_range.start))
        for e in prof.events()
        if e.device_type.name == "CUDA" and e.name.startswith("og_")
    ]
    return sorted(found, key=lambda k: k[1])


def role(node: str) -> str:
    """`l3.attn` -> `attn`; names without a layer prefix stay."""
    return re.sub(r"^l\d+\.", "", node)


Row = tuple[str, str, float, float, float, int]


def step_rows(plan: Any, kernels: list[tuple[str, float, float]]) -> list[Row]:
    """(node, kernel, start, duration, adds, bytes read from weights and inputs) of the last
    replay's kernels."""
    from optgraph.codegen.lower_cuda import KernelStep

    launches = [s for s in plan.steps if isinstance(s, KernelStep)]
    last = kernels[-len(launches) :]
    rows = []
    t0 = last[0][1]
    latest = t0
    for launch, (name, start, dur) in zip(launches, last):
        if name != launch.kernel:
            raise SystemExit(
                f"trace and plan disagree: {name} traced where {launch.kernel} was issued"
            )
        end = start + dur
        read = sum(e.size for e in launch.reads or () if e.space in ("weights", "input"))
        rows.append((launch.node, name, start - t0, dur, max(0.0, end - latest), read))
        latest = max(latest, end)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument(
        "--only", default="llama_launch,llama_real", help="models, by name (bench_decode_launches')"
    )
    parser.add_argument("--variant", default="all-on", help="a bench_decode_launches variant")
    parser.add_argument("--steps", type=int, default=5, help="replays traced (the last listed)")
    parser.add_argument("--markdown", metavar="FILE", help="also write the tables there")
    args = parser.parse_args(argv)
    from benchmarks import bench_decode_launches as bdl
    from benchmarks.harness.head_to_head import copy_bandwidth
    from benchmarks.harness.timing import device_name, print_report

    bandwidth = copy_bandwidth()
    head = f"device: {device_name()}; date: {time.strftime('%Y-%m-%d')}; variant {args.variant}"
    lines = [f"{head}; copy bandwidth {bandwidth / 1e12:.2f} TB/s"]
    for model in bdl.bench_models(args.only):
        step, stream, _, _ = bdl.build(
            model, bdl.VARIANTS[args.variant], bdl.PIPELINES.get(args.variant)
        )
        rows = step_rows(step.bound.variant.plan, traced_kernels(step, stream, args.steps))
        total = sum(r[4] for r in rows)
        lines += ["", f"**{model.name}**: {len(rows)} kernels, {total:.1f} µs", ""]
        lines += ["| node | kernel | start µs | duration µs | adds µs |", "|---|---|---|---|---|"]
        lines += [f"| {n} | {k} | {s:.1f} | {d:.1f} | {a:.1f} |" for n, k, s, d, a, _ in rows]
        by_role: dict[str, list[float]] = {}
        for node, _, _, dur, adds, read in rows:
            entry = by_role.setdefault(role(node), [0, 0.0, 0.0, 0.0])
            entry[0] += 1
            entry[1] += dur
            entry[2] += adds
            entry[3] += read / bandwidth * 1e6
        lines += [
            "",
            "| role | kernels | duration µs | adds µs | share | bytes floor µs | adds over floor |",
            "|---|---|---|---|---|---|---|",
        ]
        for name, (count, dur, adds, floor) in sorted(by_role.items(), key=lambda x: -x[1][2]):
            lines.append(
                f"| {name} | {count:.0f} | {dur:.1f} | {adds:.1f} | {adds / total:.1%} "
                f"| {floor:.1f} | {adds - floor:.1f} |"
            )
        del step
    text = "\n".join(lines) + "\n"
    print_report(text, args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
