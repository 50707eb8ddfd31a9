"""Where a split program's CPU nodes run, and the calling-thread schedule of its steps.

A split program (`split-backends`) has CPU nodes (`HostStep`s) on a host stream, ordered against
the GPU streams by `record`/`wait` events. The CUDA runtime runs them one of three ways
(`LoweringOptions.cpu_nodes`):

- `"calling-thread"` (the default): the thread that called `run` runs the CPU nodes itself,
  between CUDA graphs of the GPU work (one graph per *part*: the GPU steps between two points
  where the host must wait or has work to do). Where the host waits for a GPU event it
  synchronizes on the end of the part that recorded it (`cudaEventSynchronize`); where the
  GPU waits for a host event, nothing is needed: the part after it is launched only once the
  host has run the steps before the event. GPU work of a part launched before CPU work runs
  on while the host computes.
- `"graph"`: one CUDA graph; each run of consecutive CPU nodes is one host function in it
  (`cuLaunchHostFunc`: one ctypes callback and one GIL acquisition per CPU segment).
- `"graph-per-node"`: one CUDA graph, one host function per CPU node.

`calling_thread_schedule(plan)` makes the first way's schedule from the plan's steps, with no
CuPy (so CI checks it): pieces in issue order, each a `GpuPart` (plan step indices, one CUDA
graph), a `HostWait` (the host waits for the end of an earlier `GpuPart`), or a `HostPart` (one
CPU node). Which events it drops, and why that keeps every happens-before edge:

- `record E` on the host stream: the host reaches it in program order; every GPU step after a
  `wait E` is in a part launched after it.
- `wait E` on a GPU stream for a host event: dropped for that reason.
- `wait E` on a GPU stream for an event recorded in an earlier part: dropped; the parts run one
  after another on stream 0 (each part's graph forks from and joins into stream 0), and a stream
  may not wait inside a capture for an event recorded outside it.
- `wait E` on the host stream for a GPU event: a `HostWait` on the part that recorded `E`, after
  launching every GPU step issued before the wait. A part ends right after the `record` of
  an event the host waits for, so GPU work issued after that record (a shared expert, while the
  CPU computes the routed ones) is in the next part, launched before the host waits, and runs
  on while the host computes.

    before: [k0 (s0), copy d2h (s0), record ^d2h0 (s0), wait ^d2h0 (host), h1, h2 (host),
             record ^host0 (host), wait ^host0 (s2), copy h2d (s2), record ^h2d0 (s2),
             wait ^h2d0 (s0), k3 (s0)]
    after:  [GpuPart(k0, copy, record ^d2h0), HostWait(0), HostPart(h1), HostPart(h2),
             GpuPart(copy h2d, record ^h2d0, wait ^h2d0, k3)]

`host_waits(pieces)` counts the host's waits (one per GPU -> CPU boundary); `boundary_syncs`
adds the parts launched after host work (the GPU -> host waits of the graph way, which cost no
synchronization here). `cpu_segments(steps)`: the runs of consecutive CPU nodes, each one host
function in the `"graph"` way. Lowering keeps the schedule in `LoweredVariant.cpu_schedule`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.codegen.plan.steps import CudaPlan, EventStep, HostStep


class GpuPart(NamedTuple):
    """GPU steps (indices into `plan.steps`), launched as one CUDA graph on stream 0;
    `after_host`: a step of it waited for a host event (the part is launched after the host
    work instead: the GPU side of a CPU -> GPU boundary)."""

    steps: tuple[int, ...]
    after_host: bool = False


class HostWait(NamedTuple):
    """The host waits until the `part`-th `GpuPart` of the schedule has finished."""

    part: int


class HostPart(NamedTuple):
    """One CPU node (the index of its `HostStep` in `plan.steps`), run by the calling thread."""

    step: int


Piece = GpuPart | HostWait | HostPart


def host_streams(steps: Sequence[object]) -> set[int]:
    return {s.stream for s in steps if isinstance(s, HostStep)}


def calling_thread_schedule(steps: Sequence[object]) -> list[Piece]:
    """The pieces of one run in issue order (see the module docstring)."""
    host = host_streams(steps)
    host_waited = {
        s.event for s in steps if isinstance(s, EventStep) and s.kind == "wait" and s.stream in host
    }
    pieces: list[Piece] = []
    parts = 0  # GpuParts emitted so far
    pending: list[int] = []  # steps of the part being filled (index `parts` once emitted)
    after_host = False
    recorded_in: dict[str, int] = {}  # GPU event -> the part that last recorded it
    host_recorded: set[str] = set()

    def flush() -> None:
        nonlocal parts, pending, after_host
        if pending:
            pieces.append(GpuPart(tuple(pending), after_host))
            parts += 1
            pending, after_host = [], False

    for i, step in enumerate(steps):
        if isinstance(step, HostStep):
            flush()  # GPU work issued before the CPU node runs while the host computes
            pieces.append(HostPart(i))
        elif isinstance(step, EventStep) and step.stream in host:
            if step.kind == "record":
                host_recorded.add(step.event)
                recorded_in.pop(step.event, None)
                continue
            if step.event not in recorded_in:
                continue  # a host event, or one never recorded: nothing to wait for
            flush()  # GPU work issued before the wait is launched before it
            pieces.append(HostWait(recorded_in[step.event]))
        elif isinstance(step, EventStep) and step.kind == "wait":
            if step.event in host_recorded:
                after_host = True
                continue  # the host passed its record before this part is launched
            if recorded_in.get(step.event, parts) < parts:
                continue  # recorded in an earlier part, which ends before this one starts
            pending.append(i)
        else:
            pending.append(i)
            if isinstance(step, EventStep):
                recorded_in[step.event] = parts
                host_recorded.discard(step.event)
                if step.event in host_waited:
                    flush()  # the host waits for what comes before; later GPU work runs on
    flush()
    return pieces


def cpu_schedule(plan: CudaPlan, options: LoweringOptions) -> tuple[Piece, ...]:
    """The calling thread's schedule of `plan` where `options` ask for it and it has CPU nodes
    (kept in the lowered variant: the runtime only follows it), else ()."""
    if options.cpu_nodes != "calling-thread" or not host_streams(plan.steps):
        return ()
    return tuple(calling_thread_schedule(plan.steps))


def host_waits(pieces: Sequence[Piece]) -> int:
    """The host's waits for the GPU in one run of the schedule (before the caller's)."""
    return sum(isinstance(p, HostWait) for p in pieces)


def boundary_syncs(pieces: Sequence[Piece]) -> int:
    """Host<->device synchronizations of one run, both directions: the host's waits, and the
    GPU parts ordered after host work (where the graph way has a GPU stream wait for the
    host). Compare with `analysis.host_syncs.min_host_device_syncs`."""
    return host_waits(pieces) + sum(isinstance(p, GpuPart) and p.after_host for p in pieces)


def cpu_segments(steps: Sequence[object]) -> list[list[int]]:
    """Runs of consecutive `HostStep`s on one stream (indices into `steps`): each one host
    function in the `"graph"` way."""
    runs: list[list[int]] = []
    for i, step in enumerate(steps):
        if not isinstance(step, HostStep):
            continue
        prev = steps[i - 1] if i else None
        if runs and runs[-1][-1] == i - 1 and getattr(prev, "stream", None) == step.stream:
            runs[-1].append(i)
        else:
            runs.append([i])
    return runs
