"""The CuPy runtime: run a scheduled graph on the GPU, as one CUDA graph replayed run after run.

    program = CudaProgram(lower_for_cuda(planned_graph), weights=params)   # see optgraph.api.programs
    outputs = program.run({"x": x})                              # numpy in, numpy out
    program.run({"x": x_dev}, out={"y": y_dev})                  # cupy in/out, bound by pointer
    program.run({"cache": c, ...}, out={"cache_new": c})         # a KV cache updated in place
    step = program.bind({"x": x_dev}, out={"y": y_dev}); step()  # checked once; a call launches

A `CudaProgram` runs a lowered program (`codegen.lowered.LoweredProgram`: the plan, its options,
the in-place candidates, made once by the API layer): it binds, allocates, captures, updates and
replays, and never runs a pass or lowers. A variant it has not got (new input shapes, an output
bound to its input's array) comes from the `relower` callback the API layer gives it
(`optgraph.api.programs.cuda_program`, `optgraph.compile`). This module holds the entry points
(`CudaProgram`, `is_available`) and decides, run by run, whether to run eagerly, capture, update or
replay (`LoweringOptions.use_graph`). The parts:

- `device`: the lazy CuPy import (the only way the runtime reaches CuPy) and the probe;
- `memory`: the weights buffer (uploaded once per set of arrays) and each variant's arena,
  input buffer and pinned staging;
- `launch`: streams and cuBLAS handles, compiled kernels, and a variant's issue list (the
  host calls of one run, in order: staged inputs, fork, every plan step, join, outputs);
- `capture`: stream capture with allocation forbidden, graph handles, update, DOT dumps;
- `graph_cache`: the key that says when a captured graph is valid, and the cache;
- `bound`: a run's checked arrays (`Bound`) and `bind`'s step (`BoundStep`);
- `blas`, `offload`: cuBLAS through ctypes; pinned host memory and CPU nodes.

CUDA graphs: the first run of a key (`graph_cache.GraphKey`) runs eagerly (this compiles the
kernels and warms cuBLAS up), then the issue list is captured on stream 0 (the other streams join
through the fork event) with allocation forbidden, and instantiated; later runs replay it. A run
whose bound pointers changed captures again and applies it with `cudaGraphExecUpdate`; new input
shapes build a new variant (`relower`) and capture anew. `counters` says which happened.
A split program whose CPU nodes run on the calling thread (`LoweringOptions.cpu_nodes`, the
default) is a CUDA graph per GPU part, each captured, updated and replayed so (its key is the
run's, with the part's index), and the CPU nodes run by the caller between them.
CuPy is imported lazily (`device.cupy`): importing this module needs no CuPy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import numpy as np

from optgraph.codegen.plan.lowered import LoweredProgram, LoweredVariant, Relower
from optgraph.codegen.plan.steps import CudaPlan
from optgraph.errors import InputError, OptGraphError
from optgraph.ir.graph import TensorType
from optgraph.runtime.cuda.blas import load_blas
from optgraph.runtime.cuda.bound import (
    Bound,
    BoundStep,
    PartLauncher,
    RunSignature,
    check_apart,
    classify_inputs,
    held,
    run_signature,
)
from optgraph.runtime.cuda.capture import (
    AllocationDuringCapture,
    CapturedGraph,
    allocation_forbidden,
    capture,
    dot_text,
    exec_update,
)
from optgraph.runtime.cuda.device import cupy, is_available
from optgraph.runtime.cuda.graph_cache import (
    Action,
    Binding,
    GraphCache,
    GraphKey,
    RuntimeCounters,
    input_signature,
    moved_weights,
    shape_change,
)
from optgraph.runtime.cuda.launch import Streams, Variant
from optgraph.runtime.cuda.memory import (
    DeviceWeights,
    check_array,
    check_device_memory,
    device_free_memory,
    device_need,
)
from optgraph.runtime.cuda.offload import HostErrors

__all__ = [
    "CHECK_BOUNDS",
    "AllocationDuringCapture",
    "BoundStep",
    "CudaProgram",
    "is_available",
]


class CudaProgram:
    """A lowered program on the GPU; `run` it like the reference interpreter.

    `lowered` holds everything decided about a run, its `LoweringOptions` included: `use_graph`
    (False: every run eager), `capture_mode` (the CUDA stream-capture mode: 0 global, 1 thread
    local, 2 relaxed), `graph_capacity`, `pdl` (a kernel that follows another on its stream is
    launched with Programmatic Dependent Launch where the device is sm_90+ and the
    driver has cuLaunchKernelEx: `pdl`). `relower(input_types, in_place) -> LoweredVariant` gives the variant
    for other input types or in-place outputs (`optgraph.api.programs` passes one; without it only the
    lowered variant runs). A graph that cannot take the new shapes, or a specialization that
    places the weights other than the program does, raises an `OptGraphError` naming the inputs
    and both shapes, and counts nothing.
    """

    def __init__(
        self,
        lowered: LoweredProgram,
        *,
        weights: Mapping[str, Any] | None = None,
        relower: Relower | None = None,
    ):
        cupy()  # ImportError here, not half way through, where CuPy is missing
        # A program that cannot fit is refused with the figures before anything is made.
        check_device_memory(device_need(lowered.main, with_weights=True), device_free_memory())
        from cupy_backends.cuda.libs import cublas

        self.lowered = lowered
        self.graph = lowered.graph
        self.options = lowered.options
        self._in_place = dict(lowered.in_place)
        self.counters = RuntimeCounters()
        self._relower = relower
        self._variants: dict[GraphKey, Variant] = {}
        self.blas = load_blas(cublas)
        self.streams = Streams(self.blas)
        self._cache: GraphCache[CapturedGraph] = GraphCache(
            self.options.graph_capacity, self._evict
        )
        self._issue: dict[GraphKey, tuple[Binding, list[Callable[[], Any]]]] = {}
        self.weights = DeviceWeights(self.graph, lowered.main.plan)
        self.host_weights = self.weights.host
        self.host_errors = HostErrors()
        self._in_flight: Bound | None = None  # the last run's arrays, held (see `_start`)
        self._last_run: tuple[RunSignature, Bound] | None = None  # `run`'s last binding
        self.last_key: GraphKey | None = None
        if weights is not None:
            self.set_weights(weights)

    # -- resources ---------------------------------------------------------------------------

    def stream_for(self, stream: int) -> Any:
        return self.streams.get(stream)

    @property
    def stream(self) -> Any:
        """Stream 0: where every run starts and ends (time a run with events on it)."""
        return self.streams.get(0)

    def blas_handle(self, stream: int) -> int:
        return self.streams.blas_handle(stream)

    def weights_ptr(self) -> int:
        return self.weights.ptr

    def set_weights(self, weights: Mapping[str, Any]) -> None:
        """Upload the weights, always (arrays changed in place since the last upload too)."""
        self._upload(weights, force=True)

    def use_weights(self, weights: Mapping[str, Any]) -> None:
        """Upload the weights unless they are the very arrays of the last upload, still alive
        (`runtime/last_arrays.py`): what `run(inputs, weights)` does."""
        self._upload(weights, force=False)

    def _upload(self, weights: Mapping[str, Any], force: bool) -> None:
        if self.weights.upload(weights, before_write=self.streams.synchronize, force=force):
            self.counters.weight_uploads += 1

    def _variant(
        self, types: Mapping[str, TensorType], in_place: Mapping[str, str] | None = None
    ) -> Variant:
        key = GraphKey.of(types, in_place=in_place)
        v = self._variants.get(key)
        if v is None:
            lowered = self._lowered_variant(types, dict(in_place or {}))
            v = self._variants[key] = self._new_variant(lowered)
            self.counters.specializations += 1
        return v

    def _new_variant(self, lowered: LoweredVariant) -> Variant:
        """The runtime side of a lowered variant (`collectives.RankProgram` adds NCCL)."""
        return Variant(
            lowered,
            self.weights,
            self.streams,
            self.host_errors,
            pdl=self.options.pdl,
            cpu_nodes=self.options.cpu_nodes,
        )

    def _lowered_variant(
        self, types: Mapping[str, TensorType], in_place: dict[str, str]
    ) -> LoweredVariant:
        """The lowered program's own variant, or the one `relower` gives for `types`/`in_place`."""
        same = dict(types) == input_signature(self.graph)
        if same and not in_place:
            return self.lowered.main
        if self._relower is None:
            raise OptGraphError(
                f"graph '{self.graph.name}' was lowered for its own input types and no in-place "
                f"outputs only ({shape_change(self.graph, types)}); run it through "
                "optgraph.compile or optgraph.api.programs.cuda_program to specialize"
            )
        variant = self._relower(types, in_place)
        moved = [] if same else moved_weights(self.lowered.main.plan, variant.plan)
        if moved:
            names = ", ".join(f"'%{n}'" for n in moved[:4]) + (", ..." if len(moved) > 4 else "")
            raise OptGraphError(
                f"graph '{self.graph.name}' specialized for {shape_change(self.graph, types)} "
                f"places weights {names} other than the compiled program, whose weight buffers "
                "every specialization shares; compile a program for these shapes instead"
            )
        return variant

    # -- running -----------------------------------------------------------------------------

    def run(
        self,
        inputs: Mapping[str, Any],
        weights: Mapping[str, Any] | None = None,
        *,
        out: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """Outputs by name: NumPy arrays, or the given `out` CuPy arrays filled in place.

        An `out` array that is also an input's array asks for the output in that buffer: a
        `kv_cache_write` of that input (nothing else reading it) then writes only its new rows
        there (`codegen/plan/in_place_outputs.py`); any other output is copied in after the run."""
        if weights is not None:
            self.use_weights(weights)
        out = out or {}
        signature = run_signature(inputs, out)
        last = self._last_run
        if signature is not None and last is not None and last[0] == signature:
            bound = last[1].again(inputs, out)  # laid out as last time: checked then
            self.last_key = bound.key
        else:
            bound = self._bind(inputs, out)
            self._last_run = None if signature is None else (signature, bound)
        variant = bound.variant
        if variant.done_recorded:
            variant.done.synchronize()  # the last run's copies from staging are finished
        variant.stage_inputs(bound.staged)
        self._start(bound)
        variant.done.record(self.stream)
        variant.done_recorded = True
        if any(n not in bound.outputs for n in variant.plan.outputs):
            self.stream.synchronize()
        self.host_errors.raise_first()
        results: dict[str, Any] = {}
        for name in variant.plan.outputs:
            done = bound.outputs.get(name)
            results[name] = done if done is not None else variant.read_output(name)
        return results

    def bind(self, inputs: Mapping[str, Any], out: Mapping[str, Any]) -> BoundStep:
        """The serving loop's step: every input and every output a C-contiguous CuPy array,
        checked once, here. Calling the step launches the program on those arrays: its first
        call runs eagerly and captures (as `run` does), later calls replay the CUDA graph (or,
        with `use_graph=False`, issue the same calls) with no check, no copy and no
        synchronization; the caller synchronizes `program.stream` before reading `out`. Each
        bound step keeps its own captured graph (`GraphKey.pinned`)."""
        bound = self._bind(inputs, out, pinned=True)
        staged = sorted(bound.staged)
        unbound = [n for n in dict.fromkeys(bound.variant.plan.outputs) if n not in bound.outputs]
        if staged or unbound:
            what = f"input '%{staged[0]}'" if staged else f"output '%{unbound[0]}'"
            raise InputError(
                f"bind: graph '{self.graph.name}': {what} must be a CuPy array (a bound step "
                "reads and writes the caller's device arrays only)"
            )
        return BoundStep(self, bound)

    def _bind(
        self, inputs: Mapping[str, Any], out: Mapping[str, Any] | None, pinned: bool = False
    ) -> Bound:
        """Check `inputs` and `out`, pick the variant, the graph key and the issue list;
        `pinned`: the pointers are part of the key (a bound step's own graph)."""
        cp = cupy()
        out = out or {}
        if self.graph.weights and not self.weights.is_set:
            raise InputError(f"graph '{self.graph.name}' has weights but none were given")
        types, bound_in, staged = self._classify(inputs)
        # An `out` array that is also an input's array: computed in place where legal.
        in_place = {
            o: i
            for o, i in self._in_place.items()
            if o in out and bound_in.get(i) == getattr(getattr(out[o], "data", None), "ptr", None)
        }
        variant = self._variant(types, in_place)
        plan = variant.plan
        bound_out: dict[str, int] = {}
        for name, arr in out.items():
            if name not in plan.types or name not in plan.outputs:
                raise InputError(f"out: graph '{self.graph.name}' has no output '%{name}'")
            check_array(arr, plan.types[name], f"out '%{name}'")
            if not isinstance(arr, cp.ndarray) or not arr.flags.c_contiguous:
                raise InputError(f"out '%{name}' must be a C-contiguous CuPy array")
            bound_out[name] = int(arr.data.ptr)
        check_apart(
            {name: (ptr, types[name].nbytes) for name, ptr in bound_in.items()},
            {name: (ptr, plan.types[name].nbytes) for name, ptr in bound_out.items()},
            in_place,
        )
        key = GraphKey.of(types, frozenset(bound_in), frozenset(bound_out), in_place)
        binding = Binding.of(bound_in, bound_out)
        if pinned:
            key = replace(key, pinned=binding)
        calling_thread = bool(variant.lowered.cpu_schedule)
        cached = self._issue.get(key)
        if cached is None or cached[0] != binding:
            if calling_thread:
                launch = PartLauncher(self, key, binding)
                ops = variant.calling_thread_list(bound_in, bound_out, launch)
            else:
                ops = variant.issue_list(bound_in, bound_out)
            cached = self._issue[key] = (binding, ops)
        self.last_key = key
        outputs = {name: out[name] for name in bound_out}
        arrays = held(inputs, outputs)
        return Bound(variant, key, binding, cached[1], staged, outputs, calling_thread, arrays)

    def _classify(
        self, inputs: Mapping[str, Any]
    ) -> tuple[dict[str, TensorType], dict[str, int], dict[str, np.ndarray]]:
        return classify_inputs(self.graph, inputs)

    def _start(self, bound: Bound) -> None:
        """Launch one run: the whole issue list as one graph, or the calling thread's pieces.
        The run's arrays stay referenced until the next run starts."""
        self._in_flight = bound
        if bound.calling_thread:
            for call in bound.ops:
                call()
        else:
            self._launch(bound.key, bound.binding, bound.ops)

    def _launch(self, key: GraphKey, binding: Binding, ops: list[Callable[[], Any]]) -> None:
        """Run `ops` eagerly, or capture, update or replay the graph of `key` (see the module
        docstring); counted in `counters`."""
        rt = cupy().cuda.runtime
        if not self.options.use_graph:
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
            captured = CapturedGraph(graph, rt.graphInstantiate(graph))
            rt.graphUpload(captured.exec, self.stream.ptr)
            self.counters.evictions += self._cache.store(key, binding, captured)
            self.counters.captures += 1
            return  # this run's results came from the eager launch
        captured = self._cache.get(key)
        if action is Action.UPDATE:
            graph = self._capture(ops)
            if exec_update(captured.exec, graph):
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

    def allocation_forbidden(self) -> contextlib.AbstractContextManager[None]:
        """Device allocations through CuPy raise `AllocationDuringCapture` (and are counted)."""

        def count() -> None:
            self.counters.allocations_refused += 1

        return allocation_forbidden(count)

    def _capture(self, ops: list[Callable[[], Any]]) -> int:
        return capture(self.stream.ptr, ops, self.options.capture_mode, self.allocation_forbidden)

    def _evict(self, captured: CapturedGraph) -> None:
        captured.destroy()

    # -- introspection -------------------------------------------------------------------------

    def plan(self, key: GraphKey | None = None) -> CudaPlan:
        """The plan of the last run's variant (or of `key`'s input types)."""
        key = key or self.last_key
        if key is None:
            return self.lowered.main.plan
        return self._variant(key.types(), dict(key.in_place)).plan

    def debug_dot_str(self, key: GraphKey | None = None) -> str:
        """cudaGraphDebugDotPrint (verbose) of the captured graph of `key` (default: last run);
        for a run in GPU parts (CPU nodes on the calling thread), each part's, one after another."""
        key = key or self.last_key
        parts = [replace(key, part=i) for i in range(len(self._cache))] if key else []
        graphs = [k for k in [key, *parts] if k is not None and k in self._cache]
        if not graphs:
            raise OptGraphError("no CUDA graph has been captured for this key yet")
        return "\n".join(dot_text(self._cache.get(k).graph) for k in graphs)

    def node_times(self, passes: int = 3) -> dict[str, float]:
        """Seconds of each GPU node of the last run, measured one node at a time
        (`runtime/cuda/node_times.py`): what `plan-prefetch{times=}` reads."""
        from optgraph.runtime.cuda.node_times import node_times

        return node_times(self, passes)

    def close(self) -> None:
        """Destroy graphs and cuBLAS handles (buffers go back to CuPy's pool with the program)."""
        self.synchronize()
        self._cache.clear()
        self.streams.destroy_handles()

    def synchronize(self) -> None:
        self.streams.synchronize()


# NMSE bounds of `optgraph run --check` for whole graphs (per-op bounds are tighter: see
# tests/gpu/gpu_support.py); integer and bool outputs must be exact.
CHECK_BOUNDS = {"f32": 1e-6, "f16": 1e-3, "bf16": 1e-2}
