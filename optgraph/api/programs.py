"""The public compile API: `optgraph.compile(graph, pipeline, target)` -> a runnable program.

    import optgraph as og
    program = og.compile(og.parse_file("model.ir"), target="cpu")
    outputs = program.run({"x": x}, weights=params)       # numpy in, numpy out

`target="cpu"` runs the lowered program on the planned executor (a NumPy byte arena at the planned
offsets, streams simulated in a seeded interleaving); `target="cuda"` lowers the planned graph once
(`codegen.cuda_plan.lower_for_cuda`: kernels, launches, arena, events, copies, prefetch slots, with
the `LoweringOptions` given as `options=`) and hands that lowered program to
`optgraph.runtime.cuda.runner`, imported only then; the runtime never runs a pass or lowers. A pipeline
that does not end in a memory plan gets one (`passes.manager.plan_memory_if_missing`).

- **Weights.** `run(inputs)` without weights uses `default_weights()`: the reference's seeded
  random weights (seed 0), made once per program and then the very same arrays on every run, so
  the CUDA runtime uploads them once (it skips an upload of the very arrays it uploaded last,
  still alive: `runtime/last_arrays.py`). They are read-only: to run other values, pass other
  arrays.
- **Bound steps** (cuda): `step = program.bind(inputs, out)` checks the CuPy arrays once; a
  call `step()` only launches the program on them (replays its CUDA graph).
- **New input shapes** (cuda): the runtime asks the `relowering` callback of this module for a
  lowered variant: `specialize(input_types)` gives the source graph re-typed for those inputs and
  put through the same pipeline, memory plan included, which is then lowered with the program's
  options: each shape gets its own plan, kernels and CUDA graph (`RuntimeCounters.
  specializations` counts them). A graph that cannot take the shapes (a `reshape` with a static
  `shape`, say) raises an `InputError` naming each changed input with its compiled and new type,
  rather than running anything else. The cpu target runs the compiled shapes only.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from optgraph.api.program_devices import (
    MultiDeviceRunner,
    check_device_count,
    device_pipeline,
    needs_ranks,
    run_emulated,
)
from optgraph.codegen.lower_cuda import lower_for_cuda, lower_variant
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.codegen.plan.arena_program import Program
from optgraph.codegen.plan.lower_arena import lower
from optgraph.codegen.plan.lowered import LoweredProgram, LoweredVariant, Relower
from optgraph.codegen.rank_programs import lower_ranks
from optgraph.errors import InputError, OptGraphError, did_you_mean
from optgraph.ir.constants import with_constants
from optgraph.ir.graph import Graph, TensorType
from optgraph.passes.manager import plan_memory_if_missing, run_pipeline, with_merged_launches
from optgraph.passes.split_experts import expert_weights, is_piece

if TYPE_CHECKING:
    from optgraph.runtime.cuda.runner import CudaProgram

TARGETS = ("cpu", "cuda")
Specialize = Callable[[Mapping[str, TensorType]], Graph]


def plan_graph(graph: Graph, pipeline: str) -> Graph:
    """`graph` through `pipeline`, then through a memory plan if the pipeline did not end in one."""
    return plan_memory_if_missing(run_pipeline(graph, pipeline))


def relowering(graph: Graph, options: LoweringOptions, specialize: Specialize | None) -> Relower:
    """The callback the CUDA runtime asks for a variant of `graph`'s lowered program: for other
    input types, `specialize(types)` (default: `graph` re-typed, run unplanned) lowered with
    `options`; for the same types with in-place outputs, `graph` itself lowered so."""
    from optgraph.runtime.cuda.graph_cache import input_signature, retype_graph

    signature = input_signature(graph)

    def relower(types: Mapping[str, TensorType], in_place: Mapping[str, str]) -> LoweredVariant:
        if dict(types) == signature:
            return lower_variant(graph, options, in_place)
        specialized = specialize(types) if specialize else retype_graph(graph, types)
        return lower_variant(specialized, options, in_place)

    return relower


def cuda_program(
    graph: Graph,
    *,
    weights: Mapping[str, Any] | None = None,
    options: LoweringOptions | None = None,
    specialize: Specialize | None = None,
) -> CudaProgram:
    """`graph` (planned or not) lowered once with `options` and handed to the CUDA runtime,
    which asks `specialize` (see `relowering`) for the graph of other input shapes."""
    from optgraph.runtime.cuda.runner import CudaProgram

    options = options or LoweringOptions()
    lowered = lower_for_cuda(graph, options)
    relower = relowering(graph, options, specialize)
    return CudaProgram(lowered, weights=weights, relower=relower)


def _bare(key: str, given: Mapping[str, Any]) -> str:
    """A key written as in the IR (`%x`) as the value's name (`x`), where `x` is not given too."""
    return key[1:] if key.startswith("%") and key[1:] not in given else key


def inputs_by_name(
    graph: Graph, inputs: Mapping[str, Any], source: Graph | None = None
) -> Mapping[str, Any]:
    """`inputs` by the graph's input names (or its `source`'s: a tensor-parallel program takes
    the whole arrays): `%x` read as `x`; a name neither has is an `InputError` with the closest
    one. The caller's mapping itself where every key is a plain name."""
    named = inputs
    if any(k.startswith("%") for k in inputs):
        twice = [k for k in inputs if k.startswith("%") and k[1:] in inputs]
        if twice:
            raise InputError(f"input '{twice[0]}' given twice ('{twice[0][1:]}', '{twice[0]}')")
        named = {_bare(k, inputs): v for k, v in inputs.items()}
    declared = set(graph.input_names()) | (set() if source is None else set(source.input_names()))
    unknown = [k for k in named if k not in declared]
    if unknown:
        hint = did_you_mean(unknown[0], declared, sigil="%")
        raise InputError(f"graph '{graph.name}' has no input '%{unknown[0]}'{hint}")
    return named


@dataclass
class CompiledProgram:
    """A planned graph, its lowered program, and a way to run it on `target`.

    `source` and `pipeline` are what `graph` was compiled from: `specialize` repeats that for new
    input shapes (without a `source`: `graph` re-typed and run unplanned). `options` shape the
    CUDA lowering and launches; `lowered` (cuda) is the lowered program made by `compile`
    (None: lowered on first use)."""

    graph: Graph
    program: Program
    target: str
    source: Graph | None = None
    pipeline: str = "default"
    options: LoweringOptions = field(default_factory=LoweringOptions)
    lowered: LoweredProgram | None = None
    _cuda: Any = field(default=None, repr=False)
    _default_weights: dict[str, np.ndarray] | None = field(default=None, repr=False)
    _constants: dict[str, np.ndarray] | None = field(default=None, repr=False)
    _pieces: tuple[list[Any], dict[str, Any]] | None = field(default=None, repr=False)

    def run(
        self,
        inputs: Mapping[str, Any],
        weights: Mapping[str, Any] | None = None,
        *,
        seed: int | None = 0,
    ) -> dict[str, Any]:
        """Outputs by name. `weights=None` uses `default_weights()` (made once, then reused).

        On cpu, `seed` picks the stream interleaving (None: issue order); nodes reading
        quantized weights run on the compiled CPU kernels (`quantized="native"`: never a whole
        matrix dequantized per call, all cores; products within f32 round-off of the
        reference, not its bits)."""
        inputs = inputs_by_name(self.graph, inputs, self.source)
        if weights is not None and any(k.startswith("%") for k in weights):
            weights = {_bare(k, weights): v for k, v in weights.items()}
        weights = self.default_weights() if weights is None else self._with_pieces(weights)
        if self.target == "cuda":
            outputs: dict[str, Any] = self._cuda_runner().run(inputs, weights)
            return outputs
        if self.source is not None and needs_ranks(self.graph):  # whole arrays in and out
            return run_emulated(self.source, self.program, inputs, weights, seed)
        from optgraph.runtime.cpu.planned_executor import execute

        arrays = {k: np.asarray(v) for k, v in inputs.items()}
        return execute(self.program, arrays, dict(weights), seed=seed, quantized="native").outputs

    def bind(
        self,
        inputs: Mapping[str, Any],
        out: Mapping[str, Any],
        weights: Mapping[str, Any] | None = None,
    ) -> Any:
        """(cuda) The serving loop's step: `inputs` and `out` CuPy arrays checked once, weights
        uploaded now (`None`: `default_weights()`); each call of the step only launches the
        program on them (`runtime.cuda.CudaProgram.bind`)."""
        if self.target != "cuda":
            raise OptGraphError(f"bind: target '{self.target}' has no bound steps; use run")
        runtime = self._cuda_runner()
        if isinstance(runtime, MultiDeviceRunner):
            raise OptGraphError("bind: a program on several devices has no bound steps; use run")
        runtime.use_weights(
            self.default_weights() if weights is None else self._with_pieces(weights)
        )
        return runtime.bind(inputs, out)

    def _with_pieces(self, weights: Mapping[str, Any]) -> Mapping[str, Any]:
        """`_with_constants(weights)` and the expert pieces `split-experts` named, cut from the
        user's whole stacks (`passes.split_experts.expert_weights`: views, no copies). The same
        arrays give the same piece objects (kept from the last call), so a runtime that skips
        uploading the arrays it uploaded last skips them too."""
        weights = self._with_constants(weights)
        if self.source is None or all(
            w.name in weights or f"%{w.name}" in weights or not is_piece(w.name)
            for w in self.graph.weights
        ):  # nothing to cut: the user's arrays, never held (a tensor-parallel program's shards
            return weights  # are cut by its runner; a freed array's identity is free again)
        given = list(weights.values())
        last = self._pieces
        same = last is not None and len(last[0]) == len(given)
        if last is not None and same and all(a is b for a, b in zip(last[0], given)):
            return last[1]
        cut = expert_weights(self.source, self.graph, weights)
        self._pieces = (given, cut)
        return cut

    def _with_constants(self, weights: Mapping[str, Any]) -> Mapping[str, Any]:
        """`weights` and the value of each constant of the graph not among them (its own
        weights file need not hold an import's constants: `ir.constants`); the mapping itself
        when none is missing. The constants' arrays are made once per program, so a runtime
        that skips uploading the arrays it uploaded last skips them too."""
        if self._constants is None:
            arrays: dict[str, np.ndarray] = with_constants(self.graph, {})
            if self.source is not None:
                arrays = with_constants(self.source, arrays)
            for array in arrays.values():
                array.flags.writeable = False
            self._constants = arrays
        missing = {
            k: v for k, v in self._constants.items() if k not in weights and f"%{k}" not in weights
        }
        return {**weights, **missing} if missing else weights

    def default_weights(self) -> dict[str, np.ndarray]:
        """The reference's seeded random weights (seed 0) for `graph`, made on first use and the
        same read-only arrays from then on."""
        if self._default_weights is None:
            from optgraph.reference.interpreter import random_weights

            weights = random_weights(self.graph, seed=0)
            for array in weights.values():
                array.flags.writeable = False
            self._default_weights = weights
        return self._default_weights

    def specialize(self, input_types: Mapping[str, TensorType]) -> Graph:
        """The planned graph for new input types: `source` re-typed, then `pipeline` (and a memory
        plan). Raises `InputError` naming each changed input with both types when the graph
        cannot take them or the pipeline fails on them."""
        from optgraph.runtime.cuda.graph_cache import retype_graph, shape_change

        if self.source is None:
            raise OptGraphError("this program has no source graph to re-specialize")
        retyped = retype_graph(self.source, input_types)  # names the inputs and both types
        try:
            return plan_graph(retyped, self.pipeline)
        except OptGraphError as err:
            change = shape_change(self.source, input_types)
            raise InputError(
                f"graph '{self.source.name}' cannot take {change}: {self.pipeline!r} failed: "
                f"{err.message}",
                err.span,
            ) from None

    def node_times(self, passes: int = 3) -> dict[str, float]:
        """(cuda, one GPU, after a run) Seconds of each GPU node of the last run, measured one
        node at a time (`runtime/cuda/node_times.py`): `plan-prefetch{times=FILE}` prices the
        compute with them (`runtime.cuda.node_times.write_times` writes that file)."""
        if self.target != "cuda" or self._cuda is None:
            raise OptGraphError("node times: run the program on cuda first")
        if isinstance(self._cuda, MultiDeviceRunner):
            raise OptGraphError("node times: a program on several devices is not measured")
        times: dict[str, float] = self._cuda.node_times(passes)
        return times

    def close(self) -> None:
        """(cuda) Destroy the captured graphs and cuBLAS handles; nothing to do on cpu or before
        the first cuda use."""
        if self._cuda is not None:
            self._cuda.close()
            self._cuda = None

    def _cuda_runner(self) -> Any:
        if self._cuda is None and needs_ranks(self.graph):
            # One rank program per device, on as many GPUs (program_devices.py).
            self._cuda = MultiDeviceRunner(
                self.source or self.graph, lower_ranks(self.graph, self.options)
            )
        if self._cuda is None:
            try:
                cuda = importlib.import_module("optgraph.runtime.cuda.runner")
            except ImportError as err:
                raise OptGraphError(
                    f"target 'cuda': the CUDA runtime is not available ({err}); use target='cpu'"
                ) from None
            probe = getattr(cuda, "is_available", None)
            if callable(probe) and not probe():
                raise OptGraphError(
                    "target 'cuda': no usable CUDA GPU (CuPy missing or no device); "
                    "use target='cpu'"
                )
            factory = getattr(cuda, "CudaProgram", None)
            if factory is None:
                raise OptGraphError(
                    "target 'cuda': optgraph.runtime.cuda.runner has no CudaProgram; use target='cpu'"
                )
            if self.lowered is None:
                self.lowered = lower_for_cuda(self.graph, self.options)
            hook = self.specialize if self.source is not None else None
            relower = relowering(self.graph, self.options, hook)
            self._cuda = factory(self.lowered, relower=relower)
        return self._cuda


def compile(
    graph: Graph,
    pipeline: str = "default",
    target: str = "cpu",
    *,
    options: LoweringOptions | None = None,
    devices: int | None = None,
) -> CompiledProgram:
    """Run `pipeline` (then plan memory if it did not) and lower the result for `target`, once.

    `options`: how the program is lowered and launched (`LoweringOptions`: `merge_launches=False`
    runs one launch per kernel, `use_graph=False` runs eagerly, ...). Every target plans with
    `merge_launches`, which assign-streams' cost model reads (`with_merged_launches`); the
    others shape the cuda target only. `devices`: how many devices the planned graph must run on (None: as
    many as it is placed on); an unplaced graph on several gets `tensor-parallel{ways=devices}`
    first (`program_devices`). On cuda a several-device program runs one process per GPU
    (`runtime/multi/gpus.py`)."""
    if target not in TARGETS:
        raise OptGraphError(f"unknown target '{target}' (expected one of {', '.join(TARGETS)})")
    options = options or LoweringOptions()
    pipeline = with_merged_launches(pipeline, options.merge_launches)
    if devices is not None:
        pipeline = device_pipeline(graph, pipeline, devices)
    planned = plan_graph(graph, pipeline)
    if devices is not None:
        check_device_count(planned, devices)
    single = target == "cuda" and not needs_ranks(planned)
    lowered = lower_for_cuda(planned, options) if single else None
    compiled = CompiledProgram(
        planned, lower(planned), target, source=graph, pipeline=pipeline, options=options,
        lowered=lowered,
    )  # fmt: skip
    if target == "cuda":
        compiled._cuda_runner()
    return compiled


def run_on_cuda(
    graph: Graph,
    inputs: Mapping[str, Any],
    weights: Mapping[str, Any],
    *,
    pipeline: str = "default",
    options: LoweringOptions | None = None,
    devices: int | None = None,
    compiled: CompiledProgram | None = None,
    node_times: str | None = None,
) -> dict[str, Any]:
    """What `optgraph run --device cuda [--devices N]` does: compile `graph` with `pipeline`
    (plus a memory plan) for cuda on `devices` GPUs, run it, and with CUDA graphs run it again
    as a replay, which must equal the first run; `compiled`: that program, compiled already
    (closed here all the same); `node_times`: a file to write each node's measured seconds to
    (`CompiledProgram.node_times`)."""
    options = options or LoweringOptions()
    if compiled is None:
        compiled = compile(graph, pipeline, "cuda", options=options, devices=devices)
    try:
        first = compiled.run(inputs, weights)
        outputs = first
        if options.use_graph:
            outputs = compiled.run(inputs, weights)
            for name in first:
                if np.asarray(first[name]).tobytes() != np.asarray(outputs[name]).tobytes():
                    raise OptGraphError(
                        f"run: the CUDA graph replay of '%{name}' differs from its run"
                    )
        if node_times is not None:
            from optgraph.runtime.cuda.node_times import write_times

            write_times(compiled.node_times(), node_times)
        return outputs
    finally:
        compiled.close()
