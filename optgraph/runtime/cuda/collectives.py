"""Collectives of one rank on the GPU: NCCL communicators and the host calls of `CollectiveStep`s.

A rank's program (`runtime/multi/gpus.py`, `codegen/rank_programs.py`) is an ordinary CUDA
program whose plan also holds `CollectiveStep`s. `RankProgram` runs it like `CudaProgram` does
(eager run, capture, replay), issuing each collective step through a *collectives backend*:

- `NcclCollectives(communicators, peer_reduce=...)`: with `peer_reduce`, an all_reduce over
  every rank of at most 1 MiB is one kernel writing into the peers' memory
  (`runtime/cuda/peer_reduce.py`, which may also do the residual add after it:
  `CollectiveStep.then_add`); everything else `cupy.cuda.nccl` on the step's stream:
  `allReduce` (sum), `allGather` (into scratch, then one `memcpy2DAsync` per rank where the gathered axis is not
  the leading one), `send`/`recv` on the world communicator. NCCL calls are captured into the
  rank's CUDA graph like kernels are.
- `FedCollectives(values)`: for running one rank alone on one GPU (no peers): a collective's
  result is copied in from pinned memory holding the value the reference computed for it, and
  its local operand is copied out, so that what this rank would have sent can be compared with
  the reference too (`sent`).

`Communicators(device, ids)` creates this rank's communicators, one per group, in the sorted
order of the groups: every rank initializes shared groups in the same order, so no two ranks
wait on each other (NCCL's initialization blocks until all members have called it).
CuPy (and NCCL with it) is reached only through `device.cupy`, inside functions.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np

from optgraph.codegen.plan.lowered import LoweredVariant
from optgraph.codegen.plan.steps import CollectiveStep
from optgraph.errors import OptGraphError
from optgraph.ir.graph import DTYPE_BYTES
from optgraph.reference.kernels import numpy_dtype
from optgraph.runtime.cuda.device import cupy, nccl
from optgraph.runtime.cuda.launch import Variant
from optgraph.runtime.cuda.memory import D2D, D2H, H2D
from optgraph.runtime.cuda.pdl import follows_kernel
from optgraph.runtime.cuda.peer_reduce import (
    VECTOR,
    CollectiveIssue,
    PeerReduce,
    eligible,
)
from optgraph.runtime.cuda.runner import CudaProgram

# ncclDataType_t (nccl.h); bool moves as bytes (verify refuses summing bools).
NCCL_DTYPES = {"f32": 7, "f16": 6, "bf16": 9, "i32": 2, "i64": 4, "bool": 1}
NCCL_SUM = 0
Group = tuple[int, ...]
Call = Callable[[], Any]
# What `cupy.cuda.nccl.get_unique_id()` returns: bytes in CuPy 14 (a tuple of ints before); passed
# on to `NcclCommunicator` exactly as it came, since each version accepts only its own form.
UniqueId = bytes | tuple[int, ...]


def unique_id() -> UniqueId:
    """A fresh NCCL unique id (the rendezvous token every member of one communicator shares)."""
    made: UniqueId = nccl().get_unique_id()
    return made


class Communicators:
    """Device `device`'s NCCL communicators, one per group it belongs to (`ids`: group ->
    unique id). Groups are initialized in sorted order (see the module docstring)."""

    def __init__(self, device: int, ids: Mapping[Group, UniqueId]):
        self.device = device
        self.comms: dict[Group, Any] = {}
        for group in sorted(ids):
            if device in group:
                self.comms[group] = nccl().NcclCommunicator(
                    len(group), ids[group], group.index(device)
                )
        self.world = max((len(g) for g in ids), default=1)
        self._token: Any = None  # four bytes on the device, all-reduced by `barrier`

    def barrier(self, stream: Any) -> None:
        """Enqueue on `stream` a one-element all_reduce over every rank: work enqueued after it
        starts on all ranks at about the same moment (the world group must be in `ids`)."""
        comm = self.comms[tuple(range(self.world))]
        if self._token is None:
            self._token = cupy().cuda.alloc(4)
        ptr = int(self._token.ptr)
        comm.allReduce(ptr, ptr, 1, NCCL_DTYPES["i32"], NCCL_SUM, stream.ptr)  # value unused

    def get(self, step: CollectiveStep) -> Any:
        group = tuple(range(self.world)) if step.kind in ("send", "recv") else step.group
        comm = self.comms.get(group)
        if comm is None:
            raise OptGraphError(
                f"{step.kind} '%{step.node}': device {self.device} has no communicator for "
                f"group {list(group)}"
            )
        return comm

    def destroy(self) -> None:
        for comm in self.comms.values():
            comm.destroy()
        self.comms.clear()


def gather_scratch_bytes(steps: list[CollectiveStep]) -> int:
    """Scratch bytes the gathers of `steps` need (those whose gathered axis is not leading)."""
    sizes = [
        s.count * len(s.group) * DTYPE_BYTES[s.dtype]
        for s in steps
        if s.kind == "all_gather" and s.rows > 1
    ]
    return max(sizes, default=0)


class NcclCollectives:
    """Collective steps through NCCL (see the module docstring); with `peer_reduce`, the small
    all_reduces over every rank go to one peer-memory kernel instead (`peer_reduce`)."""

    def __init__(self, communicators: Communicators, *, peer_reduce: bool = False):
        self.communicators = communicators
        self.scratch: Any = None
        world = communicators.world
        self.peer: PeerReduce | None = None
        if peer_reduce and world > 1:  # the parent checked that the GPUs reach each other
            comm = communicators.comms[tuple(range(world))]
            self.peer = PeerReduce(comm, communicators.device, world)

    def prepare(self, steps: list[CollectiveStep]) -> None:
        """Allocate the gather scratch and the peer buffers (before any capture: a CUDA graph
        bakes them in)."""
        need = gather_scratch_bytes(steps)
        if need and (self.scratch is None or self.scratch.mem.size < need):
            self.scratch = cupy().cuda.alloc(need)
        if self.peer is not None:
            self.peer.prepare([s for s in steps if eligible(s, self.communicators.world)])

    def close(self) -> None:
        if self.peer is not None:
            self.peer.close(self.communicators.barrier)

    def adds_too(self, step: CollectiveStep, pointers: tuple[int, ...]) -> bool:
        """Whether `calls` (given these pointers: src, dst, then the add's addend and result)
        does `step.then_add` too, so that the add's own launch is skipped: the peer kernel
        does, where all four are on 16 bytes (a decision of this rank alone)."""
        aligned = not any(p % VECTOR for p in pointers)
        return step.then_add is not None and self._peer_takes(step) and aligned

    def _peer_takes(self, step: CollectiveStep) -> bool:
        """Whether the peer kernel does `step`: the same answer on every rank."""
        return self.peer is not None and step.node in self.peer.offsets

    def calls(self, step: CollectiveStep, at: CollectiveIssue) -> list[Call]:
        """The host calls of `step`; `at.add`: the then_add pointers where `adds_too` said yes;
        `at.pdl`: where the step may start while the kernel before it on its stream finishes
        (the peer kernel only; NCCL's calls cannot)."""
        peer = self.peer
        if peer is not None and self._peer_takes(step):
            return peer.calls(step, at)
        src, dst, stream = at.src, at.dst, at.stream
        comm = self.communicators.get(step)
        dtype = NCCL_DTYPES[step.dtype]
        if step.kind == "all_reduce":
            return [partial(comm.allReduce, src, dst, step.count, dtype, NCCL_SUM, stream)]
        if step.kind == "send":
            return [partial(comm.send, src, step.count, dtype, step.peer, stream)]
        if step.kind == "recv":
            return [partial(comm.recv, dst, step.count, dtype, step.peer, stream)]
        if step.rows == 1:
            return [partial(comm.allGather, src, dst, step.count, dtype, stream)]
        # NCCL lays the chunks out rank after rank; the result interleaves them row by row.
        scratch = int(self.scratch.ptr)
        calls: list[Call] = [partial(comm.allGather, src, scratch, step.count, dtype, stream)]
        chunk = step.count * DTYPE_BYTES[step.dtype]
        width = chunk // step.rows
        pitch = width * len(step.group)
        rt = cupy().cuda.runtime
        for k in range(len(step.group)):
            args = (dst + k * width, pitch, scratch + k * chunk, width, width, step.rows, D2D)
            calls.append(partial(rt.memcpy2DAsync, *args, stream))
        return calls


class FedCollectives:
    """One rank alone: collective results fed from `values` (by node name: the reference's
    values), local operands kept in `sent` (by node name) after each run."""

    def __init__(self, values: Mapping[str, np.ndarray]):
        self.values = values
        self.pinned: dict[str, tuple[Any, np.ndarray]] = {}  # keeps pinned memory alive
        self.fed_bytes: dict[str, int] = {}
        self.sent: dict[str, np.ndarray] = {}

    def _pinned(self, key: str, nbytes: int) -> np.ndarray:
        if key not in self.pinned:
            mem = cupy().cuda.alloc_pinned_memory(max(nbytes, 1))
            self.pinned[key] = (mem, np.frombuffer(mem, np.uint8, max(nbytes, 1)))
        return self.pinned[key][1]

    def prepare(self, steps: list[CollectiveStep]) -> None:
        for step in steps:
            nbytes = step.count * DTYPE_BYTES[step.dtype]
            if step.src is not None:
                self._pinned("sent:" + step.node, nbytes)
            if step.dst is not None:
                if step.node not in self.values:
                    raise OptGraphError(f"{step.kind} '%{step.node}': no value to feed")
                raw = np.ascontiguousarray(self.values[step.node]).reshape(-1).view(np.uint8)
                self._pinned("fed:" + step.node, raw.nbytes)[: raw.nbytes] = raw
                self.fed_bytes[step.node] = raw.nbytes

    def adds_too(self, step: CollectiveStep, pointers: tuple[int, ...]) -> bool:
        return False

    def calls(self, step: CollectiveStep, at: CollectiveIssue) -> list[Call]:
        src, dst, stream = at.src, at.dst, at.stream
        rt = cupy().cuda.runtime
        calls: list[Call] = []
        nbytes = step.count * DTYPE_BYTES[step.dtype]
        if step.src is not None:
            out = self.pinned["sent:" + step.node][1]
            calls.append(partial(rt.memcpyAsync, out.ctypes.data, src, nbytes, D2H, stream))
        if step.dst is not None:
            fed = self.pinned["fed:" + step.node][1]
            size = self.fed_bytes[step.node]
            calls.append(partial(rt.memcpyAsync, dst, fed.ctypes.data, size, H2D, stream))
        return calls

    def close(self) -> None:
        pass

    def read_sent(self, steps: list[CollectiveStep]) -> dict[str, np.ndarray]:
        """The local operand of each step that sends one, as a flat array of its dtype."""
        sent = {}
        for step in steps:
            if step.src is not None:
                raw = self.pinned["sent:" + step.node][1][: step.count * DTYPE_BYTES[step.dtype]]
                sent[step.node] = raw.copy().view(numpy_dtype(step.dtype))
        self.sent = sent
        return sent


Collectives = NcclCollectives | FedCollectives


class RankVariant(Variant):
    """A `Variant` whose plan may hold `CollectiveStep`s, issued through `collectives`."""

    def __init__(self, lowered: LoweredVariant, collectives: Collectives, **kwargs: Any):
        super().__init__(lowered, **kwargs)
        self.collectives = collectives
        steps = [s for s in self.plan.steps if isinstance(s, CollectiveStep)]
        collectives.prepare(steps)
        # The add after an all_reduce with `then_add`, by the all_reduce's id; `skipped`: the
        # ids of those adds the last issued all_reduce did itself (ops are built in step order).
        plan_steps = self.plan.steps
        self.add_after = {
            id(s): plan_steps[i + 1]
            for i, s in enumerate(plan_steps)
            if isinstance(s, CollectiveStep) and s.then_add is not None
        }
        self.skipped: set[int] = set()
        # Steps right after a kernel on their stream: a collective's own kernel (the peer
        # all_reduce) may be launched with the programmatic attribute there.
        self.after_kernel = {id(plan_steps[i]) for i in follows_kernel(plan_steps)}

    def _op(self, step: object, bound: Mapping[str, int], programmatic: bool = False) -> Call:
        if id(step) in self.skipped:
            return lambda: None  # done by the all_reduce before it
        if not isinstance(step, CollectiveStep):
            return super()._op(step, bound, programmatic)
        src = self.pointer(step.src, bound) if step.src is not None else 0
        dst = self.pointer(step.dst, bound) if step.dst is not None else 0
        add = (0, 0)
        if step.then_add is not None:
            addend, out = (self.pointer(x, bound) for x in step.then_add)
            follower = id(self.add_after[id(step)])
            self.skipped.discard(follower)
            if self.collectives.adds_too(step, (src, dst, addend, out)):
                add = (addend, out)
                self.skipped.add(follower)
        pdl = self.pdl if id(step) in self.after_kernel else None
        at = CollectiveIssue(src, dst, self.streams.get(step.stream).ptr, add, pdl)
        calls = self.collectives.calls(step, at)

        def issue() -> None:
            for call in calls:
                call()

        return issue


class RankProgram(CudaProgram):
    """One rank's program on its GPU: a `CudaProgram` whose collectives go to `collectives`."""

    def __init__(self, lowered: Any, *, collectives: Collectives, **kwargs: Any):
        self.collectives = collectives
        super().__init__(lowered, **kwargs)

    def _new_variant(self, lowered: LoweredVariant) -> Variant:
        return RankVariant(
            lowered, self.collectives, weights=self.weights, streams=self.streams,
            host_errors=self.host_errors, pdl=self.options.pdl, cpu_nodes=self.options.cpu_nodes,
        )  # fmt: skip
