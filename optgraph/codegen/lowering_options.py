"""The options that shape how a planned graph is lowered and launched, in one object.

Made once (by `optgraph run`/`compile` from their flags, or by `optgraph.compile(..., options=)`)
and carried inside the lowered program, so no layer threads a flag of its own:

    before: cli.py --no-merge-launches -> cli_run -> runtime/cuda -> CudaProgram -> cuda_launch
            -> cuda_memory -> cuda_plan -> merge_launches, one argument at each step
    after:  LoweringOptions(merge_launches=False) -> lower_for_cuda -> LoweredProgram.options

Lowering reads `merge_launches`; the CUDA runtime reads the others when it launches.
"""

from __future__ import annotations

from dataclasses import dataclass

# How the CUDA runtime runs a split program's CPU nodes (codegen/plan/cpu_node_schedule.py).
CPU_NODE_MODES = ("calling-thread", "graph", "graph-per-node")


@dataclass(frozen=True)
class LoweringOptions:
    """How a program is lowered and run on the GPU. The cpu target reads `merge_launches` only,
    through the stream cost model (`passes/manager.with_merged_launches`).

    - `merge_launches`: consecutive independent kernels of a stream as one launch
      (`codegen/plan/merge_launches.py`); False: one launch per kernel.
    - `pdl`: a kernel that follows another on its stream is launched with Programmatic
      Dependent Launch where the device is sm_90+ (`runtime/cuda/pdl.py`).
    - `use_graph`: capture a CUDA graph and replay it; False: every run launches eagerly.
    - `capture_mode`: the CUDA stream-capture mode (0 global, 1 thread local, 2 relaxed).
    - `graph_capacity`: captured graphs kept at once (least recently used evicted first).
    - `cpu_nodes`: how a split program's CPU nodes run (`codegen/plan/cpu_node_schedule.py`):
      `"calling-thread"` (the thread that called `run`, between CUDA graphs of the GPU
      segments), `"graph"` (one host function per CPU segment inside the one CUDA graph) or
      `"graph-per-node"` (one host function per CPU node).
    """

    merge_launches: bool = True
    pdl: bool = True
    use_graph: bool = True
    capture_mode: int = 2
    graph_capacity: int = 8
    cpu_nodes: str = "calling-thread"

    def __post_init__(self) -> None:
        if self.cpu_nodes not in CPU_NODE_MODES:
            raise ValueError(
                f"cpu_nodes: expected one of {', '.join(CPU_NODE_MODES)}, got {self.cpu_nodes!r}"
            )
