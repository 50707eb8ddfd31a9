"""A stand-in for `cupy.cuda.nccl`, so the several-GPU runtime runs in CI (no GPU, no NCCL).

Ranks meet through files in a folder the unique id names (`get_unique_id()` makes the folder and
spells its path as the id's integers), so the ranks of a run may be threads of one process or
spawned processes alike. Every call is issued like a fake kernel (`FakeCupy.issue`: run now, or
recorded while capturing and run at each replay); when it runs, the rank writes its
contribution and waits for its peers', then computes the result in NumPy from the device bytes
(which are host memory in the fake) and writes it into the destination:

- `allReduce` (sum): ((op0 + op1) + op2) + ... in float32 for f16/bf16, rounded once; `allGather`:
  the contributions rank after rank; `send`/`recv`: matched per (sender, receiver) pair in order.

`calls` lists, per communicator, what ran (kind, rank, sequence number), and each communicator
remembers `NCCL_NVLS_ENABLE` as it was when it was created.

    with fake_cupy(monkeypatch) as fake: ...   # fake_cupy installs this module as cupy.cuda.nccl
"""

from __future__ import annotations

import ctypes
import os
import tempfile
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import ml_dtypes
import numpy as np

NUMPY_TYPES: dict[int, Any] = {
    7: np.float32, 6: np.float16, 9: ml_dtypes.bfloat16, 2: np.int32, 4: np.int64, 1: np.uint8,
}  # fmt: skip
WAIT_SECONDS = 60.0


def _bytes_at(ptr: int, nbytes: int) -> np.ndarray:
    buffer = (ctypes.c_uint8 * max(nbytes, 1)).from_address(ptr)
    return np.frombuffer(buffer, np.uint8, nbytes)


def _wait_for(path: Path) -> None:
    deadline = time.monotonic() + WAIT_SECONDS
    while not path.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"fake NCCL: no peer wrote {path.name} in {WAIT_SECONDS}s")
        time.sleep(0.001)


def _publish(path: Path, data: np.ndarray) -> None:
    tmp = path.with_suffix(f".{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_bytes(data.tobytes())
    os.replace(tmp, path)


class NcclCommunicator:
    """One rank of a fake communicator (see the module docstring)."""

    created: ClassVar[list[NcclCommunicator]] = []

    def __init__(self, ndev: int, commId: tuple[int, ...], rank: int):
        self.size, self.rank = ndev, rank
        self.folder = Path(bytes(commId).decode())
        self.nvls = os.environ.get("NCCL_NVLS_ENABLE")
        self.sequence = 0  # collectives run so far
        self.pairs: dict[tuple[int, int], int] = {}  # (sender, receiver) -> transfers so far
        self.calls: list[tuple[str, int, int]] = []
        self.issue: Callable[[str, Callable[[], None]], None] = _ISSUE[0]
        _publish(self.folder / f"init.{rank}", np.array([ndev], np.int64))
        for peer in range(ndev):  # ncclCommInitRank blocks until every member has called it
            _wait_for(self.folder / f"init.{peer}")
            sizes = np.frombuffer((self.folder / f"init.{peer}").read_bytes(), np.int64)
            if int(sizes[0]) != ndev:
                raise RuntimeError(f"fake NCCL: rank {peer} says {sizes[0]} ranks, not {ndev}")
        NcclCommunicator.created.append(self)

    def _collective(self, kind: str, src: int, nbytes: int) -> list[np.ndarray]:
        seq = self.sequence
        self.sequence += 1
        self.calls.append((kind, self.rank, seq))
        _publish(self.folder / f"{seq}.{kind}.{self.rank}", _bytes_at(src, nbytes).copy())
        parts = []
        for peer in range(self.size):
            path = self.folder / f"{seq}.{kind}.{peer}"
            _wait_for(path)
            parts.append(np.frombuffer(path.read_bytes(), np.uint8))
        return parts

    def allReduce(
        self, sendbuf: int, recvbuf: int, count: int, datatype: int, op: int, stream: int
    ) -> None:
        dtype = np.dtype(NUMPY_TYPES[datatype])

        def run() -> None:
            parts = self._collective("all_reduce", sendbuf, count * dtype.itemsize)
            floats = (np.dtype(np.float16), np.dtype(np.float32), np.dtype(ml_dtypes.bfloat16))
            wide = np.float32 if dtype in floats else dtype
            total = parts[0].view(dtype).astype(wide)
            for part in parts[1:]:
                total = total + part.view(dtype).astype(wide)
            _bytes_at(recvbuf, count * dtype.itemsize)[:] = total.astype(dtype).view(np.uint8)

        self.issue("NCCL all_reduce", run)

    def allGather(self, sendbuf: int, recvbuf: int, count: int, datatype: int, stream: int) -> None:
        nbytes = count * np.dtype(NUMPY_TYPES[datatype]).itemsize

        def run() -> None:
            parts = self._collective("all_gather", sendbuf, nbytes)
            _bytes_at(recvbuf, nbytes * self.size)[:] = np.concatenate(parts)

        self.issue("NCCL all_gather", run)

    def _next(self, sender: int, receiver: int) -> int:
        n = self.pairs.get((sender, receiver), 0)
        self.pairs[sender, receiver] = n + 1
        return n

    def send(self, sendbuf: int, count: int, datatype: int, peer: int, stream: int) -> None:
        nbytes = count * np.dtype(NUMPY_TYPES[datatype]).itemsize

        def run() -> None:
            n = self._next(self.rank, peer)
            self.calls.append(("send", self.rank, n))
            _publish(self.folder / f"p2p.{self.rank}.{peer}.{n}", _bytes_at(sendbuf, nbytes).copy())

        self.issue("NCCL send", run)

    def recv(self, recvbuf: int, count: int, datatype: int, peer: int, stream: int) -> None:
        nbytes = count * np.dtype(NUMPY_TYPES[datatype]).itemsize

        def run() -> None:
            n = self._next(peer, self.rank)
            self.calls.append(("recv", self.rank, n))
            path = self.folder / f"p2p.{peer}.{self.rank}.{n}"
            _wait_for(path)
            _bytes_at(recvbuf, nbytes)[:] = np.frombuffer(path.read_bytes(), np.uint8)

        self.issue("NCCL recv", run)

    def destroy(self) -> None:
        self.destroyed = True


def _issue_now(label: str, call: Callable[[], None]) -> None:
    call()


_ISSUE: list[Callable[[str, Callable[[], None]], None]] = [_issue_now]


def get_unique_id() -> tuple[int, ...]:
    folder = tempfile.mkdtemp(prefix="fake-nccl-")
    return tuple(folder.encode())


def nccl_module(issue: Callable[[str, Callable[[], None]], None]) -> types.ModuleType:
    """The fake `cupy.cuda.nccl`, its calls issued through `issue` (the fake CuPy's)."""
    _ISSUE[0] = issue
    module = types.ModuleType("cupy.cuda.nccl")
    module.NcclCommunicator = NcclCommunicator  # type: ignore[attr-defined]
    module.get_unique_id = get_unique_id  # type: ignore[attr-defined]
    return module
