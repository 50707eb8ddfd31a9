"""Issuing a run on the GPU: the streams, the compiled kernels, and the host calls of one run.

- `Streams` (one per program): the CUDA streams by plan stream id, created on first use, and one
  cuBLAS handle per stream with its own workspace, set up before any capture.
- `Variant` (one per specialization): its buffers (`memory.VariantMemory`), its kernels (one
  `RawModule` per distinct module source, shared by every program, so loading them compiles once
  and before any capture), its events, and `issue_list`: every host call of one run, in order,
  as closures over resolved pointers. The same list runs eagerly, or under stream capture.
  `calling_thread_list` is the same for a split program whose CPU nodes run on the calling
  thread (`LoweredVariant.cpu_schedule`): per GPU part its calls (a CUDA graph each), host
  waits, and the CPU nodes themselves.

The order of a run (`issue_list`), all of it host calls in `graph.nodes` order:

1. staged inputs: one `memcpyAsync` from pinned staging into the program's input buffer on
   stream 0 (inputs given as CuPy arrays are read in place instead: bound by pointer);
2. fork: stream 0 records an event that every other stream waits for;
3. every step of the variant's lowered plan (`codegen.cuda_steps`) on its node's stream: our
   kernels, cuBLAS, device copies, CPU nodes as host functions (`offload.HostSegment` per
   run of consecutive CPU nodes, or `HostFunction` per node), and `record`/`wait` events;
   a kernel right after another on its stream is launched with Programmatic Dependent Launch
   where the program allows it and the device is sm_90+ (`pdl`);
4. join: every other stream records an event stream 0 waits for;
5. outputs: a device-to-host copy into pinned staging (or device-to-device into `out` arrays).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from functools import partial
from typing import Any

from optgraph.codegen.cuda_source import kernel_at_line
from optgraph.codegen.plan.cpu_node_schedule import (
    GpuPart,
    HostPart,
    HostWait,
    cpu_segments,
    host_streams,
)
from optgraph.codegen.plan.lowered import LoweredVariant
from optgraph.codegen.plan.steps import (
    HOST_SPACES,
    CopyStep,
    CudaPlan,
    EventStep,
    GemmStep,
    HostStep,
    KernelStep,
)
from optgraph.errors import OptGraphError
from optgraph.ir.graph import Graph, Node
from optgraph.runtime.cuda.blas import BLAS, WORKSPACE_BYTES
from optgraph.runtime.cuda.device import cupy
from optgraph.runtime.cuda.memory import D2D, D2H, H2D, DeviceWeights, VariantMemory
from optgraph.runtime.cuda.offload import HostErrors, HostFunction, HostSegment
from optgraph.runtime.cuda.pdl import PdlLauncher, driver_for_pdl, pdl_steps

COPY_KINDS = {"h2h": 0, "h2d": H2D, "d2h": D2H, "d2d": D2D}  # cudaMemcpyKind by CopyStep.kind
_MODULES: dict[str, Any] = {}  # module source -> cupy.RawModule, shared by all programs


def kernel_module(source: str) -> Any:
    """The compiled `RawModule` of `source` (compiled once per process)."""
    module = _MODULES.get(source)
    if module is None:
        module = cupy().RawModule(code=source, options=("--std=c++17",))
        _MODULES[source] = module
    return module


_COMPILER_ERROR = re.compile(r"\((\d+)\): (?:catastrophic )?error\b[^\n]*")


def compiled_functions(plan: CudaPlan, graph: Graph) -> dict[str, Any]:
    """Every kernel of `plan` by name, its module compiled (once per process). A kernel that
    does not compile is an `OptGraphError` naming it, the nodes it computes and their ops, and
    the compiler's first errors (a bug of ours: the module is generated)."""
    try:
        module = kernel_module(plan.source())
        return {name: module.get_function(name) for name in plan.kernels}
    except Exception as err:
        if type(err).__name__ != "CompileException":
            raise
        raise OptGraphError(compile_failure(plan, graph, str(err))) from None


def _op_text(node: Node) -> str:
    """`matmul`, or a fused node's body ops: `fused: neg, silu, mul`."""
    if node.body is None:
        return node.op
    return f"{node.op}: " + ", ".join(dict.fromkeys(n.op for n in node.body.nodes))


def compile_failure(plan: CudaPlan, graph: Graph, log: str) -> str:
    """The message for a module of `plan` (lowered from `graph`) that failed with compiler
    output `log`."""
    errors = [(int(m[1]), m[0].split(": ", 1)[1]) for m in _COMPILER_ERROR.finditer(log)]
    ops = {n.name: _op_text(n) for n in graph.nodes}
    lines = []
    for line, text in errors[:3]:
        kernel = kernel_at_line(plan.kernels.values(), line)
        nodes = [
            m for s in plan.steps if isinstance(s, KernelStep) and s.kernel == kernel
            for m in s.members
        ]  # fmt: skip
        where = ", ".join(f"%{m} ({ops.get(m, '?')})" for m in dict.fromkeys(nodes)) or "-"
        lines.append(f"  kernel {kernel or '(prelude)'} for {where}, line {line}: {text}")
    head = f"CUDA kernels of '{plan.graph_name}' failed to compile"
    if not lines:
        return f"{head}:\n  {log.strip().splitlines()[0] if log.strip() else '(no log)'}"
    return head + ":\n" + "\n".join(lines)


class Streams:
    """A program's CUDA streams by plan stream id, and a cuBLAS handle per stream."""

    def __init__(self, blas: BLAS):
        self.blas = blas
        self.streams: dict[int, Any] = {}
        self.handles: dict[int, int] = {}
        self.workspaces: dict[int, Any] = {}

    def get(self, stream: int) -> Any:
        s = self.streams.get(stream)
        if s is None:
            s = self.streams[stream] = cupy().cuda.Stream(non_blocking=True)
        return s

    def blas_handle(self, stream: int) -> int:
        """The handle bound to `stream` and its 32 MiB workspace (created on first use, which
        must be before any capture: `Variant.issue_list` asks for it while building the list)."""
        h = self.handles.get(stream)
        if h is None:
            ws = self.workspaces[stream] = cupy().cuda.alloc(WORKSPACE_BYTES)
            h = self.blas.create(self.get(stream).ptr, int(ws.ptr), WORKSPACE_BYTES)
            self.handles[stream] = h
        return h

    def synchronize(self) -> None:
        for s in self.streams.values():
            s.synchronize()

    def destroy_handles(self) -> None:
        for h in self.handles.values():
            self.blas.destroy(h)
        self.handles.clear()


class Variant(VariantMemory):
    """One specialization: a plan for fixed input types, its buffers, kernels and events."""

    def __init__(
        self,
        lowered: LoweredVariant,
        weights: DeviceWeights,
        streams: Streams,
        host_errors: HostErrors,
        *,
        pdl: bool = True,
        cpu_nodes: str = "calling-thread",
    ):
        super().__init__(lowered, weights)
        cp = cupy()
        plan = self.plan
        self.streams, self.host_errors = streams, host_errors
        self.host_functions: list[HostFunction] = []
        self.host_segments: list[HostSegment] = []
        self.cpu_nodes = cpu_nodes
        self.part_ends: list[Any] = []  # the end of each GPU part (cpu_nodes="calling-thread")
        self.calling_thread_functions: list[HostFunction] = []  # the last calling-thread list's
        # Loading every function now compiles the module before any capture.
        self.functions: dict[str, Any] = {}
        if plan.kernels:
            self.functions = compiled_functions(plan, self.graph)
        self.launchers = {name: getattr(f, "kernel", None) for name, f in self.functions.items()}
        # Programmatic Dependent Launch (cuda_pdl): where asked for, where the driver binding
        # and an sm_90+ device are there, and where every kernel exposes its CUfunction.
        self.pdl: PdlLauncher | None = None
        ptrs = [getattr(f, "ptr", None) for f in self.launchers.values()]
        if pdl and ptrs and all(isinstance(p, int) for p in ptrs):
            driver = driver_for_pdl()
            if driver is not None:
                self.pdl = PdlLauncher(driver)
        self.events = {e: cp.cuda.Event(block=False, disable_timing=True) for e in plan.events}
        others = [s for s in plan.streams if s != 0]
        self.fork = cp.cuda.Event(block=False, disable_timing=True)
        self.joins = {s: cp.cuda.Event(block=False, disable_timing=True) for s in others}
        self.done = cp.cuda.Event(block=False, disable_timing=True)
        self.done_recorded = False

    def issue_list(
        self, bound_in: Mapping[str, int], bound_out: Mapping[str, int]
    ) -> list[Callable[[], Any]]:
        """The host calls of one run, in order (see the module docstring): CPU nodes as host
        functions (one per CPU segment, or per node with `cpu_nodes="graph-per-node"`)."""
        plan = self.plan
        ops = self._stage_ops(bound_in) + self._fork_ops(list(self.joins))
        programmatic = pdl_steps(plan.steps) if self.pdl is not None else set()
        grouped = {run[0]: run for run in cpu_segments(plan.steps)}
        if self.cpu_nodes == "graph-per-node":
            grouped = {}
        in_group = {i for run in grouped.values() for i in run}
        for i, step in enumerate(plan.steps):
            if i in grouped:
                ops.append(self._host_segment(grouped[i], bound_in))
            elif i not in in_group:
                ops.append(self._op(step, bound_in, i in programmatic))
        return ops + self._join_ops(list(self.joins)) + self._output_ops(bound_in, bound_out)

    def calling_thread_list(
        self,
        bound_in: Mapping[str, int],
        bound_out: Mapping[str, int],
        launch_part: Callable[[int, list[Callable[[], Any]]], None],
    ) -> list[Callable[[], Any]]:
        """The host calls of one run with the CPU nodes on the calling thread
        (`LoweredVariant.cpu_schedule`): each GPU part's calls (forked from and joined into
        stream 0) go to `launch_part(index, calls)`, which launches them (as a CUDA graph), then
        the part's end is recorded on stream 0; a host wait synchronizes on that end; a CPU
        node is called."""
        plan = self.plan
        pieces = list(self.lowered.cpu_schedule)
        host = host_streams(plan.steps)
        parts = [p for p in pieces if isinstance(p, GpuPart)]
        outputs = self._output_ops(bound_in, bound_out)
        if outputs and not (pieces and isinstance(pieces[-1], GpuPart)):
            parts.append(GpuPart(()))
            pieces.append(parts[-1])
        while len(self.part_ends) < len(parts):
            self.part_ends.append(cupy().cuda.Event(block=False, disable_timing=True))
        calls: list[Callable[[], Any]] = []
        first_host = next((p for p in pieces if not isinstance(p, GpuPart)), None)
        if isinstance(first_host, HostPart) and self.part_ends:
            # CPU nodes before any wait: the previous run's last part may still copy from the
            # pinned host arena they write (a bound step does not wait for the previous run).
            calls.append(self.part_ends[-1].synchronize)
        k = 0
        for piece in pieces:
            if isinstance(piece, HostPart):
                step = plan.steps[piece.step]
                assert isinstance(step, HostStep)
                calls.append(self.host_function(step, bound_in, keep=False))
            elif isinstance(piece, HostWait):
                calls.append(self.part_ends[piece.part].synchronize)
            else:
                ops = self._part_ops(piece, host, bound_in, first=k == 0)
                ops += outputs if k == len(parts) - 1 else []
                calls.append(partial(self._run_part, launch_part, k, ops))
                k += 1
        self.calling_thread_functions = [c for c in calls if isinstance(c, HostFunction)]
        return calls

    def _run_part(
        self,
        launch_part: Callable[[int, list[Callable[[], Any]]], None],
        index: int,
        ops: list[Callable[[], Any]],
    ) -> None:
        launch_part(index, ops)
        self.part_ends[index].record(self.streams.get(0))

    def _part_ops(
        self, part: GpuPart, host: set[int], bound_in: Mapping[str, int], *, first: bool
    ) -> list[Callable[[], Any]]:
        """One GPU part's calls: staged inputs (the first part), fork, its steps, join."""
        steps = [self.plan.steps[i] for i in part.steps]
        side = sorted({getattr(s, "stream", 0) for s in steps} - host - {0})
        ops = self._stage_ops(bound_in) if first else []
        ops += self._fork_ops(side)
        programmatic = pdl_steps(steps) if self.pdl is not None else set()
        ops += [self._op(step, bound_in, k in programmatic) for k, step in enumerate(steps)]
        return ops + self._join_ops(side)

    def _stage_ops(self, bound_in: Mapping[str, int]) -> list[Callable[[], Any]]:
        """The staged inputs' copy from pinned staging into the input buffer, on stream 0."""
        rt = cupy().cuda.runtime
        plan = self.plan
        s0 = self.streams.get(0).ptr
        staged = [n for n in plan.inputs if n not in bound_in and plan.types[n].nbytes]
        if staged and len(staged) == len(plan.inputs):
            args = (int(self.in_dev.ptr), self.in_host.ctypes.data, self.in_bytes, H2D, s0)
            return [partial(rt.memcpyAsync, *args)]
        ops: list[Callable[[], Any]] = []
        for n in staged:
            off = self.in_offsets[n]
            a = (int(self.in_dev.ptr) + off, self.in_host.ctypes.data + off,
                 plan.types[n].nbytes, H2D, s0)  # fmt: skip
            ops.append(partial(rt.memcpyAsync, *a))
        return ops

    def _fork_ops(self, streams: list[int]) -> list[Callable[[], Any]]:
        """Stream 0 records the fork event, which each of `streams` waits for."""
        if not streams:
            return []
        rt = cupy().cuda.runtime
        fork, s0 = self.fork.ptr, self.streams.get(0).ptr
        ops: list[Callable[[], Any]] = [partial(rt.eventRecord, fork, s0)]
        return ops + [
            partial(rt.streamWaitEvent, self.streams.get(s).ptr, fork, 0) for s in streams
        ]

    def _join_ops(self, streams: list[int]) -> list[Callable[[], Any]]:
        """Each of `streams` records its join event, which stream 0 waits for."""
        rt = cupy().cuda.runtime
        s0 = self.streams.get(0).ptr
        ops: list[Callable[[], Any]] = []
        for s in streams:
            ev = self.joins[s].ptr
            ops.append(partial(rt.eventRecord, ev, self.streams.get(s).ptr))
            ops.append(partial(rt.streamWaitEvent, s0, ev, 0))
        return ops

    def _output_ops(
        self, bound_in: Mapping[str, int], bound_out: Mapping[str, int]
    ) -> list[Callable[[], Any]]:
        """The outputs' copies on stream 0: into pinned staging, or into the caller's arrays."""
        rt = cupy().cuda.runtime
        plan = self.plan
        s0 = self.streams.get(0).ptr
        ops: list[Callable[[], Any]] = []
        for name in dict.fromkeys(plan.outputs):
            nbytes = plan.types[name].nbytes
            if not nbytes:
                continue
            src = self.pointer(plan.locations[name], bound_in)
            on_host = plan.locations[name].space in HOST_SPACES
            if name in bound_out:
                if bound_out[name] == src:
                    continue  # computed in place in the caller's array (in_place_outputs)
                a = (bound_out[name], src, nbytes, H2D if on_host else D2D, s0)
            elif on_host:
                continue  # a CPU result: `run` reads it from pinned host memory after the join
            else:
                dst = self.out_host.ctypes.data + self.out_offsets[name]
                a = (dst, src, nbytes, D2H, s0)
            ops.append(partial(rt.memcpyAsync, *a))
        return ops

    def host_function(
        self, step: HostStep, bound: Mapping[str, int], *, keep: bool = True
    ) -> HostFunction:
        """The CPU node of `step` over NumPy views of its buffers (`keep`: in `host_functions`,
        alive as long as the variant: a captured graph calls it)."""
        staged = {
            n: self.in_host[o : o + self.plan.types[n].nbytes]
            for n, o in self.in_offsets.items()
            if n not in bound
        }
        fn = HostFunction(self.graph, step, self.plan, self.host, staged, self.host_errors)
        if keep:
            self.host_functions.append(fn)
        return fn

    def _host_segment(self, run: list[int], bound: Mapping[str, int]) -> Callable[[], Any]:
        steps = [s for s in (self.plan.steps[i] for i in run) if isinstance(s, HostStep)]
        segment = HostSegment([self.host_function(s, bound) for s in steps])
        self.host_segments.append(segment)  # the captured graph calls it on every replay
        host_stream = self.streams.get(steps[0].stream).ptr
        return lambda: segment.launch(host_stream)

    def _op(
        self, step: object, bound: Mapping[str, int], programmatic: bool = False
    ) -> Callable[[], Any]:
        rt = cupy().cuda.runtime
        streams = self.streams
        if isinstance(step, EventStep):
            ev, s = self.events[step.event].ptr, streams.get(step.stream).ptr
            if step.kind == "record":
                return lambda: rt.eventRecord(ev, s)
            return lambda: rt.streamWaitEvent(s, ev, 0)
        if isinstance(step, KernelStep):
            stream = streams.get(step.stream)
            args = tuple(self.pointer(a, bound) for a in step.args)
            launch = self.launchers[step.kernel]
            if programmatic and self.pdl is not None and launch is not None:
                return self.pdl.launch(
                    launch.ptr, step.grid, step.block, args, step.shared_mem, stream.ptr
                )
            if launch is not None:
                return lambda: launch(step.grid, step.block, args, step.shared_mem, stream)
            kernel = self.functions[step.kernel]

            def fallback() -> None:
                with stream:
                    kernel(step.grid, step.block, args, shared_mem=step.shared_mem)

            return fallback
        if isinstance(step, GemmStep):
            handle = streams.blas_handle(step.stream)
            a, b, c = (self.pointer(x, bound) for x in (step.a, step.b, step.c))
            return streams.blas.gemm_call(handle, step.gemm, a, b, c)
        if isinstance(step, HostStep):
            fn = self.host_function(step, bound)  # the captured graph calls it on every replay
            host_stream = streams.get(step.stream).ptr
            return lambda: fn.launch(host_stream)
        assert isinstance(step, CopyStep)
        copy = (self.pointer(step.dst, bound), self.pointer(step.src, bound), step.nbytes,
                COPY_KINDS[step.kind], streams.get(step.stream).ptr)  # fmt: skip
        return partial(rt.memcpyAsync, *copy)
