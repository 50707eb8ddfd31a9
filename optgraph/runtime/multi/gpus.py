"""Run a several-device graph on several GPUs: one rank per GPU, NCCL between them.

    ranks = lower_ranks(parallel_graph, options)       # codegen/rank_programs.py, once
    program = MultiGpuProgram(ranks, weights)          # one process per GPU, spawned
    outputs = program.run(inputs)                      # each output from the rank that owns it
    program.close()

`MultiGpuProgram` (the parent):
- checks that there are as many GPUs as ranks, sets `NCCL_NVLS_ENABLE=0` in its own environment
  (children inherit it; each rank sets it again before NCCL loads), and makes one NCCL unique id
  per communicator group (`RankPrograms.groups`): the rendezvous token, handed to every rank;
- starts one rank per GPU (`launcher="spawn"`: a process each, `multiprocessing`'s spawn start
  method, since CUDA does not survive a fork; `"thread"`: a thread each in this process), each
  with its own lowered program and only its own weights (`RankSpec`), uploaded once;
- on `run`, sends each rank its inputs, and gathers the outputs from the ranks that own them
  (`RankPrograms.outputs`: an output is read from the first device of its value). Each rank
  captures its whole program, collectives included, as one CUDA graph on its first run and
  replays it after (`runtime/multi/gpu_rank.py`). With `peer_reduce` (the default; spawned ranks
  only), small all_reduces over every rank are one kernel writing into the peers' memory
  (`runtime/cuda/peer_reduce.py`) rather than an NCCL call.

A rank that fails stops the run: the parent raises an `OptGraphError` naming the rank and its GPU
with the rank's traceback, and ends the other rank processes (NCCL peers of a failed rank would
wait forever). `run_rank_alone` runs one rank's program on one GPU without its peers, its
collectives fed from the reference's values (`collectives.FedCollectives`): a check of each
rank's program on a single GPU.
"""

from __future__ import annotations

import multiprocessing
import statistics
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any, Self

import numpy as np

from optgraph.codegen.plan.lowered import RankPrograms
from optgraph.errors import InputError, OptGraphError
from optgraph.ir.graph import Graph, Output
from optgraph.runtime.cuda.device import cupy
from optgraph.runtime.multi.gpu_rank import RankSpec, nccl_environment, rank_main

LAUNCHERS = ("spawn", "thread")
Setup = Callable[[], None]


def _values_for(graph: Graph, given: Mapping[str, Any], kind: str) -> dict[str, Any]:
    decls = graph.inputs if kind == "input" else graph.weights
    missing = [d for d in decls if d.name not in given]
    if missing:
        d = missing[0]
        raise InputError(f"missing {kind} '%{d.name}' ({d.type})", d.span)
    return {d.name: given[d.name] for d in decls}


@dataclass(frozen=True)
class StepTimes:
    """Timed replays of a several-GPU program. `step_ms`: the median over replays of the slowest
    rank's time (all ranks start each replay together, so a pipeline stage that waits for its
    predecessor counts the wait and the last stage's time is the whole step); `rank_ms`: each
    rank's own median."""

    step_ms: float
    rank_ms: tuple[float, ...]

    @staticmethod
    def of(times: Sequence[Sequence[float]]) -> StepTimes:
        slowest = [max(replay) for replay in zip(*times, strict=True)]
        return StepTimes(statistics.median(slowest), tuple(statistics.median(t) for t in times))


@dataclass
class _Rank:
    rank: int
    device: int
    conn: Any
    worker: Any  # a multiprocessing Process or a threading Thread

    def alive(self) -> bool:
        return bool(self.worker.is_alive())


class MultiGpuProgram:
    """Several GPUs running one graph's rank programs (see the module docstring)."""

    def __init__(
        self,
        ranks: RankPrograms,
        weights: Mapping[str, Any],
        *,
        devices: Sequence[int] | None = None,
        launcher: str = "spawn",
        setup: Setup | None = None,
        timeout: float = 600.0,
        peer_reduce: bool = True,
    ):
        if launcher not in LAUNCHERS:
            raise OptGraphError(f"unknown launcher '{launcher}' (expected spawn or thread)")
        self.ranks, self.timeout = ranks, timeout
        self.devices = tuple(devices if devices is not None else range(ranks.world))
        if len(self.devices) != ranks.world:
            raise OptGraphError(f"{ranks.world} ranks but {len(self.devices)} devices given")
        nccl_environment()
        try:
            found = int(cupy().cuda.runtime.getDeviceCount())
        except Exception as err:  # noqa: BLE001 - no CuPy or no driver: say so, no traceback
            raise OptGraphError(
                f"graph '{ranks.graph.name}' runs on {ranks.world} GPUs but none is usable "
                f"(CuPy missing or no device: {err})"
            ) from None
        if found <= max(self.devices, default=0):
            raise OptGraphError(
                f"graph '{ranks.graph.name}' runs on {ranks.world} GPUs "
                f"(devices {list(self.devices)}) but {found} are present"
            )
        from optgraph.runtime.cuda.collectives import unique_id
        from optgraph.runtime.cuda.peer_reduce import peers_reachable

        world = tuple(range(ranks.world))  # always made: `time`'s barrier runs over it
        ids = {group: unique_id() for group in sorted({*ranks.groups, world})}
        self._workers: list[_Rank] = []
        # ranks in one process cannot open each other's IPC handles: NCCL alone there
        peer = (
            peer_reduce
            and launcher == "spawn"
            and ranks.world > 1
            and peers_reachable(self.devices)
        )
        for r, program in enumerate(ranks.ranks):
            rank_weights = _values_for(program.graph, weights, "weight")
            relower = ranks.relowers[r] if ranks.relowers else None
            spec = RankSpec(r, self.devices[r], program, ids, rank_weights, relower, peer)
            self._workers.append(self._start(spec, launcher, setup))
        started = self._gather([None] * ranks.world)
        self.nvls = [nvls for nvls, _ in started]  # each rank's NCCL_NVLS_ENABLE
        self.peer_reduce = [peer for _, peer in started]  # whether it uses `peer_reduce`

    def _start(self, spec: RankSpec, launcher: str, setup: Setup | None) -> _Rank:
        if launcher == "thread":
            parent, child = multiprocessing.Pipe()
            worker: Any = threading.Thread(target=rank_main, args=(spec, child, setup), daemon=True)
        else:
            context = multiprocessing.get_context("spawn")
            parent, child = context.Pipe()
            worker = context.Process(
                target=rank_main, args=(spec, child, setup), daemon=True,
                name=f"optgraph-rank-{spec.rank}",
            )  # fmt: skip
        worker.start()
        return _Rank(spec.rank, spec.device, parent, worker)

    def _gather(self, requests: Sequence[tuple[Any, ...] | None]) -> list[Any]:
        """Send each rank its request (None: just wait for its next reply) and collect replies."""
        for worker, request in zip(self._workers, requests, strict=True):
            if request is not None:
                worker.conn.send(request)
        replies = []
        for worker in self._workers:
            deadline = time.monotonic() + self.timeout
            while not worker.conn.poll(0.05):
                if not worker.alive() or time.monotonic() > deadline:
                    why = "stopped" if not worker.alive() else f"gave no answer in {self.timeout}s"
                    self._abort()
                    raise OptGraphError(f"rank {worker.rank} (GPU {worker.device}) {why}")
            status, value = worker.conn.recv()
            if status != "ok":
                self._abort()
                raise OptGraphError(f"rank {worker.rank} (GPU {worker.device}) failed:\n{value}")
            replies.append(value)
        return replies

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """The outputs by name (NumPy), each from the rank that owns it."""
        requests = [("run", _values_for(p.graph, inputs, "input")) for p in self.ranks.ranks]
        replies = self._gather(requests)
        owner = self.ranks.outputs
        return {o.name: replies[owner[o.name]][o.name] for o in self.ranks.graph.outputs}

    def time(self, inputs: Mapping[str, Any], warmup: int = 10, reps: int = 50) -> StepTimes:
        """Milliseconds per replay of the ranks' CUDA graphs (bound device arrays; every rank
        replays the same number of times, so the collectives meet). Each replay starts on every
        rank after a barrier; the step's time is the slowest rank's (see `StepTimes`)."""
        requests = [
            ("time", _values_for(p.graph, inputs, "input"), warmup, reps) for p in self.ranks.ranks
        ]
        replies = self._gather(requests)
        return StepTimes.of([[float(t) for t in reply["times"]] for reply in replies])

    def close(self) -> None:
        """Stop every rank (destroying its graphs and communicators) and wait for it."""
        if not self._workers:
            return
        try:
            self._gather([("close",)] * len(self._workers))
        finally:
            for worker in self._workers:
                worker.worker.join(timeout=30)
            self._abort()

    def _abort(self) -> None:
        for worker in self._workers:
            process = worker.worker
            if isinstance(process, multiprocessing.process.BaseProcess) and process.is_alive():
                process.terminate()
                process.join(timeout=10)
        self._workers = []

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def reference_values(
    graph: Graph, names: Sequence[str], inputs: Mapping[str, Any], weights: Mapping[str, Any]
) -> dict[str, np.ndarray]:
    """The reference interpreter's values of `names` (any values of `graph`)."""
    from optgraph.reference.interpreter import run_reference

    outputs = tuple(Output(n) for n in dict.fromkeys(names))
    return run_reference(replace(graph, outputs=outputs), inputs, weights)


@dataclass(frozen=True)
class RankAlone:
    """`run_rank_alone`'s result: the rank's outputs, and per collective step that sends a local
    operand, what it sent and what the reference says that operand is."""

    outputs: dict[str, np.ndarray]
    sent: dict[str, np.ndarray]
    expected_sent: dict[str, np.ndarray]


def run_rank_alone(
    ranks: RankPrograms,
    rank: int,
    inputs: Mapping[str, Any],
    weights: Mapping[str, Any],
    *,
    runs: int = 2,
) -> RankAlone:
    """Rank `rank`'s program on the current GPU without its peers: each collective's result fed
    from the reference's value, each local operand it sends kept (see the module docstring).
    Runs it `runs` times (the first eagerly, capturing; then replays) and reports the last."""
    from optgraph.runtime.cuda.collectives import FedCollectives, RankProgram

    nccl_environment()
    program = ranks.ranks[rank]
    local = program.graph
    steps = ranks.collectives(rank)
    nodes = {n.name: n for n in local.nodes}
    operands = {s.node: nodes[s.node].operands[0] for s in steps if s.src is not None}
    names = [s.node for s in steps] + list(operands.values())
    values = reference_values(ranks.graph, names, inputs, weights)
    fed = FedCollectives(values)
    runner = RankProgram(program, collectives=fed, weights=_values_for(local, weights, "weight"))
    try:
        rank_inputs = _values_for(local, inputs, "input")
        for _ in range(runs):
            outputs = runner.run(rank_inputs)
            runner.synchronize()
        sent = fed.read_sent(steps)
    finally:
        runner.close()
    expected = {node: values[operand].reshape(-1) for node, operand in operands.items()}
    return RankAlone({k: np.asarray(v) for k, v in outputs.items()}, sent, expected)
