"""The GPU side of bench_split.py: each variant built, warmed up and timed on its own.

`SyncWay` issues a split program's lowered steps eagerly (no CUDA graph) the way a runtime
without host functions in graphs must: whenever the host is about to run CPU nodes or copy
between host and device after GPU work was issued, it synchronizes every stream; copies are
synchronous `cudaMemcpy`; CPU nodes run in the calling thread (the same `HostFunction`s the
runtime calls, so every way computes the same bits). It counts the synchronizations it makes.

`measure_variant(args, name)` builds one variant (`VARIANTS`), stages the same inputs the same
way for every variant (`step_arrays`), warms it up and times it (`wall_ms`); the calling-thread
variant then takes `--overlap-steps` more steps piece by piece (`split_timeline.step_timelines`)
for the overlap of its GPU parts and CPU nodes.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np

from benchmarks.harness.split_plan import SPLIT_MODES, describe, plan_graphs, schedule_syncs
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.codegen.plan.steps import CopyStep, EventStep, HostStep
from optgraph.ir.graph import Graph
from optgraph.reference.interpreter import random_inputs
from optgraph.runtime.cuda.launch import COPY_KINDS
from optgraph.runtime.cuda.offload import HostFunction

H2D, D2H, D2D = 1, 2, 3
# name -> what it runs; the split ways are `LoweringOptions.cpu_nodes` of the one split program
VARIANTS = ("gpu", *SPLIT_MODES, "sync")


class SyncWay:
    """A split program's steps, issued eagerly with a host synchronization at every boundary."""

    def __init__(self, cp: Any, program: Any, inputs: Mapping[str, Any], out: Mapping[str, Any]):
        bound = program._bind(inputs, out)
        variant = bound.variant
        self.cp, self.variant = cp, variant
        self.bound_in = dict(bound.binding.inputs)
        self.bound_out = dict(bound.binding.outputs)
        plan = variant.plan
        host = {s.stream for s in plan.steps if isinstance(s, HostStep)}
        recorded = {s.event: s.stream for s in plan.steps if isinstance(s, EventStep)}
        staged = {
            n: variant.in_host[o : o + plan.types[n].nbytes]
            for n, o in variant.in_offsets.items()
            if n not in self.bound_in
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
                self.calls.append(("host", fn))
            elif isinstance(step, CopyStep) and step.kind in ("h2d", "d2h"):
                dst = variant.pointer(step.dst, self.bound_in)
                src = variant.pointer(step.src, self.bound_in)
                copy = partial(rt.memcpy, dst, src, step.nbytes, COPY_KINDS[step.kind])
                self.calls.append(("copy", copy))
            else:
                self.calls.append(("gpu", variant._op(step, self.bound_in)))
        self.outputs = []
        for n in dict.fromkeys(plan.outputs):
            src = variant.pointer(plan.locations[n], self.bound_in)
            if n in self.bound_out:
                self.outputs.append((self.bound_out[n], src, plan.types[n].nbytes, D2D))
            elif plan.types[n].nbytes:
                dst = variant.out_host.ctypes.data + variant.out_offsets[n]
                self.outputs.append((dst, src, plan.types[n].nbytes, D2H))
        # The staged inputs' slots, copied in at once (not the slots of bound inputs).
        spans = [
            (o, o + plan.types[n].nbytes)
            for n, o in variant.in_offsets.items()
            if n not in self.bound_in
        ]
        self.staged_span = (min(a for a, _ in spans), max(b for _, b in spans)) if spans else (0, 0)
        self.syncs = 0

    def _event(self, rt: Any, variant: Any, step: EventStep) -> Callable[[], Any]:
        event, stream = self.events[step.event].ptr, variant.streams.get(step.stream).ptr
        if step.kind == "record":
            return partial(rt.eventRecord, event, stream)
        return partial(rt.streamWaitEvent, stream, event, 0)

    def __call__(self, inputs: Mapping[str, Any]) -> dict[str, Any]:
        v, rt = self.variant, self.cp.cuda.runtime
        v.stage_inputs({n: a for n, a in inputs.items() if n not in self.bound_in})
        self.syncs = 1
        lo, hi = self.staged_span
        rt.memcpy(int(v.in_dev.ptr) + lo, v.in_host.ctypes.data + lo, hi - lo, H2D)
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
        for dst, src, n, kind in self.outputs:
            rt.memcpy(dst, src, n, kind)
            self.syncs += 1
        v.host_errors.raise_first()
        return {
            n: None if n in self.bound_out else v.read_output(n)
            for n in dict.fromkeys(v.plan.outputs)
        }


def wall_ms(step: Callable[[], Any], iters: int, repeats: int) -> list[float]:
    """ms per step of each of `repeats` timings of `iters` back-to-back steps (each step returns
    with its results on the host, so the wall clock brackets all of its work)."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(iters):
            step()
        times.append((time.perf_counter() - start) * 1e3 / iters)
    return times


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


def step_arrays(
    cp: Any, source: Graph, args: argparse.Namespace
) -> tuple[dict[str, Any], dict[str, Any]]:
    """(inputs, out) of one decode step, the same for every variant: the KV caches on the device
    (CuPy inputs, the updated caches into device `out` arrays), the token, position and length
    as NumPy, the logits back to NumPy; with `--host-caches` the caches too as NumPy in and
    out (8 MB each way at the default sizes, staged through pinned memory every step)."""
    inputs: dict[str, Any] = random_inputs(source)
    inputs["pos"][:] = args.cache_len // 2
    inputs["kv_len"][:] = args.cache_len // 2 + 1
    if args.host_caches:
        return inputs, {}
    out = {}
    for name in list(inputs):
        if name.endswith("_cache"):
            inputs[name] = cp.asarray(inputs[name])
            new = name.removesuffix("_cache") + "_new"
            out[new] = cp.empty(inputs[name].shape, inputs[name].dtype)
    return inputs, out


def measure_variant(args: argparse.Namespace, name: str) -> dict[str, Any]:
    """Build variant `name`, warm it up (eager run, capture, replays) and time it alone."""
    import cupy as cp

    from optgraph.api.programs import cuda_program

    source, split, gpu = plan_graphs(args)
    logits = "logits"
    if getattr(args, "model", "synthetic") == "qwen3moe":
        from benchmarks.harness import moe_imported

        logits = moe_imported.imported(args).logits
        weights = moe_imported.program_weights(args, gpu if name == "gpu" else split)
        inputs, out = moe_imported.step_arrays(cp, args)
    else:
        weights = moe_weights(source)
        inputs, out = step_arrays(cp, source, args)
    mode = "calling-thread" if name == "sync" else name
    graph = gpu if name == "gpu" else split
    options = LoweringOptions(cpu_nodes=mode if mode in SPLIT_MODES else "calling-thread")
    program = cuda_program(graph, weights=weights, options=options)
    row: dict[str, Any] = {"variant": name}
    row["device"] = cp.cuda.runtime.getDeviceProperties(0)["name"].decode()
    try:
        if name == "sync":
            sync_way = SyncWay(cp, program, inputs, out)
            step: Callable[[], Any] = partial(sync_way, inputs)
        else:
            step = partial(program.run, inputs, out=out)
        for _ in range(args.warmup):
            last = np.array(step()[logits])
        row["ms"] = wall_ms(step, args.iters, args.repeats)
        row["logits"] = np.array(step()[logits]).reshape(-1).tolist()
        if name == "sync":
            row["syncs"] = sync_way.syncs
        elif name != "gpu":
            (variant,) = program._variants.values()
            row |= describe(source, split, variant.plan)
            row["syncs"] = schedule_syncs(variant.plan, mode)
        row["warmup_logits_equal"] = bool(np.array_equal(last.reshape(-1), row["logits"]))
        if name == "calling-thread" and getattr(args, "overlap_steps", 0) > 0:
            # After the timings, which these instrumented steps would perturb.
            from benchmarks.harness.split_timeline import step_timelines

            timeline = step_timelines(cp, program, step, args.overlap_steps)
            row["overlap"] = timeline.median_overlap()
            row["overlap_steps"] = args.overlap_steps
    finally:
        program.close()
    return row
