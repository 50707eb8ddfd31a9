"""One-row products `[1, K] @ [K, N]` (decode, f16): optgraph's kernel and candidate layouts.

    python benchmarks/bench_gemv.py [--sweep] [--only 4096x4096] [--log FILE] [--emit DIR]

For each shape (Llama-8B decode's products, the small model's) every variant is launched over
several copies of the weights (together more bytes than the 50 MB L2, so weights come from HBM;
the small shapes' copies fit in L2, as in `bench_kernels.py`), the launches captured as one CUDA
graph. Reported: `kernel µs` (CUPTI device time per launch, through torch.profiler: the figure
to compare), `graph µs` (replay time per launch, launch gaps included), GB/s of the weights over
the kernel time, and the largest error of copy 0 against a float32 product, relative to its
largest value. Without `--sweep` only optgraph's kernel (`product_kernel.one_row_matmul`) and the layout
it had before (`gemv_variants.legacy`) run; `--sweep` adds every candidate of `sweep_variants`.
`--emit DIR` writes the CUDA sources and exits (no GPU needed: check they compile with nvcc).
Kernels are compiled with nvcc (-arch=sm_90) in parallel when it is on the PATH, else NVRTC.
"""

from __future__ import annotations

import argparse
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.harness.gemv_variants import Config, cluster_ok, filled, kernel_source, legacy
from optgraph.codegen.cuda_prelude import PRELUDE
from optgraph.codegen.kernels.one_row import product_kernel
from optgraph.ir.graph import Node, TensorType

BIG = [(4096, 4096), (4096, 1024), (4096, 14336), (14336, 4096), (4096, 32000)]
SMALL = [(512, 512), (512, 128), (512, 1376), (1376, 512), (512, 1024)]
OPTGRAPH = "optgraph"  # the variant that is optgraph's own kernel


def sweep_variants(k: int, n: int) -> dict[str, Config]:
    """Every candidate layout of the sweep for one shape (names: ct = column threads, s = blocks
    a multiprocessor, t = threads a block, b = loads in flight, mb = __launch_bounds__ blocks)."""
    old = legacy(k, n)
    same_grid = {"ct": old.ct, "splits": old.splits, "legacy_rows": old.legacy_rows}
    v: dict[str, Config] = {}
    if k <= 2048:  # small: single pass only (one batch of loads a thread)
        v["legacy-b8-mb2"] = Config(batch=8, min_blocks=2, reduce="last", **same_grid)
        for ct in (1, 2, 4, 8):
            for threads in (256, 512):
                if k <= 8 * (threads // ct):
                    v[f"sp-ct{ct}-t{threads}"] = Config(
                        threads=threads, ct=ct, batch=8, min_blocks=1024 // threads
                    )
        return v
    v["legacy-b4-mb4"] = Config(batch=4, min_blocks=4, reduce="last", **same_grid)
    for ct in (4, 8, 16, 32, 64):
        for per_sm in (1, 2, 4):
            v[f"ct{ct}-s{per_sm}"] = filled(k, n, ct, per_sm=per_sm)
    for threads, ct, per_sm in ((512, 16, 1), (512, 16, 2), (512, 32, 1), (512, 32, 2)):
        v[f"t{threads}-ct{ct}-s{per_sm}"] = filled(k, n, ct, threads=threads, per_sm=per_sm)
    for ct in (32, 64):
        v[f"t1024-ct{ct}-s1"] = filled(k, n, ct, threads=1024, per_sm=1)
    v["ct16-s2-mb0"] = filled(k, n, 16, per_sm=2, min_blocks=0)
    for ct in (16, 32):
        for batch in (4, 16):
            v[f"ct{ct}-s2-b{batch}"] = filled(k, n, ct, per_sm=2, batch=batch)
        for load in ("na", "na256", "cs", "ef"):
            v[f"ct{ct}-s2-{load}"] = filled(k, n, ct, per_sm=2, load=load)
    for ct, per_sm in ((8, 4), (16, 2), (32, 2)):
        v[f"ct{ct}-s{per_sm}-last"] = filled(k, n, ct, per_sm=per_sm, reduce="last")
        v[f"ct{ct}-s{per_sm}-cluster"] = filled(k, n, ct, per_sm=per_sm, reduce="cluster")
    for ct, threads in ((1, 1024), (2, 1024), (4, 1024), (8, 1024), (2, 512), (4, 512)):
        v[f"sp-ct{ct}-t{threads}"] = Config(
            threads=threads, ct=ct, batch=8, min_blocks=1024 // threads
        )
    return {name: cfg for name, cfg in v.items() if cluster_ok(cfg)}


def optgraph_kernel(k: int, n: int) -> tuple[str, str, tuple[int, int, int], int]:
    """(name, source, grid, threads) of optgraph's kernel for `[1, k] @ [k, n]` (f16)."""
    a, b = TensorType("f16", (1, k)), TensorType("f16", (k, n))
    node = Node(f"y{k}x{n}", "matmul", ("x", "w"), {}, TensorType("f16", (1, n)))
    made = product_kernel.one_row_matmul(node, [a, b])
    assert made is not None and len(made) == 1
    launch = made[0]
    return launch.kernel.name, launch.kernel.source, launch.grid, launch.block[0]


class Case:
    """One variant at one shape: its kernel's name, source, grid and block."""

    def __init__(self, variant: str, k: int, n: int, cfg: Config | None) -> None:
        self.variant, self.k, self.n, self.cfg = variant, k, n, cfg
        if cfg is None:
            self.name, self.source, grid, self.threads = optgraph_kernel(k, n)
            self.grid = (grid[0], grid[1])
            self.layout = f"optgraph: grid {self.grid[0]}x{self.grid[1]}"
        else:
            self.name = f"gv_{re.sub(r'[^0-9a-zA-Z]', '_', variant)}_{k}x{n}"
            self.source = kernel_source(self.name, cfg, k, n)
            self.grid, self.threads = (cfg.tiles(n), cfg.splits), cfg.threads
            self.layout = cfg.describe(n)


def cases(shapes: list[tuple[int, int]], sweep: bool) -> dict[str, list[Case]]:
    """Variant name -> its cases (one module each)."""
    out: dict[str, list[Case]] = {}
    for k, n in shapes:
        chosen: dict[str, Config | None] = {OPTGRAPH: None, "legacy": legacy(k, n)}
        if sweep:
            chosen.update(sweep_variants(k, n))
        for variant, cfg in chosen.items():
            out.setdefault(variant, []).append(Case(variant, k, n, cfg))
    return out


def module_text(group: list[Case]) -> str:
    return PRELUDE + "".join("\n" + c.source for c in group)


def compile_modules(groups: dict[str, list[Case]], log: Any) -> dict[str, Any]:
    """Variant -> cupy.RawModule (nvcc in parallel when available, else NVRTC)."""
    import cupy as cp

    nvcc = shutil.which("nvcc")
    folder = Path(tempfile.mkdtemp(prefix="bench_gemv_"))

    def build(item: tuple[str, list[Case]]) -> tuple[str, Any, str]:
        variant, group = item
        src = folder / f"{re.sub(r'[^0-9a-zA-Z]', '_', variant)}.cu"
        src.write_text(module_text(group))
        if nvcc is None:
            return variant, cp.RawModule(code=module_text(group), options=("--std=c++17",)), ""
        cubin = src.with_suffix(".cubin")
        cmd = [nvcc, "-cubin", "-arch=sm_90", "-O3", "--std=c++17", "-Xptxas", "-v"]
        done = subprocess.run(
            [*cmd, "-o", str(cubin), str(src)], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise RuntimeError(f"{variant}: nvcc failed\n{done.stderr[-3000:]}")
        return variant, str(cubin), done.stderr

    start = time.perf_counter()
    modules: dict[str, Any] = {}
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 4) as pool:
        for variant, made, report in pool.map(build, groups.items()):
            modules[variant] = cp.RawModule(path=made) if isinstance(made, str) else made
            regs = re.findall(r"Function properties for (\w+)|Used (\d+) registers", report)
            names = [a for a, _ in regs if a]
            counts = [b for _, b in regs if b]
            for name, count in zip(names, counts):
                print(f"  regs {name}: {count}", file=log)
    print(f"compiled {len(groups)} modules in {time.perf_counter() - start:.1f} s", file=log)
    return modules


def kernel_times(run: Any, names: set[str]) -> dict[str, float]:
    """CUPTI device µs per launch of each kernel in `names`."""
    import cupy as cp
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        cp.cuda.Device().synchronize()
    out = {}
    for evt in prof.key_averages():
        if evt.key in names and evt.count:
            total = float(getattr(evt, "self_device_time_total", 0.0) or 0.0)
            out[evt.key] = total / evt.count
    return out


def bench_shape(k: int, n: int, group: list[Case], modules: dict[str, Any], log: Any) -> list[str]:
    """Rows of the table for one shape."""
    import cupy as cp

    nbytes = k * n * 2
    copies = max(2, min(64, math.ceil(200e6 / nbytes)))
    launches = copies * max(1, math.ceil(24 / copies))
    rng = cp.random.default_rng(0)
    w = cp.empty((copies, k, n), cp.float16)
    for c in range(copies):
        w[c] = (rng.standard_normal((k, n), dtype=cp.float32) * 0.05).astype(cp.float16)
    x = rng.standard_normal((copies, k), dtype=cp.float32).astype(cp.float16)
    out = cp.zeros((copies, n), cp.float16)
    want = x[0].astype(cp.float32) @ w[0].astype(cp.float32)
    scale = float(cp.abs(want).max())
    args = [(out[c], x[c], w[c]) for c in range(copies)]
    stream = cp.cuda.Stream(non_blocking=True)
    graphs: dict[str, Any] = {}
    rows: dict[str, list[str]] = {}
    for case in group:
        fn = modules[case.variant].get_function(case.name)
        grid, block = (case.grid[0], case.grid[1], 1), (case.threads, 1, 1)
        try:
            with stream:
                out.fill(0)
                fn(grid, block, args[0])
                stream.synchronize()
                err = float(cp.abs(out[0].astype(cp.float32) - want).max()) / scale
                stream.begin_capture()
                try:
                    for i in range(launches):
                        fn(grid, block, args[i % copies])
                finally:
                    graph = stream.end_capture()
                for _ in range(3):
                    graph.launch(stream)
                start, end = cp.cuda.Event(), cp.cuda.Event()
                times = []
                for _ in range(7):
                    start.record(stream)
                    graph.launch(stream)
                    end.record(stream)
                    end.synchronize()
                    times.append(cp.cuda.get_elapsed_time(start, end) * 1000.0 / launches)
            graphs[case.name] = graph
            rows[case.name] = [case.variant, case.layout, f"{statistics.median(times):.2f}"]
            rows[case.name].append(f"{err:.1e}")
        except Exception as exc:  # noqa: BLE001 - one broken variant must not hide the rest
            print(f"{k}x{n} {case.variant}: {type(exc).__name__}: {exc}", file=log, flush=True)
            rows[case.name] = [case.variant, case.layout, "error", str(exc)[:60]]

    def replay() -> None:
        for graph in graphs.values():
            for _ in range(2):
                graph.launch(stream)

    kernel = kernel_times(replay, set(graphs))
    lines = []
    for case in group:
        variant, layout, graph_us, err = rows[case.name]
        k_us = kernel.get(case.name, float("nan"))
        gbs = f"{nbytes / (k_us * 1e-6) / 1e9:.0f}" if math.isfinite(k_us) else "-"
        lines.append(
            f"| {k}x{n} | {variant} | {layout} | {k_us:.2f} | {graph_us} | {gbs} | {err} |"
        )
        print(lines[-1], file=log, flush=True)
    return lines


def copy_bandwidth() -> float:
    """Device-to-device copy GB/s (bytes read + written) of 1 GB, for the floor."""
    import cupy as cp

    src = cp.ones(1 << 29, cp.uint16)
    dst = cp.empty_like(src)

    def copy() -> None:
        kind = cp.cuda.runtime.memcpyDeviceToDevice
        cp.cuda.runtime.memcpy(dst.data.ptr, src.data.ptr, src.nbytes, kind)

    copy()
    start, end = cp.cuda.Event(), cp.cuda.Event()
    start.record()
    for _ in range(10):
        copy()
    end.record()
    end.synchronize()
    ms = cp.cuda.get_elapsed_time(start, end) / 10
    return 2 * src.nbytes / (ms * 1e-3) / 1e9


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", action="store_true", help="every candidate layout")
    parser.add_argument("--only", help="shapes whose KxN contains this")
    parser.add_argument("--variants", help="variants whose name matches this regular expression")
    parser.add_argument("--log", help="also write the log here")
    parser.add_argument("--markdown", help="write the table here")
    parser.add_argument("--emit", help="write the CUDA sources to this folder and exit")
    args = parser.parse_args(argv)
    shapes = [s for s in BIG + SMALL if not args.only or args.only in f"{s[0]}x{s[1]}"]
    groups = cases(shapes, args.sweep)
    if args.variants:
        groups = {v: g for v, g in groups.items() if re.search(args.variants, v)}
    if args.emit:
        folder = Path(args.emit)
        folder.mkdir(parents=True, exist_ok=True)
        for variant, group in groups.items():
            name = re.sub(r"[^0-9a-zA-Z]", "_", variant)
            (folder / f"{name}.cu").write_text(module_text(group))
        print(f"{len(groups)} modules, {sum(len(g) for g in groups.values())} kernels")
        return 0
    import cupy as cp

    log = open(args.log, "w") if args.log else sys.stdout  # noqa: SIM115
    props = cp.cuda.runtime.getDeviceProperties(cp.cuda.runtime.getDevice())
    device = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    modules = compile_modules(groups, log)
    copy = copy_bandwidth()
    head = "| shape | variant | layout | kernel µs | graph µs | GB/s | max rel. error |"
    lines = [f"device: {device}; device-to-device copy {copy:.0f} GB/s", "", head]
    lines.append("|---|---|---|---|---|---|---|")
    for k, n in shapes:
        group = [c for g in groups.values() for c in g if (c.k, c.n) == (k, n)]
        lines += bench_shape(k, n, group, modules, log)
        if args.markdown:
            Path(args.markdown).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    if log is not sys.stdout:
        log.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
