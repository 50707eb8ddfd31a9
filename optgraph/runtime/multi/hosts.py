"""One rank of a run spread over several hosts: this process drives one GPU (docs/multi-gpu.md).

`MultiGpuProgram` starts every rank of a run itself, on one host. Across hosts, a launcher
(torchrun, mpirun, a job scheduler, ssh) starts one process per GPU on every host; each process
compiles the same graph, and `HostRank` runs its rank:

    ranks = lower_ranks(og.compile(graph, "tensor-parallel{ways=4},default", "cpu").graph)
    rank, local, rendezvous = rendezvous_from_environment(os.environ)   # RANK, LOCAL_RANK, ...
    with HostRank(ranks, weights, rank=rank, device=local, rendezvous=rendezvous) as me:
        outputs = me.run(inputs)     # the outputs this rank owns (RankPrograms.outputs)

The only thing the ranks must agree on before NCCL can connect them is one NCCL unique id per
communicator group. Rank 0 makes them and hands them out through a *rendezvous*, as plain bytes
in a strict format (`rendezvous_wire`: length-prefixed frames, bounded counts, no pickle), to
peers that prove they hold the run's secret, which the launcher gives every rank
(OPTGRAPH_RENDEZVOUS_KEY, or OPTGRAPH_RENDEZVOUS_KEY_FILE: a file only its user can read):

- `TcpRendezvous(host, port, secret)`: rank 0 listens on `host:port` (MASTER_ADDR / MASTER_PORT,
  as torchrun sets them) and answers each other rank once, after a mutual HMAC challenge-response:
  a peer without the secret is dropped (rank 0 keeps serving), a rank 0 without it is refused;
  the planned graph's digest, sent along, tells a rank that compiled another graph (another
  split, other shapes) that it did, rather than joining it to the wrong collectives;
- `FileRendezvous(path, secret)`: rank 0 writes the ids, sealed with an HMAC of the secret and
  the digest, to a file on a filesystem every host sees (written whole, then renamed into
  place); the others wait for it and check the seal.

NCCL then connects the ranks over NVLink, PCIe or the network by itself (its own environment:
NCCL_SOCKET_IFNAME, NCCL_IB_HCA, ...). NVLink multicast is kept off here as everywhere.
"""

from __future__ import annotations

import hashlib
import os
import socket
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import numpy as np

from optgraph.codegen.plan.lowered import RankPrograms
from optgraph.errors import InputError, OptGraphError
from optgraph.ir.printer import print_graph
from optgraph.runtime.cuda.device import cupy
from optgraph.runtime.multi.gpu_rank import nccl_environment
from optgraph.runtime.multi.rendezvous_wire import (
    MAX_FRAME,
    Ids,
    WireError,
    ask_rank0,
    check_secret,
    encode_ids,
    rendezvous_secret,
    seal,
    serve_peer,
    unseal,
)


def program_digest(ranks: RankPrograms) -> bytes:
    """The digest of the planned graph's text: equal for every rank of one run, compared (not
    trusted: the model is no secret) so that a rank of another program is told so."""
    return hashlib.sha256(print_graph(ranks.graph).encode()).digest()


# A peer must finish its handshake within this many seconds in all: a silent or slow connection
# (a port scanner, a stray client, one dripping a byte at a time) holds rank 0 up no longer.
PEER_SECONDS = 10.0


@dataclass(frozen=True)
class TcpRendezvous:
    """Rank 0 serves the ids on `host:port` to the peers that prove `secret`; the others
    connect (retrying for `timeout` s). See `rendezvous_wire` for the bytes exchanged."""

    host: str
    port: int
    secret: bytes = field(repr=False)
    timeout: float = 300.0

    def __post_init__(self) -> None:
        check_secret(self.secret, "TcpRendezvous")

    def exchange(self, ids: Ids | None, rank: int, world: int, digest: bytes) -> Ids:
        where = f"{self.host}:{self.port}"
        if rank == 0:
            assert ids is not None
            self._serve(encode_ids(ids), world, digest, where)
            return ids
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                with socket.create_connection((self.host, self.port), timeout=PEER_SECONDS) as conn:
                    return ask_rank0(conn, self.secret, digest, rank, where)
            except (TimeoutError, ConnectionRefusedError, ConnectionResetError) as err:
                if time.monotonic() > deadline:
                    raise OptGraphError(
                        f"rank {rank}: no rank 0 answering on {where} after {self.timeout:g}s "
                        f"({err})"
                    ) from None
                time.sleep(0.05)
            except OSError as err:
                raise OptGraphError(f"rank {rank}: cannot reach {where}: {err}") from None

    def _serve(self, ids_bytes: bytes, world: int, digest: bytes, where: str) -> None:
        """Answer every other rank once; peers that are not ranks of this run are dropped."""
        served: set[int] = set()
        deadline = time.monotonic() + self.timeout
        with socket.create_server((self.host, self.port)) as server:
            while len(served) < world - 1:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = sorted(set(range(1, world)) - served)
                    raise OptGraphError(
                        f"rank 0: ranks {missing} did not come to {where} in {self.timeout:g}s"
                    )
                server.settimeout(left)
                try:
                    conn, _ = server.accept()
                except TimeoutError:
                    continue
                with conn:
                    conn.settimeout(PEER_SECONDS)
                    until = time.monotonic() + PEER_SECONDS
                    try:
                        served.add(serve_peer(conn, self.secret, digest, ids_bytes, world, until))
                    except (WireError, OSError):
                        continue  # not a rank of this run (garbage, a wrong secret): drop it


@dataclass(frozen=True)
class FileRendezvous:
    """Rank 0 writes the ids, sealed with `secret` and the program digest, to `path` (written
    whole, then renamed into place); the others wait for it and check the seal."""

    path: str
    secret: bytes = field(repr=False)
    timeout: float = 300.0

    def __post_init__(self) -> None:
        check_secret(self.secret, "FileRendezvous")

    def exchange(self, ids: Ids | None, rank: int, world: int, digest: bytes) -> Ids:
        path = Path(self.path)
        if rank == 0:
            assert ids is not None
            tmp = path.with_name(path.name + f".{os.getpid()}.tmp")
            tmp.write_bytes(seal(self.secret, digest, encode_ids(ids)))
            os.replace(tmp, path)
            return ids
        deadline = time.monotonic() + self.timeout
        while not path.exists():
            if time.monotonic() > deadline:
                raise OptGraphError(f"rank {rank}: no ids in '{path}' after {self.timeout:g}s")
            time.sleep(0.05)
        if path.stat().st_size > MAX_FRAME:
            raise OptGraphError(f"rank {rank}: '{path}' is not an optgraph rendezvous file")
        return unseal(self.secret, digest, path.read_bytes(), rank, str(path))


Rendezvous = TcpRendezvous | FileRendezvous


def rendezvous_from_environment(
    environ: Mapping[str, str],
) -> tuple[int, int, Rendezvous]:
    """(rank, local GPU, rendezvous) from torchrun's variables, RANK, LOCAL_RANK (default 0),
    MASTER_ADDR and MASTER_PORT, and the run's secret (`rendezvous_wire.rendezvous_secret`:
    OPTGRAPH_RENDEZVOUS_KEY or OPTGRAPH_RENDEZVOUS_KEY_FILE, which the launcher sets)."""
    missing = [k for k in ("RANK", "MASTER_ADDR", "MASTER_PORT") if k not in environ]
    if missing:
        raise InputError(f"rendezvous: {', '.join(missing)} not set (torchrun sets them)")
    try:
        rank, local = int(environ["RANK"]), int(environ.get("LOCAL_RANK", "0"))
        port = int(environ["MASTER_PORT"])
    except ValueError as err:
        raise InputError(f"rendezvous: {err}") from None
    secret = rendezvous_secret(environ)
    return rank, local, TcpRendezvous(environ["MASTER_ADDR"], port, secret)


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
        ids = rendezvous.exchange(ids, rank, ranks.world, program_digest(ranks))
        if set(ids) != set(ranks.groups):
            raise OptGraphError(
                f"rank {rank}: the rendezvous gave ids for groups {sorted(ids)}, this program "
                f"has {sorted(ranks.groups)}"
            )
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
