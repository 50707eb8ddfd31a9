"""The several-device side of the compile API: `optgraph.compile(graph, target="cuda", devices=N)`.

    program = og.compile(graph, target="cuda", devices=2)   # tensor-parallel{ways=2} first
    outputs = program.run({"x": x}, weights=params)         # the user's (unsliced) weights

- `device_pipeline(graph, pipeline, devices)`: a graph with no device annotations run on N > 1
  devices gets `tensor-parallel{ways=N}` at the head of its pipeline (as `optgraph run --devices
  N` does), unless the pipeline splits it itself (tensor-parallel or pipeline-parallel); a graph
  already placed on devices keeps its pipeline.
- `check_device_count(planned, devices)`: the planned graph must use exactly the devices asked for.
- `MultiDeviceRunner`: the planned graph lowered per rank (`codegen/rank_programs.lower_ranks`,
  once) and run on that many GPUs (`runtime/multi_gpu.MultiGpuProgram`, started on the first
  run). The user's weights are sliced to the pieces the planned graph names once per set of
  arrays (`parallel_weights`), and the rank processes restarted only when other arrays are given.
  Its inputs are cut the same way on every run (`parallel_inputs`: a KV cache split by head
  reaches each rank as that rank's heads only) and split outputs joined (`whole_outputs`), so the
  user passes and reads whole arrays under the source graph's names.
- `run_emulated`: the same on the CPU, the planned executor over emulated devices.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from optgraph.analysis.tensor_shards import PieceLayout
from optgraph.codegen.plan.arena_program import Program
from optgraph.codegen.plan.lowered import RankPrograms
from optgraph.errors import InputError, OptGraphError
from optgraph.ir.graph import Graph
from optgraph.ir.ops import get_op
from optgraph.passes.manager import parse_pipeline
from optgraph.passes.tensor_parallel import join_outputs, piece_layout, shard_inputs, shard_weights
from optgraph.runtime.cpu.planned_executor import execute
from optgraph.runtime.last_arrays import LastArrays
from optgraph.runtime.multi.gpus import MultiGpuProgram, StepTimes

SPLITTING_PASSES = frozenset({"tensor-parallel", "pipeline-parallel"})


def is_placed(graph: Graph) -> bool:
    """Whether any node, input or weight of `graph` names a device."""
    annotated = [n.ann for n in graph.nodes] + [i.ann for i in graph.inputs]
    return any(a.device is not None for a in annotated + [w.ann for w in graph.weights])


def needs_ranks(graph: Graph) -> bool:
    """Whether `graph` runs as rank programs: several devices, or any collective."""
    if graph.device_count() > 1:
        return True
    return any(
        (op := get_op(n.op)) is not None and op.category == "collective" for n in graph.nodes
    )


def device_pipeline(graph: Graph, pipeline: str, devices: int) -> str:
    """`pipeline`, with `tensor-parallel{ways=devices}` first for an unplaced graph on several
    devices whose pipeline does not split it itself."""
    if devices < 1:
        raise OptGraphError(f"devices must be at least 1, got {devices}")
    splits = {p.name for p in parse_pipeline(pipeline)} & SPLITTING_PASSES
    if devices == 1 or is_placed(graph) or splits:
        return pipeline
    return f"tensor-parallel{{ways={devices}}},{pipeline}"


def check_device_count(planned: Graph, devices: int) -> None:
    """Refuse a planned graph that uses other than `devices` devices (1: any single-device)."""
    used = planned.device_count()
    if used != devices:
        raise OptGraphError(
            f"graph '{planned.name}' is placed on {used} device(s) but {devices} were asked for "
            f"(run it on {used}, or split it with tensor-parallel{{ways={devices}}} "
            f"or pipeline-parallel{{stages={devices}}})"
        )


def parallel_weights(
    source: Graph, planned: Graph, weights: Mapping[str, Any]
) -> dict[str, np.ndarray]:
    """The arrays `planned` names: the given ones by name (a graph placed by hand, or placed
    whole by pipeline-parallel), else the pieces tensor-parallel cut from `source`'s weights
    (`passes/tensor_parallel.shard_weights`, which recomputes its recipes from `source`)."""
    names = [w.name for w in planned.weights]
    if all(n in weights for n in names):
        return {n: weights[n] for n in names}
    missing = [w for w in source.weights if w.name not in weights]
    if missing:
        raise InputError(
            f"missing weight '%{missing[0].name}' ({missing[0].type})", missing[0].span
        )
    arrays = {name: np.asarray(value) for name, value in weights.items()}
    return shard_weights(source, planned, arrays)


def parallel_inputs(
    source: Graph,
    planned: Graph,
    inputs: Mapping[str, Any],
    layout: PieceLayout | None = None,
) -> dict[str, Any]:
    """The inputs `planned` names: the given ones by name, else the pieces tensor-parallel cut
    from `source`'s inputs (a KV cache split by KV head: `passes/tensor_parallel.shard_inputs`).
    Arrays pass through untouched where they need no cut (CuPy arrays included)."""
    names = [i.name for i in planned.inputs]
    if all(n in inputs for n in names):
        return {n: inputs[n] for n in names}
    missing = [i for i in source.inputs if i.name not in inputs]
    if missing:
        raise InputError(f"missing input '%{missing[0].name}' ({missing[0].type})", missing[0].span)
    if layout is None:
        layout = piece_layout(source, planned)
    cut = {r.source for r in layout.recipes.values()}
    arrays = {k: np.asarray(v) if k in cut else v for k, v in inputs.items()}
    return shard_inputs(source, planned, arrays, layout)


def whole_outputs(
    source: Graph, planned: Graph, outputs: Mapping[str, Any], layout: PieceLayout | None = None
) -> dict[str, Any]:
    """`source`'s outputs by name from `planned`'s: split outputs (KV caches cut by head) joined
    along their axis (`passes/tensor_parallel.join_outputs`), the rest as they are."""
    if all(o in outputs for o in source.output_names()):
        return {o: outputs[o] for o in source.output_names()}
    return join_outputs(source, planned, dict(outputs), layout)


def run_emulated(
    source: Graph,
    program: Program,
    inputs: Mapping[str, Any],
    weights: Mapping[str, Any],
    seed: int | None,
) -> dict[str, Any]:
    """A planned several-device program on the planned executor's emulated devices, taking and
    giving whole arrays under `source`'s names (`parallel_inputs`, `parallel_weights`,
    `whole_outputs`)."""
    planned = program.graph
    layout = piece_layout(source, planned)
    arrays = {k: np.asarray(v) for k, v in inputs.items()}
    pieces = parallel_inputs(source, planned, arrays, layout)
    sliced = parallel_weights(source, planned, weights)
    outputs = execute(program, pieces, sliced, seed=seed).outputs
    return whole_outputs(source, planned, outputs, layout)


class MultiDeviceRunner:
    """A planned several-device graph on that many GPUs (see the module docstring)."""

    def __init__(
        self,
        source: Graph,
        ranks: RankPrograms,
        *,
        launcher: str = "spawn",
        peer_reduce: bool = True,
    ):
        self.source, self.ranks, self.launcher = source, ranks, launcher
        self.peer_reduce = peer_reduce
        self.layout = piece_layout(source, ranks.graph)
        self._program: Any = None
        self._weights_seen = LastArrays()

    def run(self, inputs: Mapping[str, Any], weights: Mapping[str, Any]) -> dict[str, Any]:
        """Outputs by name (NumPy): the ranks started, or restarted for new weight arrays."""
        names = [w.name for w in self.source.weights]
        if self._program is None or not self._weights_seen.same(names, weights):
            self.close()
            sliced = parallel_weights(self.source, self.ranks.graph, weights)
            self._program = MultiGpuProgram(
                self.ranks, sliced, launcher=self.launcher, peer_reduce=self.peer_reduce
            )
            self._weights_seen.remember(names, weights)
        pieces = parallel_inputs(self.source, self.ranks.graph, inputs, self.layout)
        outputs = self._program.run(pieces)
        return whole_outputs(self.source, self.ranks.graph, outputs, self.layout)

    def time(
        self, inputs: Mapping[str, Any], weights: Mapping[str, Any], warmup: int, reps: int
    ) -> StepTimes:
        """Milliseconds per replay (`MultiGpuProgram.time`), the ranks started if need be."""
        if self._program is None:
            self.run(inputs, weights)
        pieces = parallel_inputs(self.source, self.ranks.graph, inputs, self.layout)
        times: StepTimes = self._program.time(pieces, warmup, reps)
        return times

    def close(self) -> None:
        if self._program is not None:
            self._program.close()
            self._program = None
