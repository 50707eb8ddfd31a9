"""The GPU side of bench_split.py: the three variants, timed in one process.

`SyncWay` issues a split program's lowered steps eagerly (no CUDA graph) the way a runtime
without host functions in graphs must: whenever the host is about to run CPU nodes or copy
between host and device after GPU work was issued, it synchronizes every stream; copies are
synchronous `cudaMemcpy`; CPU nodes run in the calling thread (the same `HostFunction`s the
graph calls, so both ways compute the same bits). It counts the synchronizations it makes.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np
from split_plan import describe, max_rel_diff

from optgraph.codegen.cuda_steps import HOST_SPACES, CopyStep, EventStep, HostStep
from optgraph.ir.graph import Graph
from optgraph.runtime.cuda_launch import COPY_KINDS
from optgraph.runtime.cuda_offload import HostFunction
from optgraph.runtime.reference import random_inputs

H2D, D2H = 1, 2


class SyncWay:
    """A split program's steps, issued eagerly with a host synchronization at every boundary."""

    def __init__(self, cp: Any, program: Any):
        (variant,) = program._variants.values()
        self.cp, self.variant = cp, variant
        plan = variant.plan
        host = {s.stream for s in plan.steps if isinstance(s, HostStep)}
        recorded = {s.event: s.stream for s in plan.steps if isinstance(s, EventStep)}
        staged = {
            n: variant.in_host[o : o + plan.types[n].nbytes] for n, o in variant.in_offsets.items()
        }
        rt = cp.cuda.runtime
        # Events of its own: the program's were recorded inside its graph capture, and a stream
        # may not wait outside a capture for an event last recorded inside one (the H100 refused
        # it with cudaErrorInvalidValue).
        self.events = {e: cp.cuda.Event(block=False, disable_timing=True) for e in plan.events}
        self.calls: list[tuple[str, Callable[[], Any]]] = []
        for step in plan.steps:
            if isinstance(step, EventStep):
                if step.stream in host or recorded.get(step.event) in host:
                    continue  # the host's own ordering is its synchronizations
                self.calls.append(("event", self._event(rt, variant, step)))
            elif isinstance(step, HostStep):
                fn = HostFunction(
                    variant.graph, step, plan, variant.host, staged, variant.host_errors
                )
                self.calls.append(("host", partial(fn._call, None)))
            elif isinstance(step, CopyStep) and step.kind in ("h2d", "d2h"):
                dst, src = variant.pointer(step.dst, {}), variant.pointer(step.src, {})
                copy = partial(rt.memcpy, dst, src, step.nbytes, COPY_KINDS[step.kind])
                self.calls.append(("copy", copy))
            else:
                self.calls.append(("gpu", variant._op(step, {})))
        self.outputs = [
            (variant.out_host.ctypes.data + variant.out_offsets[n],
             variant.pointer(plan.locations[n], {}), plan.types[n].nbytes)
            for n in dict.fromkeys(plan.outputs)
            if plan.locations[n].space not in HOST_SPACES and plan.types[n].nbytes
        ]  # fmt: skip
        self.syncs = 0

    def _event(self, rt: Any, variant: Any, step: EventStep) -> Callable[[], Any]:
        event, stream = self.events[step.event].ptr, variant.streams.get(step.stream).ptr
        if step.kind == "record":
            return partial(rt.eventRecord, event, stream)
        return partial(rt.streamWaitEvent, stream, event, 0)

    def __call__(self, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        v, rt = self.variant, self.cp.cuda.runtime
        v.stage_inputs(inputs)
        self.syncs = 1
        rt.memcpy(int(v.in_dev.ptr), v.in_host.ctypes.data, v.in_bytes, H2D)
        dirty = False  # GPU work issued since the last synchronization
        for kind, call in self.calls:
            if kind in ("gpu", "event"):
                call()
                dirty |= kind == "gpu"  # an event orders streams; it is no work to wait for
                continue
            if dirty:
                v.streams.synchronize()
                self.syncs += 1
                dirty = False
            call()
            self.syncs += kind == "copy"
        v.streams.synchronize()
        self.syncs += 1
        for dst, src, n in self.outputs:
            rt.memcpy(dst, src, n, D2H)
            self.syncs += 1
        v.host_errors.raise_first()
        return {n: v.read_output(n) for n in dict.fromkeys(v.plan.outputs)}


def _wall_ms(step: Callable[[], Any], iters: int, repeats: int) -> float:
    """Median wall-clock ms of one step (each returns with its results on the host)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            step()
        times.append((time.perf_counter() - start) * 1e3 / iters)
    return statistics.median(times)


def moe_weights(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Well-scaled random f32 weights, quickly (uniform; norm weights near 1)."""
    rng = np.random.default_rng(seed)
    out = {}
    for w in graph.weights:
        values = rng.random(w.type.shape, dtype=np.float32) - np.float32(0.5)
        if w.name.endswith("norm"):
            values = 1 + np.float32(0.1) * values
        elif w.name.split(".")[-1].startswith("experts_"):
            values *= np.float32(2 / np.sqrt(w.type.shape[1] ** 0.5))
        elif w.type.rank == 2:
            values *= np.float32(2 / np.sqrt(w.type.shape[0]))
        out[w.name] = values
    return out


def measure_all(
    args: argparse.Namespace, source: Graph, split: Graph, gpu: Graph
) -> dict[str, Any]:
    import cupy as cp

    from optgraph.program import cuda_program

    inputs = random_inputs(source)
    inputs["pos"][:] = args.cache_len // 2
    inputs["kv_len"][:] = args.cache_len // 2 + 1
    weights = moe_weights(source)
    row: dict[str, Any] = {"device": cp.cuda.runtime.getDeviceProperties(0)["name"].decode()}
    row |= {k: getattr(args, k) for k in ("layers", "experts", "expert_ffn")}
    # The all-GPU program first, in a fresh process state: measured after the split program and
    # the synchronous way it ran 3x slower on the H100 than alone (same inputs, same arrays).
    on_gpu = cuda_program(gpu, weights=weights)
    on_gpu.run(inputs)  # eager, then captured
    gpu_out = on_gpu.run(inputs)["logits"]
    row["gpu"] = _wall_ms(lambda: on_gpu.run(inputs), args.iters, args.repeats)
    on_gpu.close()
    gc.collect()
    program = cuda_program(split, weights=weights)
    program.run(inputs)
    split_out = program.run(inputs)["logits"]
    (variant,) = program._variants.values()
    row |= describe(source, split, variant.plan)
    row["split"] = _wall_ms(lambda: program.run(inputs), args.iters, args.repeats)
    row["gpu_diff"] = max_rel_diff(gpu_out, split_out)
    sync_way = SyncWay(cp, program)
    sync_out = sync_way(inputs)["logits"]
    row["sync"] = _wall_ms(lambda: sync_way(inputs), args.iters, args.repeats)
    row["sync_way_counted"] = sync_way.syncs
    row["sync_diff"] = max_rel_diff(sync_out, split_out)
    program.close()
    return row
