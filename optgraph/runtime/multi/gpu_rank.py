"""The body of one rank of a several-GPU run: a process (or thread) driving one GPU.

`rank_main(spec, conn, setup)` is what `runtime/multi/gpus.py` starts once per device. It:

1. sets `NCCL_NVLS_ENABLE=0` before NCCL is loaded in this process (NVLink multicast can take a
   shared host's GPUs out of service), then runs `setup` if given (tests install a fake CuPy);
2. makes GPU `spec.device` current, creates its NCCL communicators from the unique ids the
   parent made (`collectives.Communicators`), and builds its `RankProgram` with its own
   weights (uploaded once, here); with `spec.peer_reduce`, its small all_reduces over every rank
   run as one peer-memory kernel (`peer_reduce`), the other collectives through NCCL;
3. answers the parent's requests on `conn` until "close": `("run", inputs)` runs the program
   (the first run eagerly, then it captures the whole program, collectives included, as one
   CUDA graph; later runs replay it) and sends back this rank's outputs; `("time", inputs,
   warmup, reps)` binds device arrays and times `reps` replays with CUDA events.

Every reply is `("ok", value)` or `("error", text)`; a rank never raises into the parent.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import traceback
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from optgraph.codegen.plan.lowered import LoweredProgram, Relower
from optgraph.reference.kernels import numpy_dtype
from optgraph.runtime.cuda.device import cupy

if TYPE_CHECKING:
    from optgraph.runtime.cuda.collectives import UniqueId

NVLS_OFF = {"NCCL_NVLS_ENABLE": "0"}


@dataclass(frozen=True)
class RankSpec:
    """What one rank needs (sent to it once, pickled): its program, GPU, weights and the NCCL
    unique id of every communicator group of the run."""

    rank: int
    device: int
    program: LoweredProgram
    ids: Mapping[tuple[int, ...], UniqueId]
    weights: Mapping[str, np.ndarray] = field(default_factory=dict)
    relower: Relower | None = None
    peer_reduce: bool = False  # small all_reduces by peer-memory kernel (`peer_reduce`)


def nccl_environment() -> None:
    """NVLink multicast off in this process, before NCCL reads its environment."""
    os.environ.update(NVLS_OFF)


def _time_replays(
    program: Any,
    inputs: Mapping[str, Any],
    warmup: int,
    reps: int,
    barrier: Callable[[Any], None] | None = None,
) -> list[float]:
    """Milliseconds of each of `reps` replays of the bound program (device arrays, no copies;
    each replay timed alone between CUDA events on stream 0 and synchronized). `barrier(stream)`
    is enqueued before each start event: a rank that waits for another (a pipeline stage for its
    `recv`) then counts that wait, as a user of the whole step would."""
    cp = cupy()
    dev_in = {k: cp.asarray(np.asarray(v)) for k, v in inputs.items()}
    plan = program.lowered.main.plan
    # Outputs the program may compute in their input's buffer (KV caches) are bound so.
    in_place = {o: dev_in[i] for o, i in program.lowered.in_place.items() if i in dev_in}
    out = {
        n: in_place[n] if n in in_place else cp.empty(plan.types[n].shape, numpy_dtype(t.dtype))
        for n, t in ((n, plan.types[n]) for n in dict.fromkeys(plan.outputs))
    }
    step = program.bind(dev_in, out)
    for _ in range(1 + warmup):  # the first call runs eagerly and captures
        step()
    stream = program.stream
    times = []
    for _ in range(reps):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        if barrier is not None:
            barrier(stream)
        start.record(stream)
        step()
        end.record(stream)
        end.synchronize()
        times.append(float(cp.cuda.get_elapsed_time(start, end)))
    return times


def _reply(conn: Any, status: str, value: object) -> None:
    """Send a reply; a parent that has gone away (it stopped the run) is not an error here."""
    with contextlib.suppress(OSError):
        conn.send((status, value))


def _serve(program: Any, conn: Any, barrier: Callable[[Any], None] | None = None) -> None:
    while True:
        try:
            request = conn.recv()
        except (EOFError, OSError):
            return  # the parent has gone away
        kind = request[0]
        try:
            if kind == "close":
                _reply(conn, "ok", None)
                return
            if kind == "run":
                outputs = program.run(request[1])
                program.synchronize()
                _reply(conn, "ok", {k: np.asarray(v) for k, v in outputs.items()})
            elif kind == "time":
                times = _time_replays(program, request[1], request[2], request[3], barrier)
                _reply(conn, "ok", {"median_ms": statistics.median(times), "times": times})
            else:
                _reply(conn, "error", f"unknown request '{kind}'")
        except Exception:  # noqa: BLE001 - every failure goes back to the parent as text
            _reply(conn, "error", traceback.format_exc(limit=8))


def rank_main(spec: RankSpec, conn: Any, setup: Callable[[], None] | None = None) -> None:
    """One rank: set up (see the module docstring), then serve the parent's requests."""
    nccl_environment()
    program = communicators = None
    try:
        if setup is not None:
            setup()
        from optgraph.runtime.cuda.collectives import (
            Communicators,
            NcclCollectives,
            RankProgram,
        )

        cupy().cuda.Device(spec.device).use()
        communicators = Communicators(spec.rank, spec.ids)
        collectives = NcclCollectives(communicators, peer_reduce=spec.peer_reduce)
        program = RankProgram(
            spec.program,
            collectives=collectives,
            weights=spec.weights,
            relower=spec.relower,
        )
    except Exception:  # noqa: BLE001 - reported to the parent, which stops the other ranks
        _reply(conn, "error", traceback.format_exc(limit=8))
        return
    _reply(conn, "ok", (os.environ.get("NCCL_NVLS_ENABLE"), collectives.peer is not None))
    try:
        _serve(program, conn, communicators.barrier)
    finally:
        program.close()
        collectives.close()
        communicators.destroy()
