"""How `bench_offload.py` times things on the GPU (CuPy passed in, so the fake CuPy of the tests
can stand in): median milliseconds of back-to-back launches between two CUDA events, the pinned
host-to-device bandwidth, the f16 GEMM rate, a program's replays, and its own prefetch copies
back to back on one stream (`copy alone`); `time_programs` runs and times every planned variant
of a model (bench_offload.py, bench_diffusion.py)."""

from __future__ import annotations

import argparse
import statistics
from typing import Any

import numpy as np


def timed(cp: Any, stream: Any, launch: Any, iters: int, repeats: int) -> float:
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
    ms = timed(cp, stream, copy, 3, 3)
    return nbytes / (ms * 1e-3)


def time_replays(cp: Any, program: Any, args: argparse.Namespace) -> float:
    """ms per replay of the program's captured CUDA graph (or per eager issue of its calls)."""
    stream = program.stream
    if not program.options.use_graph:
        _, ops = program._issue[program.last_key]
        return timed(cp, stream, lambda: [op() for op in ops], args.iters, args.repeats)
    exec_ = program._cache.get(program.last_key).exec
    launch = cp.cuda.runtime.graphLaunch
    return timed(cp, stream, lambda: launch(exec_, stream.ptr), args.iters, args.repeats)


def time_copies(cp: Any, program: Any, args: argparse.Namespace) -> tuple[int, float]:
    """(bytes, ms) of the program's own prefetch copies, back to back on one stream."""
    from optgraph.codegen.lower_cuda import CopyStep

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

    return sum(c[2] for c in copies), timed(cp, side, copy_all, args.iters, args.repeats)


def time_programs(
    cp: Any,
    graphs: dict[str, Any],
    weights: dict[str, Any],
    inputs: dict[str, Any],
    args: argparse.Namespace,
    options: dict[str, Any] | None = None,
    digits: int = 3,
) -> tuple[dict[str, float], bool, dict[str, Any]]:
    """Each planned graph of `graphs` (resident first) as a CUDA program (`options[name]` its
    lowering options): run (eager, then captured), a replay, ms a replay (`time_replays`), and
    for "depth 2" its copies alone (`streamed_bytes`, `copy alone`). Returns (those figures by
    name, whether every program's outputs equal the first one's bit for bit, the first one's
    outputs)."""
    import gc

    from optgraph.api.programs import cuda_program

    row: dict[str, float] = {}
    first: dict[str, Any] | None = None
    exact = True
    for name, graph in graphs.items():
        program = cuda_program(graph, weights=weights, options=(options or {}).get(name))
        program.run(inputs)  # eager, then captured
        out = program.run(inputs)  # a replay
        if first is None:
            first = out
        exact &= all(out[k].tobytes() == first[k].tobytes() for k in out)
        row[name] = time_replays(cp, program, args)
        if name == "depth 2":
            row["streamed_bytes"], row["copy alone"] = time_copies(cp, program, args)
        program.close()
        del program
        gc.collect()
        print(f"  {name}: {row[name]:.{digits}f} ms", flush=True)
    assert first is not None
    return row, exact, first


def gemm_rate(cp: Any, args: argparse.Namespace, rows: int = 8192) -> float:
    """f16 flops/s of one large product at the model's FFN shape (CuPy's cuBLAS, no capture)."""
    a = cp.ones((rows, args.hidden), dtype=cp.float16)
    b = cp.ones((args.hidden, args.ffn), dtype=cp.float16)
    out = cp.empty((rows, args.ffn), dtype=cp.float16)
    stream = cp.cuda.Stream.null
    ms = timed(cp, stream, lambda: cp.matmul(a, b, out=out), 10, 3)
    return 2 * rows * args.hidden * args.ffn / (ms * 1e-3)
