"""Inside a decode step's kernels under PDL: when each block starts, when its wait returns, the
phases of a one-row product, and when it ends, read from the GPU's own clock.

    python benchmarks/kernel_phases.py [--only llama_launch,llama_real] [--variant all-on]
        [--layer 1] [--markdown FILE]

`benchmarks/trace_decode_step.py` (CUPTI) sees a kernel as one interval; under PDL a kernel
starts during the one before it, so it cannot tell the wait from the work. Here the step's CUDA
source is instrumented before it is compiled (`instrument`): thread 0 of every block writes
`%globaltimer` (ns) at the block's start, when its `griddepcontrol.wait` returns, at the phases
of a one-row product (the norm statistics done, the row staged, the product and its warp sums
done, the block sums done) and at its end, into a device array indexed by `%gridid` (one id per
kernel node of the captured graph) and block. One replay after zeroing it gives one step:

- `release`: from the last block end of the kernel before to this kernel's first wait return
  (what the dependency itself costs: the grid's completion and its memory made visible);
- `post-wait`: from this kernel's first wait return to its last block end (its own work);
- per phase of the chosen layer's products: the median and slowest block, after the wait; for
  the decode attention the same columns hold its rows read (`stats`), its pass loop's start
  (`staged`) and its passes done (`product`).

The instrumentation costs a few stores a block (the launch-bound step took 5-10% longer on an
H100, 2026-11-24); read the columns as a decomposition, not as the step's time. Needs CuPy and
an sm_90 GPU.
"""

from __future__ import annotations

import argparse
import re
import statistics
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

GRIDS, BLOCKS = 1024, 512  # %gridid slots (low bits) and blocks a grid
MARKS = ("start", "wait", "end", "stats", "staged", "product", "reduced")
LOG = "og_phase_log"
END = MARKS.index("end")
HEAD = f"""
#if defined(__CUDA_ARCH__)
__device__ unsigned long long {LOG}[{GRIDS * BLOCKS * len(MARKS)}];
__device__ __forceinline__ void og_phase(unsigned int mark) {{
  if (threadIdx.x != 0) return;
  unsigned long long grid, now;
  asm volatile("mov.u64 %0, %%gridid;" : "=l"(grid));
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  const unsigned int b = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
  {LOG}[((grid % {GRIDS}ull) * {BLOCKS}ull + b % {BLOCKS}u) * {len(MARKS)}ull + mark] = now;
}}
#else
__device__ inline void og_phase(unsigned int) {{}}
#endif
struct OgPhaseEnd {{ __device__ ~OgPhaseEnd() {{ og_phase({END}u); }} }};
"""
WAIT_ASM = 'asm volatile("griddepcontrol.wait;" ::: "memory");'
WAIT_DEFINITION = "__device__ __forceinline__ void og_grid_dependency_wait()"
KERNEL_ENTRY = re.compile(r'(extern "C" __global__ void [^{]*\{)')
# (text a phase ends just before, the mark): the generated one-row product's landmarks, then
# the wide decode attention's (`decode_wide`) on three of the same columns: its
# rows read (q and kv_len issued), its pass loop's start and its passes done
PHASE_TEXTS = (
    ("auto og_row = [&]", "stats"),
    ("float acc[", "staged"),
    ("__shared__ float og_red[", "product"),
    ("const unsigned int kv1 = og_min(kc1, kend);", "stats"),
    ("__shared__ float og_pm[2]", "staged"),
    ("__shared__ float og_l[", "product"),
)
REDUCED = re.compile(r"(__shared__ float og_red\[[^\n]*\n(?:[^\n]*\n)*?\s*__syncthreads\(\);)")


def instrument(source: str) -> str:
    """`source` (a plan's CUDA module: the prelude, then the kernels) with every mark of `MARKS`
    written by thread 0 of each block; the same kernels otherwise (on the CPU the marks are
    empty). Raises ValueError where the landmarks it needs are missing (the code changed)."""
    from optgraph.codegen.cuda_prelude import PRELUDE

    if not source.startswith(PRELUDE):
        raise ValueError("kernel_phases: the module does not start with the prelude")
    return instrument_prelude(PRELUDE) + instrument_kernels(source[len(PRELUDE) :])


def instrument_prelude(prelude: str) -> str:
    """The prelude with the log, `og_phase`, and the wait's mark."""
    if prelude.count(WAIT_ASM) != 1 or WAIT_DEFINITION not in prelude:
        raise ValueError("kernel_phases: the prelude's dependency wait was not found")
    wait = f"{WAIT_ASM} og_phase({MARKS.index('wait')}u);"
    prelude = prelude.replace(WAIT_ASM, wait)
    at = prelude.index(WAIT_DEFINITION)
    return prelude[:at] + HEAD + prelude[at:]


def instrument_kernels(kernels: str) -> str:
    """The kernels with their start, end and product-phase marks."""
    entry = rf"\1 og_phase({MARKS.index('start')}u); OgPhaseEnd og_phase_end;"
    kernels, count = KERNEL_ENTRY.subn(entry, kernels)
    if not count:
        raise ValueError("kernel_phases: no kernel found")
    for text, mark in PHASE_TEXTS:
        kernels = kernels.replace(text, f"og_phase({MARKS.index(mark)}u); {text}")
    return REDUCED.sub(rf"\1 og_phase({MARKS.index('reduced')}u);", kernels)


@contextmanager
def instrumented_modules() -> Iterator[list[Any]]:
    """Inside the block the CUDA runtime compiles every module instrumented; the list collects
    the compiled modules (the runtime's own `kernel_module`, wrapped, restored after)."""
    from optgraph.runtime.cuda import launch

    original = launch.kernel_module
    compiled: list[Any] = []

    def compile_instrumented(source: str) -> Any:
        module = original(instrument(source))
        compiled.append(module)
        return module

    launch.kernel_module = compile_instrumented
    try:
        yield compiled
    finally:
        launch.kernel_module = original


def one_step(step: Any, stream: Any, module: Any) -> list[dict[str, Any]]:
    """Replay `step` once with the log zeroed; per grid (in start order): its blocks' marks (ns,
    0 where a block did not reach one), as an array [blocks, marks]."""
    import cupy as cp
    import numpy as np

    log = cp.ndarray((GRIDS * BLOCKS * len(MARKS),), cp.uint64, module.get_global(LOG))
    for _ in range(5):
        step()
    stream.synchronize()
    log.fill(0)
    cp.cuda.runtime.deviceSynchronize()
    step()
    stream.synchronize()
    marks = log.get().reshape(GRIDS, BLOCKS, len(MARKS)).astype(np.int64)
    grids = []
    for slot in range(GRIDS):
        blocks = marks[slot][marks[slot][:, 0] > 0]
        if len(blocks):
            grids.append({"blocks": blocks, "start": int(blocks[:, 0].min())})
    return sorted(grids, key=lambda g: g["start"])


Row = dict[str, Any]


def kernel_rows(plan: Any, grids: list[dict[str, Any]]) -> list[Row]:
    """One row a kernel launch of `plan`, zipped with the traced grids in start order."""
    import numpy as np

    from optgraph.codegen.lower_cuda import KernelStep

    launches = [s for s in plan.steps if isinstance(s, KernelStep)]
    if len(grids) != len(launches):
        raise SystemExit(f"{len(grids)} grids traced for {len(launches)} launches")
    t0 = grids[0]["start"]
    rows: list[Row] = []
    previous_end = None
    for launch, grid in zip(launches, grids):
        b = grid["blocks"]
        wait, end = int(b[:, 1].min()), int(b[:, 2].max())
        phases = {}
        for k, name in enumerate(MARKS[3:], start=3):
            reached = b[:, k] > 0
            if reached.any():
                after = (b[reached, k] - b[reached, 1]) / 1e3
                phases[name] = (float(np.median(after)), float(after.max()))
        after_end = (b[:, 2] - b[:, 1]) / 1e3
        phases["end"] = (float(np.median(after_end)), float(after_end.max()))
        rows.append({
            "node": launch.node, "blocks": len(b),
            "start": (grid["start"] - t0) / 1e3, "all_in": (int(b[:, 0].max()) - t0) / 1e3,
            "wait": (wait - t0) / 1e3, "end": (end - t0) / 1e3,
            "post_wait": (end - wait) / 1e3,
            "release": (wait - previous_end) / 1e3 if previous_end is not None else 0.0,
            "phases": phases,
        })  # fmt: skip
        previous_end = end
    return rows


def role(node: str) -> str:
    return re.sub(r"^l\d+\.", "", node)


def tables(name: str, rows: list[Row], layer: int) -> list[str]:
    """The kernel table, the chosen layer's phases and the sums by role, as markdown."""
    span = rows[-1]["end"]
    lines = ["", f"**{name}**: {len(rows)} kernels, {span:.1f} µs from the first block's start", ""]
    lines += ["| node | blocks | start | all in | wait | end | post-wait | release |"]
    lines += ["|---|---|---|---|---|---|---|---|"]
    lines += [
        f"| {r['node']} | {r['blocks']} | {r['start']:.2f} | {r['all_in']:.2f} | {r['wait']:.2f} "
        f"| {r['end']:.2f} | {r['post_wait']:.2f} | {r['release']:.2f} |"
        for r in rows
    ]
    prefix = f"l{layer}."
    lines += ["", f"Layer {layer}, µs after the wait (median / slowest block):", ""]
    lines += ["| node | " + " | ".join(MARKS[3:]) + " | end |", "|---" * (len(MARKS) - 1) + "|"]
    for r in rows:
        if r["node"].startswith(prefix):
            cells = [r["phases"].get(m) for m in (*MARKS[3:], "end")]
            text = [f"{c[0]:.2f} / {c[1]:.2f}" if c else "–" for c in cells]
            lines.append(f"| {r['node']} | " + " | ".join(text) + " |")
    by_role: dict[str, list[float]] = {}
    for r in rows:
        entry = by_role.setdefault(role(r["node"]), [0, 0.0, 0.0])
        entry[0] += 1
        entry[1] += r["post_wait"]
        entry[2] += r["release"]
    lines += ["", "| role | kernels | post-wait µs | release µs |", "|---|---|---|---|"]
    for name_, (count, work, release) in sorted(by_role.items(), key=lambda x: -x[1][1]):
        lines.append(f"| {name_} | {count:.0f} | {work:.1f} | {release:.1f} |")
    releases = [r["release"] for r in rows[1:]]
    median = statistics.median(releases)
    total = sum(releases)
    lines += [
        "",
        f"release: median {median:.2f} µs, {total:.1f} µs over {len(releases)} boundaries",
    ]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--only", default="llama_launch", help="models (bench_decode_launches')")
    parser.add_argument("--variant", default="all-on", help="a bench_decode_launches variant")
    parser.add_argument("--layer", type=int, default=1, help="the layer whose phases are listed")
    parser.add_argument("--markdown", metavar="FILE", help="also write the tables there")
    args = parser.parse_args(argv)
    from benchmarks import bench_decode_launches as bdl
    from benchmarks.harness.timing import device_name, print_report

    lines = [f"device: {device_name()}; date: {time.strftime('%Y-%m-%d')}; variant {args.variant}"]
    for model in bdl.bench_models(args.only):
        with instrumented_modules() as compiled:
            step, stream, _, _ = bdl.build(
                model, bdl.VARIANTS[args.variant], bdl.PIPELINES.get(args.variant)
            )
        rows = kernel_rows(step.bound.variant.plan, one_step(step, stream, compiled[-1]))
        lines += tables(model.name, rows, args.layer)
        del step
    text = "\n".join(lines) + "\n"
    print_report(text, args.markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
