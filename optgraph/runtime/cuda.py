"""The CuPy runtime: run a scheduled graph on the GPU, as one CUDA graph replayed run after run.

    program = CudaProgram(planned_graph, weights=params)        # or use_graph=False: eager
    outputs = program.run({"x": x})                              # numpy in, numpy out
    program.run({"x": x_dev}, out={"y": y_dev})                  # cupy in/out, bound by pointer

How a run is issued (`_Variant.issue_list`), all of it host calls in `graph.nodes` order:

1. staged inputs: one `memcpyAsync` from a pinned staging buffer into the program's input buffer
   on stream 0 (inputs given as CuPy arrays are read in place instead: bound by pointer);
2. fork: stream 0 records an event that every other stream waits for;
3. every step of `codegen.cuda_plan` on its node's stream: our kernels (one RawModule per program,
   compiled from the generated source, cached by text), cuBLAS (one handle and workspace per
   stream), device copies, and `record`/`wait` events;
4. join: every other stream records an event stream 0 waits for;
5. outputs: a device-to-host copy into pinned staging (or device-to-device into `out` arrays).

Buffers: node results live in one device arena at their planned offsets; aliasing views point into
their roots; weights live in one buffer, uploaded once (again only when other arrays are given);
graphs without a memory plan get one buffer per value (the unplanned fallback).

CUDA graphs: the first run of a key (`cuda_graph_cache.GraphKey`) runs eagerly (this compiles the
kernels and warms cuBLAS up), then the issue list is captured on stream 0 (the other streams join
through the fork event) with allocation forbidden, and instantiated; later runs replay it. A run
whose bound pointers changed captures again and applies it with `cudaGraphExecUpdate`; new input
shapes build a new variant (`specialize`) and capture anew. `counters` says which happened.
CuPy is imported lazily and only here.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import numpy as np

from optgraph.codegen.cuda_plan import (
    HOST_SPACES,
    CopyStep,
    CudaPlan,
    EventStep,
    GemmStep,
    HostStep,
    KernelStep,
    Location,
    lower_cuda,
    storage,
)
from optgraph.errors import InputError, OptGraphError
from optgraph.ir.graph import Graph, TensorType
from optgraph.runtime.cuda_blas import WORKSPACE_BYTES, load_blas
from optgraph.runtime.cuda_graph_cache import (
    Action,
    Binding,
    GraphCache,
    GraphKey,
    RuntimeCounters,
    input_signature,
    retype_graph,
)
from optgraph.runtime.cuda_offload import (
    HostErrors,
    HostFunction,
    HostMemory,
    HostWeights,
    allocate_arena,
)
from optgraph.runtime.reference_kernels import ir_dtype, numpy_dtype

H2D, D2H, D2D = 1, 2, 3
COPY_KINDS = {"h2h": 0, "h2d": H2D, "d2h": D2H, "d2d": D2D}  # cudaMemcpyKind by CopyStep.kind
ALIGN = 256
DOT_VERBOSE = 1
_MODULES: dict[str, Any] = {}  # module source -> cupy.RawModule, shared by all programs


def _cupy() -> Any:
    import cupy

    return cupy


def is_available() -> bool:
    """Whether CuPy imports and sees at least one CUDA device."""
    try:
        return int(_cupy().cuda.runtime.getDeviceCount()) > 0
    except Exception:  # noqa: BLE001 - any failure means no usable GPU
        return False


class AllocationDuringCapture(RuntimeError):
    """Something asked for device memory while a CUDA graph was being captured."""


def _align(n: int) -> int:
    return -(-n // ALIGN) * ALIGN


def _module(source: str) -> Any:
    module = _MODULES.get(source)
    if module is None:
        module = _cupy().RawModule(code=source, options=("--std=c++17",))
        _MODULES[source] = module
    return module


class _Variant:
    """One specialization: a plan for fixed input types, its device buffers and functions."""

    def __init__(self, program: CudaProgram, graph: Graph):
        cp = _cupy()
        self.program, self.graph = program, graph
        # Split/streamed programs: a streamed arena that does not fit falls back to synchronous
        # copies; host values and host weights live in pinned memory (runtime/cuda_offload.py).
        graph, plan, self.arena = allocate_arena(
            graph, lower_cuda(graph), cp.cuda.alloc, cp.cuda.memory.OutOfMemoryError, lower_cuda
        )
        self.graph, self.plan = graph, plan
        self.host = HostMemory(plan, program.host_weights, cp.cuda.alloc_pinned_memory)
        self.host_functions: list[HostFunction] = []
        self.values = {n: cp.cuda.alloc(b) for n, b in plan.value_bytes.items()}
        self.in_offsets, cursor = {}, 0
        for name in plan.inputs:
            self.in_offsets[name] = cursor
            cursor += _align(max(plan.types[name].nbytes, 1))
        self.in_bytes = cursor
        self.in_dev = cp.cuda.alloc(max(cursor, 1))
        self.in_host_mem = cp.cuda.alloc_pinned_memory(max(cursor, 1))
        self.in_host = np.frombuffer(self.in_host_mem, np.uint8, max(cursor, 1))
        self.out_offsets, cursor = {}, 0
        for name in dict.fromkeys(plan.outputs):
            self.out_offsets[name] = cursor
            cursor += _align(max(plan.types[name].nbytes, 1))
        self.out_host_mem = cp.cuda.alloc_pinned_memory(max(cursor, 1))
        self.out_host = np.frombuffer(self.out_host_mem, np.uint8, max(cursor, 1))
        module = _module(plan.source()) if plan.kernels else None
        # Loading every function now compiles the module before any capture.
        self.functions = {name: module.get_function(name) for name in plan.kernels}
        self.launchers = {name: getattr(f, "kernel", None) for name, f in self.functions.items()}
        self.events = {e: cp.cuda.Event(block=False, disable_timing=True) for e in plan.events}
        others = [s for s in plan.streams if s != 0]
        self.fork = cp.cuda.Event(block=False, disable_timing=True)
        self.joins = {s: cp.cuda.Event(block=False, disable_timing=True) for s in others}
        self.done = cp.cuda.Event(block=False, disable_timing=True)
        self.done_recorded = False

    def pointer(self, loc: Location, bound: Mapping[str, int]) -> int:
        if loc.space in HOST_SPACES:
            return self.host.pointer(loc)
        if loc.space == "arena":
            return int(self.arena.ptr) + loc.offset
        if loc.space == "weights":
            return self.program.weights_ptr() + loc.offset
        if loc.space == "input":
            base = bound.get(loc.key)
            if base is None:
                base = int(self.in_dev.ptr) + self.in_offsets[loc.key]
            return base + loc.offset
        return int(self.values[loc.key].ptr) + loc.offset

    def issue_list(
        self, bound_in: Mapping[str, int], bound_out: Mapping[str, int]
    ) -> list[Callable[[], Any]]:
        """The host calls of one run, in order (see the module docstring)."""
        cp = _cupy()
        rt = cp.cuda.runtime
        p = self.program
        plan = self.plan
        s0 = p.stream_for(0).ptr
        ops: list[Callable[[], Any]] = []
        staged = [n for n in plan.inputs if n not in bound_in and plan.types[n].nbytes]
        if staged and len(staged) == len(plan.inputs):
            args = (int(self.in_dev.ptr), self.in_host.ctypes.data, self.in_bytes, H2D, s0)
            ops.append(lambda a=args: rt.memcpyAsync(*a))
        else:
            for n in staged:
                off = self.in_offsets[n]
                a = (int(self.in_dev.ptr) + off, self.in_host.ctypes.data + off,
                     plan.types[n].nbytes, H2D, s0)  # fmt: skip
                ops.append(lambda a=a: rt.memcpyAsync(*a))
        fork = self.fork.ptr
        if self.joins:
            ops.append(lambda: rt.eventRecord(fork, s0))
        side = {s: p.stream_for(s).ptr for s in self.joins}
        for ptr in side.values():
            ops.append(lambda ptr=ptr: rt.streamWaitEvent(ptr, fork, 0))
        for step in plan.steps:
            ops.append(self._op(step, bound_in))
        for s, ev in self.joins.items():
            ops.append(lambda e=ev.ptr, ptr=side[s]: rt.eventRecord(e, ptr))
            ops.append(lambda e=ev.ptr: rt.streamWaitEvent(s0, e, 0))
        for name in dict.fromkeys(plan.outputs):
            nbytes = plan.types[name].nbytes
            if not nbytes:
                continue
            src = self.pointer(plan.locations[name], bound_in)
            on_host = plan.locations[name].space in HOST_SPACES
            if name in bound_out:
                a = (bound_out[name], src, nbytes, H2D if on_host else D2D, s0)
            elif on_host:
                continue  # a CPU result: `run` reads it from pinned host memory after the join
            else:
                dst = self.out_host.ctypes.data + self.out_offsets[name]
                a = (dst, src, nbytes, D2H, s0)
            ops.append(lambda a=a: rt.memcpyAsync(*a))
        return ops

    def _op(self, step: object, bound: Mapping[str, int]) -> Callable[[], Any]:
        rt = _cupy().cuda.runtime
        p = self.program
        if isinstance(step, EventStep):
            ev, s = self.events[step.event].ptr, p.stream_for(step.stream).ptr
            if step.kind == "record":
                return lambda: rt.eventRecord(ev, s)
            return lambda: rt.streamWaitEvent(s, ev, 0)
        if isinstance(step, KernelStep):
            stream = p.stream_for(step.stream)
            args = tuple(self.pointer(a, bound) for a in step.args)
            launch = self.launchers[step.kernel]
            if launch is not None:
                return lambda: launch(step.grid, step.block, args, step.shared_mem, stream)
            kernel = self.functions[step.kernel]

            def fallback() -> None:
                with stream:
                    kernel(step.grid, step.block, args, shared_mem=step.shared_mem)

            return fallback
        if isinstance(step, GemmStep):
            handle = p.blas_handle(step.stream)
            a, b, c = (self.pointer(x, bound) for x in (step.a, step.b, step.c))
            return p.blas.gemm_call(handle, step.gemm, a, b, c)
        if isinstance(step, HostStep):
            staged = {
                n: self.in_host[o : o + self.plan.types[n].nbytes]
                for n, o in self.in_offsets.items()
                if n not in bound
            }
            fn = HostFunction(self.graph, step, self.plan, self.host, staged, p.host_errors)
            self.host_functions.append(fn)  # the captured graph calls it on every replay
            host_stream = p.stream_for(step.stream).ptr
            return lambda: fn.launch(host_stream)
        assert isinstance(step, CopyStep)
        a = (self.pointer(step.dst, bound), self.pointer(step.src, bound), step.nbytes,
             COPY_KINDS[step.kind], p.stream_for(step.stream).ptr)  # fmt: skip
        return lambda: rt.memcpyAsync(*a)


class _CapturedGraph:
    """A captured cudaGraph_t (kept for DOT dumps) and its instantiated cudaGraphExec_t."""

    def __init__(self, graph: int, exec_: int):
        self.graph, self.exec = graph, exec_

    def destroy(self) -> None:
        rt = _cupy().cuda.runtime
        if self.exec:
            rt.graphExecDestroy(self.exec)
        if self.graph:
            rt.graphDestroy(self.graph)
        self.graph = self.exec = 0


def _exec_update(exec_: int, graph: int) -> bool:
    """cudaGraphExecUpdate through cuda-bindings; False when unavailable or refused."""
    try:
        from cuda.bindings import runtime as cudart  # type: ignore[import-not-found]
    except ImportError:
        try:
            from cuda import cudart  # type: ignore[import-not-found,no-redef]
        except ImportError:
            return False
    attempts = (
        lambda: cudart.cudaGraphExecUpdate(exec_, graph),
        lambda: cudart.cudaGraphExecUpdate(
            cudart.cudaGraphExec_t(init_value=exec_), cudart.cudaGraph_t(init_value=graph)
        ),
    )
    for attempt in attempts:
        try:
            result = attempt()
        except Exception:  # noqa: BLE001, S112 - the bindings refused these handle types
            continue
        return bool(result[0] == cudart.cudaError_t.cudaSuccess)
    return False


def _dot_print(graph: int, path: str) -> None:
    rt = _cupy().cuda.runtime
    printer = getattr(rt, "graphDebugDotPrint", None)
    if printer is not None:
        printer(graph, path, DOT_VERBOSE)
        return
    from cuda.bindings import runtime as cudart  # type: ignore[import-not-found]

    try:
        result = cudart.cudaGraphDebugDotPrint(graph, path.encode(), DOT_VERBOSE)
    except TypeError:
        result = cudart.cudaGraphDebugDotPrint(
            cudart.cudaGraph_t(init_value=graph), path.encode(), DOT_VERBOSE
        )
    if result[0] != cudart.cudaError_t.cudaSuccess:
        raise OptGraphError(f"cudaGraphDebugDotPrint failed: {result[0]}")


class CudaProgram:
    """A graph compiled for the GPU; `run` it like the reference interpreter.

    `specialize(input_types) -> Graph` builds the graph for new input shapes (by default the
    graph re-typed, unplanned); `capture_mode` is the CUDA stream-capture mode (0 global, 1 thread
    local, 2 relaxed).
    """

    def __init__(
        self,
        graph: Graph,
        *,
        weights: Mapping[str, Any] | None = None,
        use_graph: bool = True,
        specialize: Callable[[Mapping[str, TensorType]], Graph] | None = None,
        capture_mode: int = 2,
        graph_capacity: int = 8,
    ):
        cp = _cupy()
        from cupy_backends.cuda.libs import cublas

        self.graph = graph
        self.use_graph = use_graph
        self.capture_mode = capture_mode
        self.counters = RuntimeCounters()
        self._specialize = specialize or (lambda types: retype_graph(graph, types))
        self._variants: dict[GraphKey, _Variant] = {}
        self._streams: dict[int, Any] = {}
        self._handles: dict[int, int] = {}
        self._workspaces: dict[int, Any] = {}
        self.blas = load_blas(cublas)
        self._cache: GraphCache[_CapturedGraph] = GraphCache(graph_capacity, self._evict)
        self._issue: dict[GraphKey, tuple[Binding, list[Callable[[], Any]]]] = {}
        _, self._weight_offsets, _, _, weight_bytes = storage(graph)
        self._weights_dev = cp.cuda.alloc(max(weight_bytes, 1))
        # Weights kept in pinned host memory (streamed, host-placed, read on the CPU).
        self.host_weights = HostWeights(graph, cp.cuda.alloc_pinned_memory)
        self.host_errors = HostErrors()
        self._weights_seen: tuple[tuple[str, int], ...] | None = None
        self.last_key: GraphKey | None = None
        if weights is not None:
            self.set_weights(weights)

    # -- resources ---------------------------------------------------------------------------

    def stream_for(self, stream: int) -> Any:
        s = self._streams.get(stream)
        if s is None:
            s = self._streams[stream] = _cupy().cuda.Stream(non_blocking=True)
        return s

    @property
    def stream(self) -> Any:
        """Stream 0: where every run starts and ends (time a run with events on it)."""
        return self.stream_for(0)

    def blas_handle(self, stream: int) -> int:
        h = self._handles.get(stream)
        if h is None:
            ws = self._workspaces[stream] = _cupy().cuda.alloc(WORKSPACE_BYTES)
            h = self.blas.create(self.stream_for(stream).ptr, int(ws.ptr), WORKSPACE_BYTES)
            self._handles[stream] = h
        return h

    def weights_ptr(self) -> int:
        return int(self._weights_dev.ptr)

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Upload the weights (skipped when the very same arrays were uploaded last)."""
        cp = _cupy()
        seen = tuple((w.name, id(weights.get(w.name))) for w in self.graph.weights)
        if seen == self._weights_seen:
            return
        for w in self.graph.weights:
            if w.name not in weights:
                raise InputError(f"missing weight '%{w.name}' ({w.type})", w.span)
        for s in self._streams.values():
            s.synchronize()  # a replay in flight may still read the old weights
        base = self.weights_ptr()
        for w in self.graph.weights:
            value = weights[w.name]
            _check_array(value, w.type, f"weight '%{w.name}'")
            if w.name in self.host_weights.offsets:
                host = value.get() if isinstance(value, cp.ndarray) else np.asarray(value)
                self.host_weights.set(w.name, host)
            if w.name not in self._weight_offsets:
                continue  # not kept on the device
            dst = base + self._weight_offsets[w.name]
            if isinstance(value, cp.ndarray):
                value = cp.ascontiguousarray(value)
                cp.cuda.runtime.memcpy(dst, value.data.ptr, w.type.nbytes, D2D)
            elif w.type.nbytes:
                host = np.ascontiguousarray(value)
                cp.cuda.runtime.memcpy(dst, host.ctypes.data, w.type.nbytes, H2D)
        self._weights_seen = seen
        self.counters.weight_uploads += 1

    def _variant(self, types: Mapping[str, TensorType]) -> _Variant:
        key = GraphKey.of(types)
        v = self._variants.get(key)
        if v is None:
            same = dict(types) == input_signature(self.graph)
            graph = self.graph if same else self._specialize(types)
            v = self._variants[key] = _Variant(self, graph)
            self.counters.specializations += 1
        return v

    # -- running -----------------------------------------------------------------------------

    def run(
        self,
        inputs: Mapping[str, Any],
        weights: Mapping[str, Any] | None = None,
        *,
        out: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Outputs by name: NumPy arrays, or the given `out` CuPy arrays filled in place."""
        cp = _cupy()
        if weights is not None:
            self.set_weights(weights)
        elif self.graph.weights and self._weights_seen is None:
            raise InputError(f"graph '{self.graph.name}' has weights but none were given")
        types, bound_in, staged = self._classify(inputs)
        variant = self._variant(types)
        plan = variant.plan
        bound_out: dict[str, int] = {}
        for name, arr in (out or {}).items():
            if name not in plan.types or name not in plan.outputs:
                raise InputError(f"out: graph '{self.graph.name}' has no output '%{name}'")
            _check_array(arr, plan.types[name], f"out '%{name}'")
            if not isinstance(arr, cp.ndarray) or not arr.flags.c_contiguous:
                raise InputError(f"out '%{name}' must be a C-contiguous CuPy array")
            bound_out[name] = int(arr.data.ptr)
        key = GraphKey.of(types, frozenset(bound_in), frozenset(bound_out))
        binding = Binding.of(bound_in, bound_out)
        if variant.done_recorded:
            variant.done.synchronize()  # the last run's copies from staging are finished
        for name, array in staged.items():
            off, n = variant.in_offsets[name], plan.types[name].nbytes
            variant.in_host[off : off + n] = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        cached = self._issue.get(key)
        if cached is None or cached[0] != binding:
            cached = self._issue[key] = (binding, variant.issue_list(bound_in, bound_out))
        ops = cached[1]
        self._launch(key, binding, ops)
        self.last_key = key
        variant.done.record(self.stream)
        variant.done_recorded = True
        results: dict[str, Any] = {}
        if any(n not in bound_out for n in plan.outputs):
            self.stream.synchronize()
        self.host_errors.raise_first()
        for name in plan.outputs:
            if name in bound_out:
                results[name] = out[name]  # type: ignore[index]
                continue
            t = plan.types[name]
            loc = plan.locations[name]
            if loc.space in HOST_SPACES:
                raw = variant.host.bytes_at(loc, t.nbytes).copy()
            else:
                off = variant.out_offsets[name]
                raw = variant.out_host[off : off + t.nbytes].copy()
            results[name] = raw.view(numpy_dtype(t.dtype)).reshape(t.shape)
        return results

    def _classify(
        self, inputs: Mapping[str, Any]
    ) -> tuple[dict[str, TensorType], dict[str, int], dict[str, np.ndarray]]:
        cp = _cupy()
        unknown = sorted(set(inputs) - self.graph.input_names())
        if unknown:
            raise InputError(f"graph '{self.graph.name}' has no input '%{unknown[0]}'")
        types: dict[str, TensorType] = {}
        bound: dict[str, int] = {}
        staged: dict[str, np.ndarray] = {}
        for decl in self.graph.inputs:
            if decl.name not in inputs:
                raise InputError(f"missing input '%{decl.name}' ({decl.type})", decl.span)
            value = inputs[decl.name]
            if not isinstance(value, cp.ndarray):
                value = np.asarray(value)
            dtype = ir_dtype(value.dtype)
            if dtype != decl.type.dtype:
                raise InputError(
                    f"input '%{decl.name}': expected dtype {decl.type.dtype}, got {value.dtype}",
                    decl.span,
                )
            types[decl.name] = TensorType(dtype, tuple(value.shape))
            if isinstance(value, cp.ndarray):
                if not value.flags.c_contiguous:
                    raise InputError(f"input '%{decl.name}' must be a C-contiguous CuPy array")
                bound[decl.name] = int(value.data.ptr)
            else:
                staged[decl.name] = value
        return types, bound, staged

    def _launch(self, key: GraphKey, binding: Binding, ops: list[Callable[[], Any]]) -> None:
        rt = _cupy().cuda.runtime
        if not self.use_graph:
            for op in ops:
                op()
            self.counters.eager_runs += 1
            return
        action = self._cache.decide(key, binding)
        if action is Action.CAPTURE:
            for op in ops:  # eager warm-up: compiles, loads, lets cuBLAS pick its kernels
                op()
            self.counters.eager_runs += 1
            graph = self._capture(ops)
            captured = _CapturedGraph(graph, rt.graphInstantiate(graph))
            rt.graphUpload(captured.exec, self.stream.ptr)
            self.counters.evictions += self._cache.store(key, binding, captured)
            self.counters.captures += 1
            return  # this run's results came from the eager launch
        captured = self._cache.get(key)
        if action is Action.UPDATE:
            graph = self._capture(ops)
            if _exec_update(captured.exec, graph):
                rt.graphDestroy(captured.graph)
                captured.graph = graph
                self.counters.updates += 1
            else:
                rt.graphExecDestroy(captured.exec)
                rt.graphDestroy(captured.graph)
                captured.graph, captured.exec = graph, rt.graphInstantiate(graph)
                self.counters.update_fallbacks += 1
                self.counters.captures += 1
            self._cache.rebind(key, binding)
        rt.graphLaunch(captured.exec, self.stream.ptr)
        self.counters.replays += 1

    @contextlib.contextmanager
    def allocation_forbidden(self) -> Iterator[None]:
        """Device allocations through CuPy raise `AllocationDuringCapture` (and are counted)."""

        def refuse(size: int) -> Any:
            self.counters.allocations_refused += 1
            raise AllocationDuringCapture(f"allocation of {size} bytes during CUDA graph capture")

        with _cupy().cuda.using_allocator(refuse):
            yield

    def _capture(self, ops: list[Callable[[], Any]]) -> int:
        rt = _cupy().cuda.runtime
        s0 = self.stream.ptr
        with self.allocation_forbidden():
            rt.streamBeginCapture(s0, self.capture_mode)
            graph = 0
            try:
                for op in ops:
                    op()
            finally:
                try:
                    graph = rt.streamEndCapture(s0)
                except Exception:  # noqa: BLE001 - the capture failed; the first error wins
                    graph = 0
        if not graph:
            raise OptGraphError("CUDA graph capture failed (see the runtime's issue list)")
        return graph

    def _evict(self, captured: _CapturedGraph) -> None:
        captured.destroy()

    # -- introspection -------------------------------------------------------------------------

    def plan(self, key: GraphKey | None = None) -> CudaPlan:
        """The plan of the last run's variant (or of `key`'s input types)."""
        key = key or self.last_key
        if key is None:
            return lower_cuda(self.graph)
        return self._variant(key.types()).plan

    def debug_dot_str(self, key: GraphKey | None = None) -> str:
        """cudaGraphDebugDotPrint (verbose) of the captured graph of `key` (default: last run)."""
        key = key or self.last_key
        if key is None or key not in self._cache:
            raise OptGraphError("no CUDA graph has been captured for this key yet")
        graph = self._cache.get(key).graph
        fd, path = tempfile.mkstemp(suffix=".dot")
        os.close(fd)
        try:
            _dot_print(graph, path)
            with open(path) as f:
                return f.read()
        finally:
            os.remove(path)

    def close(self) -> None:
        """Destroy graphs and cuBLAS handles (buffers go back to CuPy's pool with the program)."""
        self.synchronize()
        self._cache.clear()
        for h in self._handles.values():
            self.blas.destroy(h)
        self._handles.clear()

    def synchronize(self) -> None:
        for s in self._streams.values():
            s.synchronize()


def _check_array(value: Any, t: TensorType, what: str) -> None:
    shape = tuple(getattr(value, "shape", ()))
    dtype = ir_dtype(np.dtype(getattr(value, "dtype", np.float64)))
    if shape != t.shape or dtype != t.dtype:
        raise InputError(f"{what}: expected {t}, got {dtype}{list(shape)}")


# NMSE bounds of `optgraph run --check` for whole graphs (per-op bounds are tighter: see
# tests/gpu/gpu_support.py); integer and bool outputs must be exact.
CHECK_BOUNDS = {"f32": 1e-6, "f16": 1e-3, "bf16": 1e-2}


def run_on_cuda(
    graph: Graph,
    inputs: Mapping[str, Any],
    weights: Mapping[str, Any],
    *,
    pipeline: str = "default",
    use_graph: bool = True,
) -> dict[str, Any]:
    """What `optgraph run --device cuda` does: plan `graph` with `pipeline` (plus a memory plan),
    run it, and with CUDA graphs run it again as a replay, which must equal the first run."""
    from optgraph.passes.facts import FACTS
    from optgraph.passes.manager import run_pipeline

    planned = run_pipeline(graph, pipeline)
    if not FACTS["memory-planned"].holds(planned):
        planned = run_pipeline(planned, "analyze-lifetimes,plan-memory")
    program = CudaProgram(planned, weights=weights, use_graph=use_graph)
    try:
        first = program.run(inputs)
        if not use_graph:
            return first
        replay = program.run(inputs)
        for name in first:
            if np.asarray(first[name]).tobytes() != np.asarray(replay[name]).tobytes():
                raise OptGraphError(f"run: the CUDA graph replay of '%{name}' differs from its run")
        return replay
    finally:
        program.close()
