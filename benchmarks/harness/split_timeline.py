"""One calling-thread step of a split program piece by piece, and how its GPU and CPU work overlap.

`step_timelines(cp, program, step, steps)` runs `steps` steps of a program built with
`LoweringOptions(cpu_nodes="calling-thread")` (already run once, so its issue list exists) with
every call of its issue list timed: on the host (`time.perf_counter` at entry and exit) and, for
each GPU part's launch, on the GPU (CUDA events recorded on stream 0 before and after the launch,
read against an event recorded as the step starts, after the previous step has finished). All in
µs since the step's start. `split_diagnose.py` (section 4) prints its medians;
`split_sync_way.measure_variant` takes a few such steps of the calling-thread variant after its
timings, for `bench_split.py`'s overlap line.

`overlap(gpu, cpu, waits, step)` is the interval arithmetic, pure: given the GPU parts' intervals
(GPU start to end), the CPU nodes' and the host waits' (host entry to exit) and the step's
length, how long a CPU node runs while some GPU part executes (the intersection of the two
unions), as a share of the CPU nodes' time and of the step; how long the GPU is idle while the
host works (the step less the host's waits, less the GPU's busy time; and the part of it while a
CPU node runs); and how long the host waits while the GPU works.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from optgraph.runtime.cuda.offload import HostFunction

Interval = tuple[float, float]


def union(intervals: Iterable[Interval]) -> list[Interval]:
    """The intervals merged: sorted, disjoint, none empty (an interval whose end is not after
    its start is dropped; intervals that touch are merged)."""
    merged: list[Interval] = []
    for start, end in sorted(i for i in intervals if i[1] > i[0]):
        if merged and start <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def length(intervals: Iterable[Interval]) -> float:
    """The time the intervals cover (overlaps counted once)."""
    return sum(end - start for start, end in union(intervals))


def intersect(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The times inside both unions, as a union."""
    ua, ub = union(a), union(b)
    out: list[Interval] = []
    i = j = 0
    while i < len(ua) and j < len(ub):
        start, end = max(ua[i][0], ub[j][0]), min(ua[i][1], ub[j][1])
        if end > start:
            out.append((start, end))
        if ua[i][1] < ub[j][1]:
            i += 1
        else:
            j += 1
    return out


def subtract(a: Iterable[Interval], b: Iterable[Interval]) -> list[Interval]:
    """The times inside the union of `a` and outside the union of `b`."""
    out: list[Interval] = []
    ub = union(b)
    for start, end in union(a):
        for b0, b1 in ub:
            if b1 <= start or b0 >= end:
                continue
            if b0 > start:
                out.append((start, b0))
            start = max(start, b1)
        if end > start:
            out.append((start, end))
    return out


OVERLAP_KEYS = (
    "step",
    "gpu_busy",
    "cpu_nodes",
    "host_waits",
    "overlap",
    "overlap_of_cpu",
    "overlap_of_step",
    "gpu_idle_host_working",
    "gpu_idle_cpu_nodes",
    "host_waiting_gpu_working",
)


def overlap(
    gpu: Iterable[Interval], cpu: Iterable[Interval], waits: Iterable[Interval], step: float
) -> dict[str, float]:
    """A step's overlap of GPU and host work (all times in one unit, from the step's start):

    - `gpu_busy`, `cpu_nodes`, `host_waits`: the time each union covers;
    - `overlap`: a CPU node runs while some GPU part executes (the two unions' intersection);
      `overlap_of_cpu` and `overlap_of_step`: its share of `cpu_nodes` and of `step` (0 when
      that is 0);
    - `gpu_idle_host_working`: no GPU part executes and the host is not waiting (the host works:
      CPU nodes, launches, its own Python) within [0, step]; `gpu_idle_cpu_nodes`: the part of
      the CPU nodes' time with no GPU part executing (`cpu_nodes - overlap`);
    - `host_waiting_gpu_working`: the host waits while some GPU part executes.
    """
    g, c, w = union(gpu), union(cpu), union(waits)
    both = length(intersect(g, c))
    cpu_time = length(c)
    host_working = subtract([(0.0, step)], w)
    return {
        "step": step,
        "gpu_busy": length(g),
        "cpu_nodes": cpu_time,
        "host_waits": length(w),
        "overlap": both,
        "overlap_of_cpu": both / cpu_time if cpu_time > 0 else 0.0,
        "overlap_of_step": both / step if step > 0 else 0.0,
        "gpu_idle_host_working": length(subtract(host_working, g)),
        "gpu_idle_cpu_nodes": length(subtract(c, g)),
        "host_waiting_gpu_working": length(intersect(w, g)),
    }


def overlap_line(stats: dict[str, float], steps: int) -> str:
    """One line of `overlap`'s figures (µs; medians of `steps` steps, each taken alone)."""
    s = stats
    return (
        f"overlap (µs a step, medians of {steps}): CPU nodes {s['cpu_nodes']:.1f}, of which "
        f"{s['overlap']:.1f} while a GPU part executes ({100 * s['overlap_of_cpu']:.1f}% of the "
        f"CPU nodes' time, {100 * s['overlap_of_step']:.1f}% of the step {s['step']:.1f}); GPU "
        f"busy {s['gpu_busy']:.1f}; GPU idle while the host works {s['gpu_idle_host_working']:.1f}"
        f" (while a CPU node runs {s['gpu_idle_cpu_nodes']:.1f}); host waiting while the GPU "
        f"works {s['host_waiting_gpu_working']:.1f} (of {s['host_waits']:.1f} waiting)"
    )


def piece_name(call: Any) -> str:
    """What one call of a calling-thread run is: a GPU part's launch, a CPU node or a host wait."""
    if isinstance(call, HostFunction):
        return f"cpu {call.node.name}"
    if isinstance(call, partial) and getattr(call.func, "__name__", "") == "_run_part":
        return f"GPU part {call.args[1]} ({len(call.args[2])} calls)"
    return "host wait"


@dataclass
class Timeline:
    """Calling-thread steps piece by piece: `names[i]` is the issue list's call i; per step,
    `pieces[s][i]` = (host in, host out) or (host in, host out, GPU start, GPU end) in µs since
    the step's start, and `ends[s]` when the step's work was done (the later of `run`'s return
    and the last GPU part's end)."""

    names: list[str]
    pieces: list[dict[int, tuple[float, ...]]] = field(default_factory=list)
    ends: list[float] = field(default_factory=list)

    def step_overlap(self, s: int) -> dict[str, float]:
        gpu, cpu, waits = [], [], []
        for i, times in self.pieces[s].items():
            kind = self.names[i].split()[0]
            if kind == "GPU" and len(times) == 4:
                gpu.append((times[2], times[3]))
            elif kind == "cpu":
                cpu.append((times[0], times[1]))
            elif kind == "host":
                waits.append((times[0], times[1]))
        return overlap(gpu, cpu, waits, self.ends[s])

    def median_overlap(self) -> dict[str, float]:
        """Each of `overlap`'s figures taken per step, then the median over the steps."""
        per_step = [self.step_overlap(s) for s in range(len(self.pieces))]
        return {k: statistics.median(o[k] for o in per_step) for k in OVERLAP_KEYS}


def step_timelines(cp: Any, program: Any, step: Callable[[], Any], steps: int) -> Timeline:
    """`steps` calls of `step` (one `program.run`) with every call of the program's issue list
    timed (see the module docstring); the issue list is put back afterwards."""
    (variant,) = program._variants.values()
    stream = variant.streams.get(0)
    calls = program._issue[program.last_key][1]
    timeline = Timeline([piece_name(c) for c in calls])
    host: dict[int, tuple[float, float]] = {}
    events: dict[int, tuple[Any, Any]] = {}

    def timed(i: int, call: Callable[[], Any]) -> Callable[[], None]:
        gpu = timeline.names[i].startswith("GPU")

        def run() -> None:
            before = cp.cuda.Event() if gpu else None
            if before is not None:
                before.record(stream)
            t0 = time.perf_counter()
            call()
            host[i] = (t0, time.perf_counter())
            if before is not None:
                after = cp.cuda.Event()
                after.record(stream)
                events[i] = (before, after)

        return run

    original = list(calls)
    calls[:] = [timed(i, c) for i, c in enumerate(original)]
    try:
        for _ in range(steps):
            host.clear()
            events.clear()
            stream.synchronize()
            base = cp.cuda.Event()
            base.record(stream)
            start = time.perf_counter()
            step()
            returned = time.perf_counter()
            stream.synchronize()
            pieces: dict[int, tuple[float, ...]] = {}
            for i, (t0, t1) in host.items():
                gpu = [cp.cuda.get_elapsed_time(base, e) * 1e3 for e in events.get(i, ())]
                pieces[i] = ((t0 - start) * 1e6, (t1 - start) * 1e6, *gpu)
            gpu_ends = [p[3] for p in pieces.values() if len(p) == 4]
            timeline.pieces.append(pieces)
            timeline.ends.append(max([(returned - start) * 1e6, *gpu_ends]))
    finally:
        calls[:] = original
    return timeline
