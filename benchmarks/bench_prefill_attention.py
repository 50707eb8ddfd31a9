"""Prefill attention alone on the GPU: the tensor-core path's softmax row variants and the tiled
kernel, per-kernel device time (CUPTI through torch.profiler).

    python benchmarks/bench_prefill_attention.py [--shape 2,8,4096,40] [--iters 10]
        [--markdown FILE]

The default shape is SD-1.5's largest self-attention (batch 2 of classifier-free guidance, 8
heads of 40, 4096 latent tokens). Each variant sets `prefill_gemm`'s `THREADS`, `VECTOR_ROWS`
and `MAX_SCRATCH_BYTES` (0: the tiled CUDA-core kernel), compiles the one-node graph, checks its
output against the first variant's (NMSE), and reports the replay latency and the softmax rows'
device time (`kernel_profile`).
"""

from __future__ import annotations

import argparse
import datetime
import functools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.harness.timing import print_report

VARIANTS = [  # (label, threads, vector reads, scratch cap)
    ("scalar, 128 threads", 128, False, 256 << 20),
    ("float4, 128 threads", 128, True, 256 << 20),
    ("float4, 256 threads", 256, True, 256 << 20),
    ("float4, 512 threads", 512, True, 256 << 20),
    ("scalar, 512 threads", 512, False, 256 << 20),
    ("float4, 256 threads, 1 GiB cap", 256, True, 1 << 30),
    ("tiled (CUDA cores)", 256, True, 0),
]


def measure(shape: tuple[int, ...], iters: int) -> list[tuple[str, float, float, float]]:
    """(label, replay µs, softmax µs, NMSE against the first variant) of each variant."""
    import cupy as cp

    import optgraph as og
    from benchmarks.harness.head_to_head_variants import kernel_family_times
    from optgraph.api.programs import cuda_program
    from optgraph.codegen.kernels.attention import prefill_gemm

    dims = ",".join(map(str, shape))
    text = (
        f"graph a {{\n  input %q : f16[{dims}]\n  input %k : f16[{dims}]\n"
        f"  input %v : f16[{dims}]\n  %d = attention(%q, %k, %v) : f16[{dims}]\n"
        "  output %d\n}\n"
    )
    rng = np.random.default_rng(0)
    inputs = {n: cp.asarray(rng.standard_normal(shape).astype(np.float16)) for n in "qkv"}
    saved = (prefill_gemm.THREADS, prefill_gemm.VECTOR_ROWS, prefill_gemm.MAX_SCRATCH_BYTES)
    rows, first = [], None
    try:
        for label, threads, vector, cap in VARIANTS:
            prefill_gemm.THREADS, prefill_gemm.VECTOR_ROWS = threads, vector
            prefill_gemm.MAX_SCRATCH_BYTES = cap
            program = cuda_program(og.parse(text))
            program.run(inputs)
            out = cp.asnumpy(program.run(inputs)["d"]).astype(np.float64)
            first = out if first is None else first
            err = float(np.mean((out - first) ** 2) / np.mean(first**2))
            exec_, stream = program._cache.get(program.last_key).exec, program.stream
            replay = functools.partial(cp.cuda.runtime.graphLaunch, exec_, stream.ptr)
            latency, families = kernel_family_times(replay, stream, iters)
            rows.append((label, latency, families.get("attention", (0.0, 0))[0], err))
            print(f"  {label}: {latency:.1f} µs", flush=True)
            program.close()
    finally:
        prefill_gemm.THREADS, prefill_gemm.VECTOR_ROWS, prefill_gemm.MAX_SCRATCH_BYTES = saved
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--shape", default="2,8,4096,40", help="B,H,S,D of q, k and v")
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--markdown", metavar="FILE")
    args = p.parse_args(argv)
    shape = tuple(int(x) for x in args.shape.split(","))
    import cupy as cp

    device = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    rows = measure(shape, args.iters)
    lines = [
        (
            f"**{device}, {datetime.date.today().isoformat()}**, attention f16[{args.shape}], "
            "not causal, one CUDA graph, same run."
        ),
        "",
        "| variant | replay µs | og attention kernels µs | NMSE vs the first |",
        "|---|---|---|---|",
    ]
    lines += [f"| {a} | {b:.1f} | {c:.1f} | {d:.1e} |" for a, b, c, d in rows]
    print_report("\n".join(lines) + "\n", args.markdown)
    return 0


if __name__ == "__main__":
    sys.exit(main())
