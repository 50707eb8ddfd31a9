"""The host side of split and streamed programs in the CUDA runtime: pinned buffers, CPU nodes.

The runtime's CuPy modules (`cuda.py`, `memory.py`, `launch.py`) own the device and every
CuPy call; this module holds what runs on the host and takes CuPy's pinned allocator as an
argument, so it imports no CuPy.

- `HostWeights` (per program) and `HostMemory` (per variant): pinned buffers for the *host
  weights* (streamed, `host`-placed and CPU-read weights, at the plan's `host_weight_offsets`) and the *host
  arena* (a mirror of the device arena: CPU results and copies `{to = "cpu"}` at their planned
  offsets). Copies to the device read them with `cudaMemcpyAsync` from pinned memory, so they are
  asynchronous and captured; new weights written there are what the next replay copies.
- `allocate_arena`: when a streamed program's arena (with its prefetch ring) cannot be allocated,
  fall back to the variant lowered with synchronous copies through the least ring (`LoweredVariant.
  fallback`, made at lowering), with a warning, never to a wrong program.
- CPU nodes (`HostStep`): a `HostFunction` evaluates one node with the reference kernels on
  NumPy views of the pinned buffers (built once, before capture); gathers and f32 products write
  straight into the pinned result (the reference kernels' NumPy calls with `out=`), and products
  of expert rows gathered from a host table read the rows in place there (`host_gathers`: the
  gather keeps only its ids, in its own buffer). Nodes reading quantized weights (products,
  gathers, dequantize, also inside a fused node) run the compiled CPU kernels on the blocks
  (`runtime/cpu/quantized_nodes.py`: multi-threaded, no whole matrix dequantized per call;
  f32 results written straight into the pinned buffer). Who calls it is `LoweringOptions.cpu_nodes`
  (`codegen/plan/cpu_node_schedule.py`): the thread that called `run`, between CUDA graphs of the GPU
  parts (the default); or the driver, as a CUDA host function on the node's stream, launched
  with `cuLaunchHostFunc` through ctypes, one per node or one per run of consecutive nodes
  (`HostSegment`: one callback, one GIL acquisition). During capture a host function becomes a
  host node of the one CUDA graph, ordered by the same record/wait events as the kernels.

CuPy's own `Stream.launch_host_func` releases its callback after the first call, so a replayed
graph would call a freed object; a ctypes callback kept alive by the program is safe to replay.
Every host function call from the driver takes the GIL on the driver's thread, which is why the
calling thread is the default.

A CPU node must not call CUDA, and neither may anything Python runs meanwhile on that thread:
the cycle collector is paused during a callback (`from_driver`), since collecting there would run
CuPy destructors that call CUDA. Exceptions are kept in `HostErrors` and raised by the runtime
after the run. Does not handle: CPU nodes reading inputs bound by device pointer (CuPy inputs).
"""

from __future__ import annotations

import ctypes
import warnings
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

import numpy as np

from optgraph.codegen.plan.lowered import LoweredVariant
from optgraph.codegen.plan.steps import CudaPlan, HostStep, Location
from optgraph.errors import InputError, OptGraphError
from optgraph.ir.gc_pause import gc_paused
from optgraph.ir.graph import Graph, TensorType
from optgraph.ir.layout import alias_roots
from optgraph.reference.interpreter import evaluate_node, numpy_dtype
from optgraph.runtime.cpu.quantized_nodes import evaluate_quantized, write_quantized
from optgraph.runtime.cuda.host_gathers import gathers_read_in_place, rows_product

_HOSTFN = ctypes.CFUNCTYPE(None, ctypes.c_void_p)
_DRIVER: Any = None


def _driver() -> Any:
    global _DRIVER
    if _DRIVER is None:
        lib = ctypes.CDLL("libcuda.so.1")
        lib.cuLaunchHostFunc.argtypes = [ctypes.c_void_p, _HOSTFN, ctypes.c_void_p]
        lib.cuLaunchHostFunc.restype = ctypes.c_int
        _DRIVER = lib
    return _DRIVER


class HostErrors(list):  # type: ignore[type-arg]
    """Exceptions raised inside host functions (they cannot propagate through CUDA)."""

    def raise_first(self) -> None:
        if self:
            err = self[0]
            self.clear()
            raise OptGraphError(f"a CPU node failed in its host function: {err!r}") from err


class HostWeights:
    """The pinned buffer of the weights a program keeps on the host, at the plan's offsets."""

    def __init__(self, plan: CudaPlan, alloc_pinned: Callable[[int], Any]):
        self.offsets, nbytes = dict(plan.host_weight_offsets), plan.host_weights_bytes
        self._mem = alloc_pinned(max(nbytes, 1))
        self.bytes = np.frombuffer(self._mem, np.uint8, max(nbytes, 1))
        self.types = {name: plan.types[name] for name in self.offsets}

    def set(self, name: str, value: np.ndarray) -> None:
        raw = np.ascontiguousarray(value).reshape(-1).view(np.uint8)
        off = self.offsets[name]
        self.bytes[off : off + raw.size] = raw

    def view(self, name: str) -> np.ndarray:
        """The pinned array a replay copies `name` from (write into it between runs)."""
        t = self.types[name]
        return np.ndarray(t.shape, numpy_dtype(t.dtype), self.bytes, self.offsets[name])


class HostMemory:
    """A variant's pinned host arena, with the program's host weights."""

    def __init__(self, plan: CudaPlan, weights: HostWeights, alloc_pinned: Callable[[int], Any]):
        self._mem = alloc_pinned(max(plan.host_arena_bytes, 1))
        self.arena = np.frombuffer(self._mem, np.uint8, max(plan.host_arena_bytes, 1))
        self.weights = weights

    def pointer(self, loc: Location) -> int:
        return int(self._base(loc).ctypes.data) + loc.offset

    def bytes_at(self, loc: Location, nbytes: int) -> np.ndarray:
        return self._base(loc)[loc.offset : loc.offset + nbytes]

    def _base(self, loc: Location) -> np.ndarray:
        return self.arena if loc.space == "host_arena" else self.weights.bytes


def allocate_arena(
    variant: LoweredVariant, alloc: Callable[[int], Any], out_of_memory: type[BaseException]
) -> tuple[LoweredVariant, Any]:
    """The device arena of `variant`; when a streamed program's prefetch ring does not fit, the
    arena of its `fallback` (the same segments copied synchronously, the least ring), with a
    warning."""
    try:
        return variant, alloc(max(variant.plan.arena_bytes, 1))
    except out_of_memory:
        if variant.fallback is None:
            raise
    sync = variant.fallback
    warnings.warn(
        f"cuda: the {variant.plan.arena_bytes}-byte arena with its prefetch ring could not be "
        f"allocated; falling back to synchronous weight copies ({sync.plan.arena_bytes} bytes)",
        RuntimeWarning,
        stacklevel=3,
    )
    return sync, alloc(max(sync.plan.arena_bytes, 1))


def _ids_in(buffer: np.ndarray, ids: TensorType) -> np.ndarray:
    """The ids, flat, over the first bytes of a gather's (unmaterialized) pinned buffer."""
    raw = buffer.reshape(-1).view(np.uint8)
    dtype = numpy_dtype(ids.dtype)
    return raw[: ids.numel * dtype.itemsize].view(dtype)


class HostFunction:
    """One CPU node as a host function: NumPy views of its operands and result, built once."""

    def __init__(
        self,
        graph: Graph,
        step: HostStep,
        plan: CudaPlan,
        memory: HostMemory,
        staged_inputs: Mapping[str, np.ndarray],
        errors: HostErrors,
    ):
        self.node = graph.nodes[step.index]
        self.errors = errors
        roots = alias_roots(graph)
        self.args = [self._view(o, plan, memory, staged_inputs, roots) for o in self.node.operands]
        # A quantized operand's view holds its blocks' bytes: the reference reads it by its type.
        self.types = [plan.types[o] for o in self.node.operands]
        self.out = self._view(self.node.name, plan, memory, staged_inputs, roots)
        # Gathers of expert rows no node needs materialized (`host_gathers`): the gather does
        # nothing, the products read the rows in place, by operand index.
        # The ids are kept at the start of the gather's own buffer, live until its last reader
        # (the ids' buffer may be reused after the gather, their last reader in the plan).
        in_place = gathers_read_in_place(graph)
        self.skip = self.node.name in in_place
        self.rows: dict[int, tuple[np.ndarray, np.ndarray, tuple[int, int]]] = {}
        for k, operand in enumerate(self.node.operands):
            gather = in_place.get(roots.get(operand, (operand, 0))[0])
            if gather is not None:
                ids = _ids_in(self.args[k], plan.types[gather.ids])
                kn = plan.types[operand].shape[1:]
                self.rows[k] = (memory.weights.view(gather.table), ids, (kn[0], kn[1]))
        if self.skip:
            self.ids = (self.args[1], _ids_in(self.out, plan.types[self.node.operands[1]]))
        self.callback = _HOSTFN(partial(from_driver, self._call))  # alive as long as this

    def _view(
        self,
        name: str,
        plan: CudaPlan,
        memory: HostMemory,
        staged: Mapping[str, np.ndarray],
        roots: dict[str, tuple[str, int]],
    ) -> np.ndarray:
        t = plan.types[name]
        root, offset = roots.get(name, (name, 0))
        if root in memory.weights.offsets:
            base, start = memory.weights.bytes, memory.weights.offsets[root] + offset
        elif root in staged:
            base, start = staged[root], offset
        else:
            loc = plan.locations[name]
            if loc.space != "host_arena":
                raise InputError(
                    f"CPU node '%{self.node.name}' reads '%{name}', which is not in host memory "
                    f"({loc.space}); inputs read on the CPU must be given as NumPy arrays"
                )
            base, start = memory.arena, loc.offset
        if t.is_quantized:  # the stored blocks, as the reference reads them
            return np.ndarray(t.array_shape, np.uint8, base, start)
        dtype = numpy_dtype(t.dtype)
        return np.ndarray(t.shape, dtype, base, start)

    def _call(self, _: int | None) -> None:
        try:
            if self.skip:  # its readers read the table's rows in place
                source, kept = self.ids
                kept[...] = source.reshape(-1)
                return
            if self.rows:
                self._with_rows_in_place()
            elif not self._into_result():
                self.out[...] = evaluate_quantized(self.node, self.args, self.types)
        except BaseException as err:  # noqa: BLE001 - reported after the run
            self.errors.append(err)

    def _with_rows_in_place(self) -> None:
        """A product (or a fused body's products) of rows gathered from a host table."""
        node = self.node
        if node.op == "matmul":
            table, ids, kn = self.rows[1]
            rows_product(self.args[0], table, ids, kn, self.out)
            return
        assert node.body is not None
        params = {node.body.params[k]: rows for k, rows in self.rows.items()}
        env = dict(zip(node.body.params, self.args))
        for inner in node.body.nodes:
            if inner.op == "matmul" and inner.operands[1] in params:
                assert inner.type is not None
                table, ids, kn = params[inner.operands[1]]
                value = np.empty(inner.type.shape, np.float32)
                rows_product(env[inner.operands[0]], table, ids, kn, value)
                env[inner.name] = value
            else:
                env[inner.name] = evaluate_node(inner, [env[o] for o in inner.operands])
        self.out[...] = env[node.body.result]

    def _into_result(self) -> bool:
        """Products and gathers straight into the pinned result (the same NumPy calls as the
        reference kernels, without their temporary and its copy: a gather of expert weights
        moves megabytes). False where the node takes the general path."""
        node, args = self.node, self.args
        if any(t.is_quantized for t in self.types):  # blocks: the CPU kernels read them
            return write_quantized(node, args, self.types, self.out)
        if node.op == "get_rows" and self.out.flags.c_contiguous:
            rows = args[0].reshape(-1, args[0].shape[-1])
            ids = args[1].reshape(-1)
            if ids.size and (ids.min() < 0 or ids.max() >= rows.shape[0]):
                return False  # the reference kernel raises the error with its message
            np.take(rows, ids, axis=0, out=self.out.reshape(-1, rows.shape[1]))
            return True
        plain = not node.attrs.get("transpose_a") and not node.attrs.get("transpose_b")
        # f32 only: the reference widens f16/bf16 operands to f32 and rounds the product once.
        f32 = all(a.dtype == np.float32 for a in (*args, self.out))
        if node.op == "matmul" and plain and f32 and all(a.flags.c_contiguous for a in args):
            np.matmul(args[0], args[1], out=self.out)
            return True
        return False

    def __call__(self) -> None:
        """Run the node now, in the calling thread (errors go to `errors`, as in a callback)."""
        self._call(None)

    def launch(self, stream_ptr: int) -> None:
        launch_host_func(stream_ptr, self.callback)


class HostSegment:
    """Consecutive CPU nodes of one stream as one host function: one ctypes callback (and one
    GIL acquisition by the driver's thread) for the whole segment instead of one per node."""

    def __init__(self, functions: list[HostFunction]):
        self.functions = functions
        self.callback = _HOSTFN(partial(from_driver, self._call))  # alive as long as this

    def _call(self, _: int | None) -> None:
        for fn in self.functions:
            fn._call(None)

    def launch(self, stream_ptr: int) -> None:
        launch_host_func(stream_ptr, self.callback)


def from_driver(call: Callable[[int | None], None], arg: int | None) -> None:
    """`call(arg)` as the driver's thread calls a host function: without a cycle collection.
    A collection there would finalize whatever unreachable CuPy streams, events or memory it
    finds, and their destructors call CUDA, which a host function may not: they fail with
    cudaErrorNotPermitted and the handles leak (seen on the H200 in the split-MoE GPU test)."""
    with gc_paused():
        call(arg)


def launch_host_func(stream_ptr: int, callback: Any) -> None:
    """`cuLaunchHostFunc(stream, callback, NULL)`: a host node when the stream is capturing."""
    status = _driver().cuLaunchHostFunc(ctypes.c_void_p(stream_ptr), callback, None)
    if status != 0:
        raise OptGraphError(f"cuLaunchHostFunc failed with CUresult {status}")
