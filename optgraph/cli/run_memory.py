"""The host memory `optgraph run` needs, figured before it allocates anything, against what the
machine has.

Every size a run allocates is known from the graph and its plan: the inputs and weights (drawn
or read), the planned arena of the CPU executor and the largest node result it holds before storing it (a
fused region's values: it evaluates the body node by node), the outputs it returns, and with `--check` the
reference interpreter's values (it frees each value after its last reader, so its peak is the
largest set of values alive at once, in issue order). A graph the verifier accepts may still
need far more than the machine has (`f32[4,99999999]` tensors: 1.6 GB each); such a run is
refused up front with the figures instead of growing until the allocator fails:

    error: run: not enough memory: this run needs at least 10.7 GiB on the host (inputs 1.49 GiB,
    weights 381 MiB, cpu arena 1.49 GiB + 4.47 GiB scratch, outputs 1.49 GiB; --check:
    reference values 5.96 GiB), and 8 GiB are available (MemAvailable in /proc/meminfo)

On cuda the host holds the inputs, weights and outputs, the runtime's pinned buffers (staging of
inputs and outputs, host-placed values and weights); the device's own memory is checked by the
runtime before it allocates (`runtime/cuda/memory.py`, against the device's free memory).

The figure is a lower bound: NumPy's temporaries inside one op come on top. Weights read from a
`.gguf` file are memory-mapped (file pages the kernel can drop and read again), so they are not
counted. What is available: `host_memory.available_memory` (MemAvailable of /proc/meminfo,
lowered by a cgroup's limit; unknown elsewhere: no check).

Complexity: O(V + E) over the graph.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from optgraph.codegen.plan.arena_program import Program
from optgraph.errors import OptGraphError
from optgraph.host_memory import Available, size_text
from optgraph.ir.graph import Graph, Node
from optgraph.ir.weight_layout import model_type


@dataclass(frozen=True)
class RunMemory:
    """Host bytes of a run's parts; `total` is what is alive at once at the peak."""

    inputs: int
    weights: int
    arena: int  # the CPU executor's arenas (0 on cuda: the arena is on the device)
    scratch: int  # the CPU executor's largest node result before it is stored (a fused body's
    # values: it evaluates the body node by node)
    outputs: int
    reference: int  # --check: the reference interpreter's peak of live values (0 without)
    pinned: int = 0  # cuda: the runtime's pinned buffers (staging, host values and weights)

    @property
    def total(self) -> int:
        # The executor's arena (or the cuda runtime) is gone when the reference runs; its
        # outputs are kept.
        executor = self.arena + self.scratch + self.pinned
        return self.inputs + self.weights + self.outputs + max(executor, self.reference)

    def describe(self) -> str:
        parts = [
            f"inputs {size_text(self.inputs)}",
            f"weights {size_text(self.weights)}",
        ]
        if self.arena:
            parts.append(f"cpu arena {size_text(self.arena)} + {size_text(self.scratch)} scratch")
        if self.pinned:
            parts.append(f"cuda pinned buffers {size_text(self.pinned)}")
        parts.append(f"outputs {size_text(self.outputs)}")
        text = ", ".join(parts)
        if self.reference:
            text += f"; --check: reference values {size_text(self.reference)}"
        return text


def reference_peak(graph: Graph) -> int:
    """The largest sum of node values the reference interpreter holds at once (issue order,
    each value freed after its last reader unless it is an output), plus the copies of the
    outputs it returns."""
    types = graph.value_types()
    outputs = set(graph.output_names())
    last_use: dict[str, int] = {}
    for index, node in enumerate(graph.nodes):
        for operand in node.operands:
            last_use[operand] = index
    computed = {n.name for n in graph.nodes if n.type is not None and not n.is_event}
    live = peak = 0
    for index, node in enumerate(graph.nodes):
        if node.is_event or node.type is None:
            continue
        live += node.type.nbytes
        peak = max(peak, live)
        for operand in set(node.operands):
            if operand in computed and last_use[operand] == index and operand not in outputs:
                live -= types[operand].nbytes
    return peak + sum(types[o].nbytes for o in outputs)


def run_memory(
    graph: Graph,
    program: Program | None,
    check: bool,
    weights_file: str | None,
    pinned: int = 0,
) -> RunMemory:
    """What a run of `graph` holds on the host; `program` is the CPU executor's (None on
    cuda), `weights_file` the `--weights` file (a `.gguf` is memory-mapped: not counted),
    `pinned` the cuda runtime's pinned host buffers (`runtime.cuda.memory.pinned_bytes`)."""
    mapped = weights_file is not None and Path(weights_file).suffix == ".gguf"
    arena = scratch = 0
    if program is not None:
        arena = sum(program.arena_of(d) for d in range(program.device_count))
        scratch = max(map(_node_scratch, program.graph.nodes), default=0)
    types = graph.value_types()
    return RunMemory(
        inputs=sum(i.type.nbytes for i in graph.inputs),
        weights=0 if mapped else sum(model_type(w).nbytes for w in graph.weights),
        arena=arena,
        scratch=scratch,
        outputs=sum(types[o].nbytes for o in set(graph.output_names())),
        reference=reference_peak(graph) if check else 0,
        pinned=pinned,
    )


def _node_scratch(node: Node) -> int:
    """Bytes the CPU executor holds for `node` before storing its result in the arena."""
    if node.body is not None:
        return sum(n.type.nbytes for n in node.body.nodes if n.type is not None)
    return node.type.nbytes if node.type is not None and not node.is_event else 0


def check_run_memory(memory: RunMemory, available: Available | None) -> None:
    """Refuse the run (an `OptGraphError` with the figures) when it cannot fit."""
    if available is None or memory.total <= available[0]:
        return
    hint = ""
    if memory.reference and replace(memory, reference=0).total <= available[0]:
        hint = "; without --check it would fit"
    raise OptGraphError(
        f"run: not enough memory: this run needs at least {size_text(memory.total)} on the host "
        f"({memory.describe()}), and {size_text(available[0])} are available "
        f"({available[1]}){hint}"
    )
