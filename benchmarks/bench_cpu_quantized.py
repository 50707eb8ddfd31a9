"""Products by quantized weights on the CPU: the compiled kernels against dequantize-then-NumPy.

    python benchmarks/bench_cpu_quantized.py                     # every type, both shapes
    python benchmarks/bench_cpu_quantized.py --types q4_k,q8_0 --rows 1

Per block type, weight shape N x K (4096 x 4096, 14336 x 4096: a Llama-7B-like attention and
FFN product) and rows of x m (1: decode, 32: a short prefill), y = x · Wᵀ timed three ways:

- `kernels, 1 thread` and `kernels, T threads` (T: the cores this process may run on):
  `runtime.cpu.quantized.quantized_matmul`, what the planned executor (`quantized="native"`)
  and split programs' CPU nodes run;
- `dequantize + matmul`: the reference's way (`reference.dequantize.dequantize` of the whole
  weight, then `x @ W.T` in NumPy's BLAS), what a node reading a quantized weight cost before.

Each cell is the median of `--repeats` calls after one warm-up (the baseline: of
`--baseline-repeats`), in ms and GB/s of stored weight bytes (x and y are small beside them);
`its CPU time`: the median CPU time of the calling thread in the one-thread calls, which moves
less with the machine's load than their wall-clock time.
`max diff` is the largest |y − y_ref| over the largest |y_ref| of the all-threads result against
the baseline's (f32 sums in another order). Wall-clock times: on a shared machine they move with
its load (the load average is printed).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import numpy as np

from optgraph.ir.graph import QUANT_BLOCKS, TensorType
from optgraph.reference.dequantize import dequantize, random_blocks
from optgraph.runtime.cpu.quantized import compiled_library, default_threads, quantized_matmul

SHAPES = ((4096, 4096), (14336, 4096))


def _median_ms(
    call: Callable[[], object],
    repeats: int,
    warmup: int,
    clock: Callable[[], float] = time.perf_counter,
) -> float:
    for _ in range(warmup):
        call()
    times = []
    for _ in range(repeats):
        start = clock()
        call()
        times.append(clock() - start)
    return statistics.median(times) * 1e3


def _cell(ms: float, nbytes: int) -> str:
    return f"{ms:9.2f} ms {nbytes / ms / 1e6:6.2f} GB/s"


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _row(
    x: np.ndarray,
    blocks: np.ndarray,
    dtype: str,
    n: int,
    k: int,
    threads: int,
    repeats: int,
    baseline_repeats: int,
) -> list[str]:
    """One line of the table: the kernels on 1 and `threads` threads, then the baseline."""
    m, nbytes = x.shape[0], blocks.nbytes
    y = np.empty((m, n), np.float32)
    one = _median_ms(lambda: quantized_matmul(x, blocks, dtype, n, k, threads=1, out=y), repeats, 1)
    # The calling thread's CPU time: what one thread's call costs, whatever else the machine runs.
    cpu = _median_ms(
        lambda: quantized_matmul(x, blocks, dtype, n, k, threads=1, out=y),
        repeats, 0, time.thread_time,
    )  # fmt: skip
    many = _median_ms(
        lambda: quantized_matmul(x, blocks, dtype, n, k, threads=threads, out=y), repeats, 1
    )
    base = _median_ms(lambda: x @ dequantize(blocks, dtype, (n, k)).T, baseline_repeats, 0)
    want = x @ dequantize(blocks, dtype, (n, k)).T
    diff = float(np.abs(y - want).max() / max(float(np.abs(want).max()), 1e-30))
    return [dtype, f"{n} x {k}", str(m), f"{nbytes / 1e6:.1f}", _cell(one, nbytes),
            f"{cpu:.2f} ms", _cell(many, nbytes), _cell(base, nbytes), f"{base / many:.1f}x", f"{diff:.1e}"]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--types", default=",".join(QUANT_BLOCKS), help="block types, commas")
    parser.add_argument("--shapes", default=",".join(f"{n}x{k}" for n, k in SHAPES),
                        help="N x K of the weight, commas (K whole blocks)")  # fmt: skip
    parser.add_argument("--rows", default="1,32", help="rows of x (m), commas")
    parser.add_argument("--repeats", type=int, default=7, help="timed calls of the kernels")
    parser.add_argument("--baseline-repeats", type=int, default=3, help="timed baseline calls")
    parser.add_argument("--threads", type=int, default=None, help="the many-threads column")
    args = parser.parse_args(argv)
    types = [t.strip() for t in args.types.split(",") if t.strip()]
    unknown = [t for t in types if t not in QUANT_BLOCKS]
    if unknown:
        parser.error(f"unknown types {unknown}; known: {', '.join(QUANT_BLOCKS)}")
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")]
    rows = [int(m) for m in args.rows.split(",")]
    threads = args.threads or default_threads()
    if compiled_library() is None:
        print("the kernels did not build: the table would time the NumPy fallback", file=sys.stderr)
        return 1
    load = os.getloadavg() if hasattr(os, "getloadavg") else (float("nan"),) * 3
    print(f"# {time.strftime('%Y-%m-%d %H:%M')}  {_cpu_name()}, {default_threads()} cores "
          f"available, load average {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")  # fmt: skip
    print(f"# NumPy {np.__version__}; {threads} threads in the many-threads column\n")
    header = ["type", "N x K", "m", "MB", "kernels, 1 thread", "its CPU time",
              f"kernels, {threads} threads",
              "dequantize + matmul", "speed-up", "max diff"]  # fmt: skip
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    rng = np.random.default_rng(0)
    for dtype in types:
        for n, k in shapes:
            blocks = random_blocks(rng, TensorType(dtype, (n, k)), 1.0 / np.sqrt(k))
            for m in rows:
                x = rng.standard_normal((m, k), dtype=np.float32)
                cells = _row(x, blocks, dtype, n, k, threads, args.repeats, args.baseline_repeats)
                print("| " + " | ".join(cells) + " |", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
