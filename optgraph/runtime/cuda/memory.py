"""Device and pinned host memory of the CUDA runtime: the weights, and each variant's buffers.

- `DeviceWeights` (one per program): every weight the device keeps, in one device buffer at the
  plan's 256-aligned offsets (`CudaPlan.weight_offsets`), and the pinned host weights of split and
  streamed programs (`offload.HostWeights`). `upload` copies them in, and (unless forced)
  does nothing when given the very same arrays as last time, still alive (`last_arrays`), so
  passing one dict of weights run after run costs no copy.
- `VariantMemory` (one per specialization): the device arena at the planned offsets (or, for a
  graph without a memory plan, one buffer per value: the unplanned fallback), the pinned host
  arena, the device input buffer that staged inputs are copied into, and the pinned staging of
  inputs and outputs. `pointer` resolves a plan `Location` to an address; `stage_inputs` and
  `read_output` are the host ends of a run.

All of it is allocated up front, outside any capture: a CUDA graph bakes these addresses in.
Before it is, `check_device_memory` compares what the plan needs (`device_need`: weights, arena,
unplanned values, input buffer) with the device's free memory (`cudaMemGetInfo`, plus the blocks
CuPy's pool holds free) and refuses a program that cannot fit with both figures, at once, rather
than failing half way through the allocations:

    cuda: not enough memory on the device: at least 7.45 GiB needed (weights 381 MiB, arena
    5.96 GiB, inputs 1.49 GiB), and 4 GiB are available (free on the current GPU: ...)

`pinned_bytes` is the pinned host memory a variant takes (what `optgraph run` counts on the host).
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from optgraph.codegen.plan.lowered import LoweredVariant
from optgraph.codegen.plan.steps import HOST_SPACES, CudaPlan, Location
from optgraph.errors import InputError
from optgraph.host_memory import Available, check_fits, size_text
from optgraph.ir.graph import Graph, TensorType, Weight
from optgraph.ir.weight_layout import model_type, stored_array
from optgraph.reference.kernels import ir_dtype, numpy_dtype
from optgraph.runtime.cuda.device import cupy
from optgraph.runtime.cuda.offload import HostMemory, HostWeights, allocate_arena
from optgraph.runtime.cuda.staged_upload import SLOT_BYTES, StagedUpload
from optgraph.runtime.last_arrays import LastArrays

H2D, D2H, D2D = 1, 2, 3  # cudaMemcpyKind
ALIGN = 256


def align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def staging_bytes(names: Iterable[str], types: Mapping[str, TensorType]) -> int:
    """Bytes of one buffer holding `names` one after another, each 256-aligned (at least 1)."""
    return sum(align(max(types[n].nbytes, 1)) for n in dict.fromkeys(names))


@dataclass(frozen=True)
class DeviceNeed:
    """Device bytes a program's buffers take (`DeviceWeights`, `VariantMemory`)."""

    weights: int
    arena: int
    values: int  # the unplanned fallback: a buffer per value
    inputs: int

    @property
    def total(self) -> int:
        return self.weights + self.arena + self.values + self.inputs

    def describe(self) -> str:
        parts = [("weights", self.weights), ("arena", self.arena)]
        parts += [("values", self.values), ("inputs", self.inputs)]
        return ", ".join(f"{name} {size_text(n)}" for name, n in parts if n)


def device_need(variant: LoweredVariant, with_weights: bool) -> DeviceNeed:
    """What `variant`'s buffers take on the device (and the program's weights buffer, when
    `with_weights`); a streamed arena counts its fallback's, the least that is allocated."""
    plan = variant.plan
    arena = plan.arena_bytes
    if variant.fallback is not None:
        arena = min(arena, variant.fallback.plan.arena_bytes)
    return DeviceNeed(
        weights=plan.weights_bytes if with_weights else 0,
        arena=arena,
        values=sum(plan.value_bytes.values()),
        inputs=staging_bytes(plan.inputs, plan.types),
    )


def device_free_memory() -> Available:
    """The bytes the current GPU can still give: its free memory and CuPy's pooled free blocks."""
    cp = cupy()
    free, _ = cp.cuda.runtime.memGetInfo()
    pooled = cp.get_default_memory_pool().free_bytes()
    return int(free) + int(pooled), "free on the current GPU: cudaMemGetInfo and CuPy's pool"


def check_device_memory(need: DeviceNeed, available: Available) -> None:
    """Refuse (an `OptGraphError` with both figures) buffers that cannot fit on the device."""
    check_fits(need.total, available, "cuda", need.describe(), " on the device")


def pinned_bytes(variant: LoweredVariant) -> int:
    """The pinned host memory of `variant` (staging of inputs and outputs, host-placed values)
    and of the program's host weights."""
    plan = variant.plan
    staging = staging_bytes(plan.inputs, plan.types) + staging_bytes(plan.outputs, plan.types)
    return staging + plan.host_arena_bytes + plan.host_weights_bytes


def check_array(value: Any, t: TensorType, what: str) -> None:
    """`value` is an array of `t`: its shape and dtype; a quantized `t` is held as its blocks'
    bytes, `uint8` of `t.array_shape` (as a GGUF tensor's data)."""
    shape = tuple(getattr(value, "shape", ()))
    found = np.dtype(getattr(value, "dtype", np.float64))
    if t.is_quantized:
        if shape != t.array_shape or found != np.uint8:
            raise InputError(
                f"{what}: expected {t} as its blocks' bytes, uint8{list(t.array_shape)}; "
                f"got {ir_dtype(found) or found}{list(shape)}"
            )
        return
    dtype = ir_dtype(found)
    if shape != t.shape or dtype != t.dtype:
        raise InputError(f"{what}: expected {t}, got {dtype}{list(shape)}")


class DeviceCopies:
    """Where this process's programs hold a device copy of a host array (by the array's
    identity, each held weakly, the layout it was stored in, and the device): a second program
    on that device given the very same array (a model's prefill and decode steps share their
    weights) copies it from the first one's buffer, device to device, instead of from host
    memory again. An entry is valid
    while the array and the owner live and the owner has not uploaded since (`forget`). As with
    `LastArrays`, an array changed in place since is still "the same": a forced upload
    (`CudaProgram.set_weights`) copies it from the host."""

    def __init__(self) -> None:
        self._entries: dict[tuple[int, str | None, int], tuple[Any, Any, int]] = {}

    def find(self, array: Any, layout: str | None, device: int) -> int | None:
        """The address of a copy of `array` stored in `layout` on `device`, or None."""
        key = (id(array), layout, device)
        entry = self._entries.get(key)
        if entry is None:
            return None
        array_ref, owner_ref, offset = entry
        owner = owner_ref()
        if array_ref() is not array or owner is None:
            del self._entries[key]
            return None
        return int(owner.ptr) + offset

    def remember(self, array: Any, layout: str | None, owner: DeviceWeights, offset: int) -> None:
        try:
            array_ref = weakref.ref(array)
        except TypeError:
            return  # not referable weakly (a list): not shared
        key = (id(array), layout, owner.device)
        self._entries[key] = (array_ref, weakref.ref(owner), offset)

    def forget(self, owner: DeviceWeights) -> None:
        """Drop every copy `owner` holds (it is about to write its buffer anew)."""
        for key in [k for k, (_, o, _) in self._entries.items() if o() is owner or o() is None]:
            del self._entries[key]


DEVICE_COPIES = DeviceCopies()


def _transpose_on_device(
    w: Weight, value: Any, device: Mapping[str, int], host: Mapping[str, int], cp: Any
) -> bool:
    """Whether `w`'s host array is transposed on the device (copied in as the model lays it
    out, then `stored_array` there): a weight with the `transposed` layout kept on the device
    only. A host transpose of a large matrix reads with a stride of a row, a few hundred MB/s
    (12 s for a 4 GB f16 Llama); the device does it at its own bandwidth."""
    return (
        w.ann.layout == "transposed"
        and w.name in device
        and w.name not in host
        and not isinstance(value, cp.ndarray)
        and w.type.nbytes > 0
    )


class DeviceWeights:
    """A program's weights on the device (and in pinned host memory where the plan says so)."""

    def __init__(self, graph: Graph, plan: CudaPlan):
        cp = cupy()
        self.graph = graph
        self.offsets = dict(plan.weight_offsets)
        self.device = int(cp.cuda.Device().id)  # the current device: where the buffer is
        self.buffer = cp.cuda.alloc(max(plan.weights_bytes, 1))
        # Weights kept in pinned host memory (streamed, host-placed, read on the CPU).
        self.host = HostWeights(plan, cp.cuda.alloc_pinned_memory)
        self._last = LastArrays()

    @property
    def ptr(self) -> int:
        return int(self.buffer.ptr)

    @property
    def is_set(self) -> bool:
        return not self._last.empty

    def upload(
        self, weights: Mapping[str, Any], before_write: Callable[[], None], force: bool = False
    ) -> bool:
        """Copy `weights` in (NumPy or CuPy arrays); False, copying nothing, when they are the
        very arrays of the last upload (`force`: copy them anyway, e.g. changed in place).
        `before_write` runs first (a replay in flight may still read the old weights: the caller
        synchronizes its streams there)."""
        cp = cupy()
        names = [w.name for w in self.graph.weights]
        if not force and self._last.same(names, weights):
            return False
        for w in self.graph.weights:
            if w.name not in weights:
                raise InputError(f"missing weight '%{w.name}' ({w.type})", w.span)
        before_write()
        DEVICE_COPIES.forget(self)
        stream = cp.cuda.get_current_stream()
        # Slots no larger than the weights (a small model pins kilobytes, not 3 x 64 MiB).
        total = sum(w.type.nbytes for w in self.graph.weights)
        with StagedUpload(cp, stream, slot_bytes=max(1, min(SLOT_BYTES, total))) as staged:
            for w in self.graph.weights:
                self._upload_one(w, weights[w.name], staged, force)
        self._last.remember(names, weights)
        return True

    def _upload_one(self, w: Weight, value: Any, staged: StagedUpload, force: bool) -> None:
        """Queue weight `w`'s copies: from another program's device copy of the same array,
        through `staged` from the host, or transposed on the device (`_transpose_on_device`).
        Device work runs on `staged.stream`, in order."""
        cp = cupy()
        check_array(value, model_type(w), f"weight '%{w.name}'")
        stream = staged.stream.ptr
        base = self.ptr
        copy = None if force else DEVICE_COPIES.find(value, w.ann.layout, self.device)
        if copy is not None and w.name in self.offsets and w.name not in self.host.offsets:
            cp.cuda.runtime.memcpyAsync(
                base + self.offsets[w.name], copy, w.type.nbytes, D2D, stream
            )
            DEVICE_COPIES.remember(value, w.ann.layout, self, self.offsets[w.name])
            return
        source = value
        if _transpose_on_device(w, value, self.offsets, self.host.offsets, cp):
            host = np.asarray(value)  # the model's layout, in through the slots
            value = cp.empty(host.shape, dtype=host.dtype)
            staged.copy(int(value.data.ptr), host)
        value = stored_array(w, value)
        if w.name in self.host.offsets:
            host = value.get() if isinstance(value, cp.ndarray) else np.asarray(value)
            self.host.set(w.name, host)
        if w.name not in self.offsets:
            return  # not kept on the device
        dst = base + self.offsets[w.name]
        if isinstance(value, cp.ndarray):
            value = cp.ascontiguousarray(value)
            cp.cuda.runtime.memcpyAsync(dst, value.data.ptr, w.type.nbytes, D2D, stream)
        elif w.type.nbytes:
            staged.copy(dst, np.asarray(value))
        if not isinstance(source, cp.ndarray):
            DEVICE_COPIES.remember(source, w.ann.layout, self, self.offsets[w.name])


class VariantMemory:
    """The buffers of one specialization (see the module docstring); `graph` and `plan` may be
    the synchronous-copy fallback of a streamed program whose arena did not fit."""

    def __init__(self, lowered: LoweredVariant, weights: DeviceWeights):
        cp = cupy()
        check_device_memory(device_need(lowered, with_weights=False), device_free_memory())
        self.weights = weights
        # Split/streamed programs: a streamed arena that does not fit falls back to synchronous
        # copies; host values and host weights live in pinned memory (runtime/cuda/offload.py).
        lowered, self.arena = allocate_arena(
            lowered, cp.cuda.alloc, cp.cuda.memory.OutOfMemoryError
        )
        self.lowered = lowered
        self.graph, self.plan = lowered.graph, lowered.plan
        plan = self.plan
        self.host = HostMemory(plan, weights.host, cp.cuda.alloc_pinned_memory)
        self.values = {n: cp.cuda.alloc(b) for n, b in plan.value_bytes.items()}
        self.in_offsets, cursor = {}, 0
        for name in plan.inputs:
            self.in_offsets[name] = cursor
            cursor += align(max(plan.types[name].nbytes, 1))
        self.in_bytes = cursor
        self.in_dev = cp.cuda.alloc(max(cursor, 1))
        self.in_host_mem = cp.cuda.alloc_pinned_memory(max(cursor, 1))
        self.in_host = np.frombuffer(self.in_host_mem, np.uint8, max(cursor, 1))
        self.out_offsets, cursor = {}, 0
        for name in dict.fromkeys(plan.outputs):
            self.out_offsets[name] = cursor
            cursor += align(max(plan.types[name].nbytes, 1))
        self.out_host_mem = cp.cuda.alloc_pinned_memory(max(cursor, 1))
        self.out_host = np.frombuffer(self.out_host_mem, np.uint8, max(cursor, 1))

    def pointer(self, loc: Location, bound: Mapping[str, int]) -> int:
        """The address of `loc`; inputs in `bound` are the caller's device arrays."""
        if loc.space in HOST_SPACES:
            return self.host.pointer(loc)
        if loc.space == "arena":
            return int(self.arena.ptr) + loc.offset
        if loc.space == "weights":
            return self.weights.ptr + loc.offset
        if loc.space == "input":
            base = bound.get(loc.key)
            if base is None:
                base = int(self.in_dev.ptr) + self.in_offsets[loc.key]
            return base + loc.offset
        return int(self.values[loc.key].ptr) + loc.offset

    def stage_inputs(self, staged: Mapping[str, np.ndarray]) -> None:
        """Write host inputs into pinned staging (the run's first copy reads them from there)."""
        for name, array in staged.items():
            off, n = self.in_offsets[name], self.plan.types[name].nbytes
            self.in_host[off : off + n] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)

    def read_output(self, name: str) -> np.ndarray:
        """A copy of output `name` from pinned memory (after the run's stream synchronized)."""
        t = self.plan.types[name]
        loc = self.plan.locations[name]
        if loc.space in HOST_SPACES:
            raw = self.host.bytes_at(loc, t.nbytes).copy()
        else:
            off = self.out_offsets[name]
            raw = self.out_host[off : off + t.nbytes].copy()
        return raw.view(numpy_dtype(t.dtype)).reshape(t.shape)
