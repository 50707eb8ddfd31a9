"""`runtime/cuda/peer_reduce.py` on the CPU: which all_reduces the peer kernel takes, its slots'
layout (the same on every rank), the IPC handle exchange and the routing between it and NCCL.
The kernel itself runs in tests/gpu/test_multi_gpu.py (2 GPUs: equal to NCCL bit for bit)."""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest

from optgraph.codegen.plan.steps import CollectiveStep, Location
from optgraph.runtime.cuda import peer_reduce
from optgraph.runtime.cuda.peer_reduce import (
    MAX_BLOCKS,
    MAX_BYTES,
    CollectiveIssue,
    PeerReduce,
    blocks_for,
    eligible,
    slot_bytes,
)

ARENA = Location("arena", "", 0)


def step(node: str = "s", kind: str = "all_reduce", count: int = 4096, dtype: str = "f16",
         group: tuple[int, ...] = (0, 1)) -> CollectiveStep:  # fmt: skip
    return CollectiveStep(node, 0, kind, group, 0, dtype, count, ARENA, ARENA)


def test_only_small_whole_vector_all_reduces_over_every_rank_are_taken() -> None:
    assert eligible(step(), world=2)
    assert eligible(step(dtype="bf16"), 2) and eligible(step(dtype="f32"), 2)
    assert not eligible(step(kind="all_gather"), 2)
    assert not eligible(step(dtype="i32"), 2)  # summed by NCCL only
    assert not eligible(step(group=(0, 1)), 4)  # a sub-group: NCCL
    assert not eligible(step(group=(1, 0)), 2)  # another rank order than the buffers'
    assert not eligible(step(count=4), 2)  # 8 bytes: not a whole 16-byte vector
    assert eligible(step(count=MAX_BYTES // 2), 2)
    assert not eligible(step(count=MAX_BYTES // 2 + 8), 2)
    assert not eligible(step(group=(0,)), 1)  # one rank: nothing to exchange


def test_one_vector_a_thread_and_at_most_max_blocks() -> None:
    assert blocks_for(step(count=4096)) == 2  # 512 vectors of 8 halves, 256 threads a block
    assert blocks_for(step(count=8)) == 1
    assert blocks_for(step(count=MAX_BYTES // 2)) == MAX_BLOCKS


def test_a_slot_holds_flags_epochs_and_two_regions_per_rank() -> None:
    size = slot_bytes(step(count=4096), world=2)
    assert size % 256 == 0
    assert size >= 2 * MAX_BLOCKS * 4 + MAX_BLOCKS * 4 + 2 * 2 * 4096 * 2


class StubRuntime:
    """What `PeerReduce.prepare`/`close` call of `cupy.cuda.runtime`, recorded."""

    def __init__(self, rank: int) -> None:
        self.rank, self.allocated, self.opened, self.closed, self.freed = rank, [], [], [], []
        self.log: list[str] = []

    def malloc(self, nbytes: int) -> int:
        self.allocated.append(nbytes)
        return 0x1000_0000 * (self.rank + 1)

    def memset(self, ptr: int, value: int, nbytes: int) -> None:
        pass

    def ipcGetMemHandle(self, ptr: int) -> bytes:
        return bytes([self.rank + 1]) * 64

    def ipcOpenMemHandle(self, handle: bytes, flags: int) -> int:
        self.opened.append((handle[0] - 1, flags))
        return 0x7000_0000 + handle[0]

    def ipcCloseMemHandle(self, ptr: int) -> None:
        self.closed.append(ptr)
        self.log.append("close handle")

    def free(self, ptr: int) -> None:
        self.freed.append(ptr)
        self.log.append("free")


ARRAYS: dict[int, Any] = {}  # device pointer -> stub array, for the stub communicator


class StubComm:
    """A world communicator of two ranks whose allGather puts rank 1's handle after ours."""

    def __init__(self) -> None:
        self.reduced: list[tuple[int, int, int]] = []

    def allGather(self, send: int, recv: int, count: int, dtype: int, stream: int) -> None:
        ARRAYS[recv].array[:count] = ARRAYS[send].array
        ARRAYS[recv].array[count:] = 2  # rank 1's handle bytes

    def allReduce(self, *args: int) -> None:
        self.reduced.append(args[:3])


def stub_cupy(rank: int) -> Any:
    class Array:
        def __init__(self, array: np.ndarray) -> None:
            self.array = array
            self.data = types.SimpleNamespace(ptr=0x5000_0000 + len(ARRAYS) * 0x1000)
            ARRAYS[self.data.ptr] = self

    runtime = StubRuntime(rank)
    runtime.memcpyAsync = lambda *args: runtime.copies.append(args[:3])  # type: ignore[attr-defined]
    runtime.copies = []  # type: ignore[attr-defined]
    module = types.SimpleNamespace(
        asarray=lambda a: Array(np.array(a)),
        empty=lambda n, dtype: Array(np.zeros(n, dtype)),
        asnumpy=lambda a: a.array,
        RawModule=lambda **kwargs: types.SimpleNamespace(get_function=lambda name: name),
        cuda=types.SimpleNamespace(
            alloc=lambda nbytes: types.SimpleNamespace(ptr=0x9000_0000, size=nbytes),
            runtime=runtime,
            ExternalStream=lambda ptr: types.SimpleNamespace(ptr=ptr),
            get_current_stream=lambda: types.SimpleNamespace(ptr=0, synchronize=lambda: None),
        ),
    )
    return module


def test_prepare_lays_out_slots_by_name_and_opens_the_peers_buffer(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cp = stub_cupy(rank=0)
    monkeypatch.setattr(peer_reduce, "cupy", lambda: cp)
    peer = PeerReduce(StubComm(), rank=0, world=2)
    peer.prepare([step("b", count=4096), step("a", count=1024)])
    # sorted by node, whatever the order given: every rank lays its buffer out alike
    assert peer.offsets == {"a": 0, "b": slot_bytes(step(count=1024), 2)}
    runtime = cp.cuda.runtime
    assert runtime.allocated == [sum(slot_bytes(step(count=c), 2) for c in (1024, 4096))]
    assert runtime.opened == [(1, peer_reduce.IPC_LAZY_PEER_ACCESS)]  # rank 1's, not ours
    assert peer.peers == [0x1000_0000, 0x7000_0002]
    assert set(peer.kernels) == {"f16", "bf16", "f32"}
    peer.prepare([step("a", count=1024)])  # a later variant with the same steps: nothing new
    assert len(runtime.allocated) == 1
    with pytest.raises(RuntimeError, match="not prepared"):
        peer.prepare([step("c")])
    peer.close(lambda stream: runtime.log.append("barrier"))
    assert runtime.closed == [0x7000_0002] and runtime.freed == [0x1000_0000]
    # every rank's mappings closed (a barrier over the world) before any frees what it exported
    assert runtime.log[-3:] == ["close handle", "barrier", "free"]


def test_nccl_collectives_route_small_aligned_all_reduces_to_the_peer_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from optgraph.runtime.cuda import collectives

    cp = stub_cupy(rank=0)
    monkeypatch.setattr(peer_reduce, "cupy", lambda: cp)
    monkeypatch.setattr(collectives, "cupy", lambda: cp)
    comm = StubComm()
    communicators = types.SimpleNamespace(world=2, device=0, comms={(0, 1): comm},
                                          get=lambda step: comm)  # fmt: skip
    backend = collectives.NcclCollectives(communicators, peer_reduce=True)  # type: ignore[arg-type]
    small, gather = step("small"), step("g", kind="all_gather", count=2048)
    backend.prepare([small, gather])
    assert backend.peer is not None and set(backend.peer.offsets) == {"small"}
    assert len(backend.calls(small, CollectiveIssue(0x100, 0x200, 0))) == 1  # the kernel alone
    # An operand and a result off 16 bytes: staged through the step's aligned buffer, never
    # NCCL (the peer rank, whose pointers may be aligned, runs the kernel and waits for ours).
    copy_in, _, copy_out = backend.calls(small, CollectiveIssue(0x108, 0x208, 0))
    copy_in(), copy_out()
    stage = 0x9000_0000
    assert cp.cuda.runtime.copies == [(stage, 0x108, 8192), (0x208, stage + 8192, 8192)]
    assert comm.reduced == []
    offered = CollectiveStep("small", 0, "all_reduce", (0, 1), 0, "f16", 4096, ARENA, ARENA,
                             then_add=(ARENA, ARENA))  # fmt: skip
    assert backend.adds_too(offered, (0x100, 0x200, 0x300, 0x300))
    assert not backend.adds_too(offered, (0x100, 0x200, 0x308, 0x300))
    assert not backend.adds_too(small, (0x100, 0x200))  # nothing offered
    assert collectives.NcclCollectives(communicators).peer is None  # type: ignore[arg-type]


def test_peer_access_is_asked_of_the_run_s_own_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[int, int]] = []
    cp = stub_cupy(rank=0)
    cp.cuda.runtime.deviceCanAccessPeer = lambda a, b: asked.append((a, b)) or (a, b) != (3, 1)
    monkeypatch.setattr(peer_reduce, "cupy", lambda: cp)
    assert peer_reduce.peers_reachable([2, 3])
    assert sorted(asked) == [(2, 3), (3, 2)]
    assert not peer_reduce.peers_reachable([1, 3])  # 3 cannot reach 1
