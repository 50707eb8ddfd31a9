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

The figure is a lower bound: NumPy's temporaries inside one op come on top. Weights read from a
`.gguf` file are memory-mapped (file pages the kernel can drop and read again), so they are not
counted. What is available: MemAvailable of /proc/meminfo, lowered by a cgroup's memory limit
(v2 `memory.max`, v1 `memory.limit_in_bytes`) less its usage; unknown elsewhere (no check).

Complexity: O(V + E) over the graph.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from optgraph.codegen.plan.arena_program import Program
from optgraph.errors import OptGraphError
from optgraph.ir.graph import Graph, Node
from optgraph.ir.weight_layout import model_type

CGROUP_V2 = Path("/sys/fs/cgroup")
CGROUP_V1 = Path("/sys/fs/cgroup/memory")
MEMINFO = Path("/proc/meminfo")


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

    @property
    def total(self) -> int:
        # The executor's arena is gone when the reference runs; its outputs are kept.
        executor = self.arena + self.scratch
        return self.inputs + self.weights + self.outputs + max(executor, self.reference)

    def describe(self) -> str:
        parts = [
            f"inputs {size_text(self.inputs)}",
            f"weights {size_text(self.weights)}",
        ]
        if self.arena:
            parts.append(f"cpu arena {size_text(self.arena)} + {size_text(self.scratch)} scratch")
        parts.append(f"outputs {size_text(self.outputs)}")
        text = ", ".join(parts)
        if self.reference:
            text += f"; --check: reference values {size_text(self.reference)}"
        return text


def size_text(nbytes: int) -> str:
    """`nbytes` as `1.49 GiB` (`512 bytes` below a KiB)."""
    value, unit = float(nbytes), ""
    for name in ("KiB", "MiB", "GiB", "TiB", "PiB", "EiB"):
        if value < 1024:
            break
        value, unit = value / 1024, name
    return f"{value:.3g} {unit}" if unit else f"{nbytes} bytes"


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
    graph: Graph, program: Program | None, check: bool, weights_file: str | None
) -> RunMemory:
    """What a run of `graph` holds on the host; `program` is the CPU executor's (None on
    cuda), `weights_file` the `--weights` file (a `.gguf` is memory-mapped: not counted)."""
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
    )


def _node_scratch(node: Node) -> int:
    """Bytes the CPU executor holds for `node` before storing its result in the arena."""
    if node.body is not None:
        return sum(n.type.nbytes for n in node.body.nodes if n.type is not None)
    return node.type.nbytes if node.type is not None and not node.is_event else 0


def available_memory() -> tuple[int, str] | None:
    """(bytes this process may still allocate, where the figure comes from); None: unknown."""
    found: list[tuple[int, str]] = []
    try:
        for line in MEMINFO.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                found.append((int(line.split()[1]) * 1024, "MemAvailable in /proc/meminfo"))
    except (OSError, ValueError, IndexError):
        pass
    for limit_file, usage_file in (
        (CGROUP_V2 / "memory.max", CGROUP_V2 / "memory.current"),
        (CGROUP_V1 / "memory.limit_in_bytes", CGROUP_V1 / "memory.usage_in_bytes"),
    ):
        try:
            limit_text = limit_file.read_text().strip()
            if limit_text == "max":
                continue
            limit, usage = int(limit_text), int(usage_file.read_text().strip())
        except (OSError, ValueError):
            continue
        if limit < 1 << 60:  # v1 writes a huge number for "no limit"
            found.append((max(limit - usage, 0), f"the cgroup limit {limit_file}"))
    return min(found) if found else None


def check_run_memory(memory: RunMemory, available: tuple[int, str] | None) -> None:
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
