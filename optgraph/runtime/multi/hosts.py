"""One rank of a run spread over several hosts: this process drives one GPU (docs/multi-gpu.md).

`MultiGpuProgram` starts every rank of a run itself, on one host. Across hosts, a launcher
(torchrun, mpirun, a job scheduler, ssh) starts one process per GPU on every host; each process
compiles the same graph, and `HostRank` runs its rank:

    ranks = lower_ranks(og.compile(graph, "tensor-parallel{ways=4},default", "cpu").graph)
    rank, local, rendezvous = rendezvous_from_environment(os.environ)   # RANK, LOCAL_RANK, ...
    with HostRank(ranks, weights, rank=rank, device=local, rendezvous=rendezvous) as me:
        outputs = me.run(inputs)     # the outputs this rank owns (RankPrograms.outputs)

The only thing the ranks must agree on before NCCL can connect them is one NCCL unique id per
communicator group. Rank 0 makes them and hands them out through a *rendezvous*:

- `TcpRendezvous(host, port)`: rank 0 listens on `host:port` (MASTER_ADDR / MASTER_PORT, as
  torchrun sets them) and answers each other rank once; `multiprocessing.connection` with an
  authentication key derived from the planned graph's text, so a rank that compiled another
  graph (another split, other shapes) is refused rather than joined to the wrong collectives;
- `FileRendezvous(path)`: rank 0 writes the ids to a file on a filesystem every host sees
  (written whole, then renamed into place); the others wait for it.

NCCL then connects the ranks over NVLink, PCIe or the network by itself (its own environment:
NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...). NVLink multicast is kept off here as everywhere.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import time
from collections.abc import Mapping
from dataclasses import dataclass
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client, Listener
from pathlib import Path
from typing import TYPE_CHECKING, Any, Self

import numpy as np

from optgraph.codegen.plan.lowered import RankPrograms
from optgraph.errors import InputError, OptGraphError
from optgraph.ir.printer import print_graph
from optgraph.runtime.cuda.device import cupy
from optgraph.runtime.multi.gpu_rank import nccl_environment

if TYPE_CHECKING:
    from optgraph.runtime.cuda.collectives import UniqueId

Ids = dict[tuple[int, ...], "UniqueId"]


def program_token(ranks: RankPrograms) -> bytes:
    """A key every rank of one run derives alike: the digest of the planned graph's text."""
    return hashlib.sha256(print_graph(ranks.graph).encode()).digest()


@dataclass(frozen=True)
class TcpRendezvous:
    """Rank 0 serves the ids on `host:port`; the others connect (retrying for `timeout` s)."""

    host: str
    port: int
    timeout: float = 300.0

    def exchange(self, ids: Ids | None, rank: int, world: int, token: bytes) -> Ids:
        if rank == 0:
            assert ids is not None
            with Listener((self.host, self.port), authkey=token) as listener:
                for _ in range(world - 1):
                    try:
                        conn = listener.accept()
                    except AuthenticationError:
                        raise OptGraphError(
                            f"rank 0: a rank of another program connected to {self.host}:"
                            f"{self.port} (every rank must compile the same graph and pipeline)"
                        ) from None
                    with conn:
                        conn.send(ids)
            return ids
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                with Client((self.host, self.port), authkey=token) as conn:
                    received: Ids = conn.recv()
                    return received
            except AuthenticationError:
                raise OptGraphError(
                    f"rank {rank}: rank 0 on {self.host}:{self.port} runs another program "
                    "(every rank must compile the same graph with the same pipeline)"
                ) from None
            except ConnectionRefusedError:
                if time.monotonic() > deadline:
                    raise OptGraphError(
                        f"rank {rank}: no rank 0 listening on {self.host}:{self.port} "
                        f"after {self.timeout:g}s"
                    ) from None
                time.sleep(0.05)


@dataclass(frozen=True)
class FileRendezvous:
    """Rank 0 writes the ids (with the program token) to `path`; the others wait for it."""

    path: str
    timeout: float = 300.0

    def exchange(self, ids: Ids | None, rank: int, world: int, token: bytes) -> Ids:
        path = Path(self.path)
        if rank == 0:
            tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
            tmp.write_bytes(pickle.dumps((token, ids)))
            os.replace(tmp, path)
            assert ids is not None
            return ids
        deadline = time.monotonic() + self.timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise OptGraphError(f"rank {rank}: no ids in '{path}' after {self.timeout:g}s")
            time.sleep(0.05)
        written, received = pickle.loads(path.read_bytes())
        if written != token:
            raise OptGraphError(
                f"rank {rank}: '{path}' holds the ids of another program (every rank must "
                "compile the same graph with the same pipeline)"
            )
        return dict(received)


Rendezvous = TcpRendezvous | FileRendezvous


def rendezvous_from_environment(
    environ: Mapping[str, str],
) -> tuple[int, int, Rendezvous]:
    """(rank, local GPU, rendezvous) from torchrun's variables: RANK, LOCAL_RANK (default 0),
    MASTER_ADDR and MASTER_PORT."""
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in environ]
    if missing:
        raise InputError(f"rendezvous: {', '.join(missing)} not set (torchrun sets them)")
    try:
        rank, local = int(environ["RANK"]), int(environ.get("LOCAL_RANK", "0"))
        port = int(environ["MASTER_PORT"])
    except ValueError as err:
        raise InputError(f"rendezvous: {err}") from None
    return rank, local, TcpRendezvous(environ["MASTER_ADDR"], port)


class HostRank:
    """Rank `rank` of `ranks`, run in this process on GPU `device` (see the module docstring)."""

    def __init__(
        self,
        ranks: RankPrograms,
        weights: Mapping[str, Any],
        *,
        rank: int,
        device: int,
        rendezvous: Rendezvous,
    ):
        if not 0 <= rank < ranks.world:
            raise InputError(f"rank {rank} is not in a run of {ranks.world} ranks")
        nccl_environment()
        from optgraph.runtime.cuda.collectives import (
            Communicators,
            NcclCollectives,
            RankProgram,
            unique_id,
        )

        self.ranks, self.rank = ranks, rank
        program = ranks.ranks[rank]
        local = program.graph
        missing = [w for w in local.weights if w.name not in weights]
        if missing:
            raise InputError(f"missing weight '%{missing[0].name}' ({missing[0].type})")
        ids = {group: unique_id() for group in ranks.groups} if rank == 0 else None
        ids = rendezvous.exchange(ids, rank, ranks.world, program_token(ranks))
        cupy().cuda.Device(device).use()
        self.communicators = Communicators(rank, ids)
        self.program = RankProgram(
            program,
            collectives=NcclCollectives(self.communicators),
            weights={w.name: weights[w.name] for w in local.weights},
            relower=ranks.relowers[rank] if ranks.relowers else None,
        )

    def run(self, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """This rank's outputs (every rank must call `run` alike: the collectives meet)."""
        local = self.program.graph
        missing = [i for i in local.inputs if i.name not in inputs]
        if missing:
            raise InputError(f"missing input '%{missing[0].name}' ({missing[0].type})")
        outputs = self.program.run({i.name: inputs[i.name] for i in local.inputs})
        self.program.synchronize()
        return {k: np.asarray(v) for k, v in outputs.items()}

    def close(self) -> None:
        self.program.close()
        self.communicators.destroy()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
