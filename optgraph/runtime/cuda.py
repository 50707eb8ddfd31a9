"""The CuPy runtime: run a scheduled graph on the GPU, as one CUDA graph replayed run after run.

    program = CudaProgram(planned_graph, weights=params)        # or use_graph=False: eager
    outputs = program.run({"x": x})                              # numpy in, numpy out
    program.run({"x": x_dev}, out={"y": y_dev})                  # cupy in/out, bound by pointer
    program.run({"cache": c, ...}, out={"cache_new": c})         # a KV cache updated in place

This module holds the entry points (`CudaProgram`, `run_on_cuda`, `is_available`) and decides,
run by run, whether to run eagerly, capture, update or replay. The parts:

- `cuda_device`: the lazy CuPy import (the only way the runtime reaches CuPy) and the probe;
- `cuda_memory`: the weights buffer (uploaded once per set of arrays) and each variant's arena,
  input buffer and pinned staging;
- `cuda_launch`: streams and cuBLAS handles, compiled kernels, and a variant's issue list (the
  host calls of one run, in order: staged inputs, fork, every plan step, join, outputs);
- `cuda_capture`: stream capture with allocation forbidden, graph handles, update, DOT dumps;
- `cuda_graph_cache`: the key that says when a captured graph is valid, and the cache;
- `cuda_blas`, `cuda_offload`: cuBLAS through ctypes; pinned host memory and CPU nodes.

CUDA graphs: the first run of a key (`cuda_graph_cache.GraphKey`) runs eagerly (this compiles the
kernels and warms cuBLAS up), then the issue list is captured on stream 0 (the other streams join
through the fork event) with allocation forbidden, and instantiated; later runs replay it. A run
whose bound pointers changed captures again and applies it with `cudaGraphExecUpdate`; new input
shapes build a new variant (`specialize`) and capture anew. `counters` says which happened.
CuPy is imported lazily (`cuda_device.cupy`): importing this module needs no CuPy.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from optgraph.codegen.cuda_plan import CudaPlan, lower_cuda
from optgraph.codegen.in_place_outputs import in_place_candidates
from optgraph.errors import InputError, OptGraphError
from optgraph.ir.graph import Graph, TensorType
from optgraph.runtime.cuda_blas import load_blas
from optgraph.runtime.cuda_capture import (
    AllocationDuringCapture,
    CapturedGraph,
    allocation_forbidden,
    capture,
    dot_text,
    exec_update,
)
from optgraph.runtime.cuda_device import cupy, is_available
from optgraph.runtime.cuda_graph_cache import (
    Action,
    Binding,
    GraphCache,
    GraphKey,
    RuntimeCounters,
    input_signature,
    moved_weights,
    retype_graph,
    shape_change,
)
from optgraph.runtime.cuda_launch import Streams, Variant
from optgraph.runtime.cuda_memory import DeviceWeights, check_array
from optgraph.runtime.cuda_offload import HostErrors
from optgraph.runtime.reference_kernels import ir_dtype

__all__ = [
    "CHECK_BOUNDS",
    "AllocationDuringCapture",
    "CudaProgram",
    "is_available",
    "run_on_cuda",
]


class CudaProgram:
    """A graph compiled for the GPU; `run` it like the reference interpreter.

    `specialize(input_types) -> Graph` builds the graph for new input shapes: by default the
    graph re-typed and run unplanned (`cuda_graph_cache.retype_graph`); `optgraph.compile` passes
    `CompiledProgram.specialize`, which re-runs the program's pipeline, memory plan included. A
    graph that cannot take the new shapes, or a specialization that places the weights other than
    the program does, raises an `OptGraphError` naming the inputs and both shapes, and counts
    nothing. `capture_mode` is the CUDA stream-capture mode (0 global, 1 thread local, 2 relaxed).
    `pdl`: launch a kernel that follows another on its stream with Programmatic Dependent Launch
    where the device is sm_90+ and the driver has cuLaunchKernelEx (`cuda_pdl`); False: plain
    launches.
    `merge_launches`: consecutive independent kernels of a stream run as one launch
    (`codegen/merge_launches.py`); False: one launch per kernel.
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
        pdl: bool = True,
        merge_launches: bool = True,
    ):
        cupy()  # ImportError here, not half way through, where CuPy is missing
        from cupy_backends.cuda.libs import cublas

        self.graph = graph
        self.use_graph = use_graph
        self.capture_mode = capture_mode
        self.pdl = pdl
        self.merge_launches = merge_launches
        self._in_place = in_place_candidates(graph)
        self.counters = RuntimeCounters()
        self._specialize = specialize or (lambda types: retype_graph(graph, types))
        self._variants: dict[GraphKey, Variant] = {}
        self.blas = load_blas(cublas)
        self.streams = Streams(self.blas)
        self._cache: GraphCache[CapturedGraph] = GraphCache(graph_capacity, self._evict)
        self._issue: dict[GraphKey, tuple[Binding, list[Callable[[], Any]]]] = {}
        self.weights = DeviceWeights(graph)
        self.host_weights = self.weights.host
        self.host_errors = HostErrors()
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
        """Upload the weights (skipped when the very same arrays were uploaded last)."""
        if self.weights.upload(weights, before_write=self.streams.synchronize):
            self.counters.weight_uploads += 1

    def _variant(
        self, types: Mapping[str, TensorType], in_place: Mapping[str, str] | None = None
    ) -> Variant:
        key = GraphKey.of(types, in_place=in_place)
        v = self._variants.get(key)
        if v is None:
            same = dict(types) == input_signature(self.graph)
            graph = self.graph if same else self._specialized(types)
            v = Variant(
                graph, self.weights, self.streams, self.host_errors,
                pdl=self.pdl, merge_launches=self.merge_launches, in_place=in_place,
            )  # fmt: skip
            self._variants[key] = v
            self.counters.specializations += 1
        return v

    def _specialized(self, types: Mapping[str, TensorType]) -> Graph:
        graph = self._specialize(types)
        moved = moved_weights(self.graph, graph)
        if moved:
            names = ", ".join(f"'%{n}'" for n in moved[:4]) + (", ..." if len(moved) > 4 else "")
            raise OptGraphError(
                f"graph '{self.graph.name}' specialized for {shape_change(self.graph, types)} "
                f"places weights {names} other than the compiled program, whose weight buffers "
                "every specialization shares; compile a program for these shapes instead"
            )
        return graph

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
        there (`codegen/in_place_outputs.py`); any other output is copied in after the run."""
        cp = cupy()
        if weights is not None:
            self.set_weights(weights)
        elif self.graph.weights and not self.weights.is_set:
            raise InputError(f"graph '{self.graph.name}' has weights but none were given")
        types, bound_in, staged = self._classify(inputs)
        # An `out` array that is also an input's array: computed in place where legal.
        in_place = {
            o: i
            for o, i in self._in_place.items()
            if o in (out or {})
            and bound_in.get(i) == getattr(getattr(out[o], "data", None), "ptr", None)  # type: ignore[index]
        }
        variant = self._variant(types, in_place)
        plan = variant.plan
        bound_out: dict[str, int] = {}
        for name, arr in (out or {}).items():
            if name not in plan.types or name not in plan.outputs:
                raise InputError(f"out: graph '{self.graph.name}' has no output '%{name}'")
            check_array(arr, plan.types[name], f"out '%{name}'")
            if not isinstance(arr, cp.ndarray) or not arr.flags.c_contiguous:
                raise InputError(f"out '%{name}' must be a C-contiguous CuPy array")
            bound_out[name] = int(arr.data.ptr)
        key = GraphKey.of(types, frozenset(bound_in), frozenset(bound_out), in_place)
        binding = Binding.of(bound_in, bound_out)
        if variant.done_recorded:
            variant.done.synchronize()  # the last run's copies from staging are finished
        variant.stage_inputs(staged)
        cached = self._issue.get(key)
        if cached is None or cached[0] != binding:
            cached = self._issue[key] = (binding, variant.issue_list(bound_in, bound_out))
        ops = cached[1]
        self._launch(key, binding, ops)
        self.last_key = key
        variant.done.record(self.stream)
        variant.done_recorded = True
        if any(n not in bound_out for n in plan.outputs):
            self.stream.synchronize()
        self.host_errors.raise_first()
        results: dict[str, Any] = {}
        for name in plan.outputs:
            bound = name in bound_out
            results[name] = out[name] if bound else variant.read_output(name)  # type: ignore[index]
        return results

    def _classify(
        self, inputs: Mapping[str, Any]
    ) -> tuple[dict[str, TensorType], dict[str, int], dict[str, np.ndarray]]:
        cp = cupy()
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
        """Run `ops` eagerly, or capture, update or replay the graph of `key` (see the module
        docstring); counted in `counters`."""
        rt = cupy().cuda.runtime
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
        return capture(self.stream.ptr, ops, self.capture_mode, self.allocation_forbidden)

    def _evict(self, captured: CapturedGraph) -> None:
        captured.destroy()

    # -- introspection -------------------------------------------------------------------------

    def plan(self, key: GraphKey | None = None) -> CudaPlan:
        """The plan of the last run's variant (or of `key`'s input types)."""
        key = key or self.last_key
        if key is None:
            return lower_cuda(self.graph, merge_launches=self.merge_launches)
        return self._variant(key.types(), dict(key.in_place)).plan

    def debug_dot_str(self, key: GraphKey | None = None) -> str:
        """cudaGraphDebugDotPrint (verbose) of the captured graph of `key` (default: last run)."""
        key = key or self.last_key
        if key is None or key not in self._cache:
            raise OptGraphError("no CUDA graph has been captured for this key yet")
        return dot_text(self._cache.get(key).graph)

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


def run_on_cuda(
    graph: Graph,
    inputs: Mapping[str, Any],
    weights: Mapping[str, Any],
    *,
    pipeline: str = "default",
    use_graph: bool = True,
    pdl: bool = True,
    merge_launches: bool = True,
) -> dict[str, Any]:
    """What `optgraph run --device cuda` does: plan `graph` with `pipeline` (plus a memory plan),
    run it, and with CUDA graphs run it again as a replay, which must equal the first run."""
    from optgraph.passes.facts import FACTS
    from optgraph.passes.manager import run_pipeline

    planned = run_pipeline(graph, pipeline)
    if not FACTS["memory-planned"].holds(planned):
        planned = run_pipeline(planned, "analyze-lifetimes,plan-memory")
    program = CudaProgram(
        planned, weights=weights, use_graph=use_graph, pdl=pdl, merge_launches=merge_launches
    )
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
