"""Each node's GPU time in a program, measured one node at a time: what `plan-prefetch{times=}`
prices the compute with instead of the roofline (`optgraph run --node-times FILE.json`,
`CompiledProgram.node_times()`).

    program.run(inputs, weights)
    times = node_times(program)   # {node name: seconds}, the median of 3 passes

The last run's steps are issued node by node, eagerly, in the plan's order (a valid order for one
stream at a time), each node alone on the device: a spin kernel first holds the node's stream
while the host issues its kernels, products and copies between two timing events, so the
interval holds the node's device time and not the host's issue; then the host waits for it.
Event steps are left out (every node runs after everything before it anyway); kernels launch
plainly (no Programmatic Dependent Launch) and no node runs beside another. The buffers hold
the last run's values, so every node reads what it read then. Not measured: CPU
nodes and host copies (programs with CPU nodes are refused), and several GPUs. Cost: one host
synchronization per node and pass.
"""

from __future__ import annotations

import json
import statistics
from typing import Any

import numpy as np

from optgraph.codegen.plan.steps import EventStep, HostStep
from optgraph.errors import OptGraphError
from optgraph.output_files import write_atomic
from optgraph.runtime.cuda.device import cupy

# Cycles the spin kernel holds a node's stream: about 100 µs at 2 GHz, longer than the host
# takes to issue any node's steps.
SPIN_CYCLES = 200_000
PASSES = 3

SPIN = r"""
extern "C" __global__ void og_node_times_spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
}
"""


def node_times(program: Any, passes: int = PASSES) -> dict[str, float]:
    """Seconds of each GPU node of `program`'s (a `CudaProgram`) last run, the median of
    `passes` passes (see the module docstring)."""
    cp = cupy()
    if program.last_key is None or program.last_key not in program._issue:
        raise OptGraphError("node times: run the program once first (its buffers are measured)")
    variant = program._variants[program.last_key]
    if any(isinstance(s, HostStep) for s in variant.plan.steps):
        raise OptGraphError("node times: the program runs nodes on the CPU; measure it without")
    binding, _ = program._issue[program.last_key]
    bound = dict(binding.inputs)  # the caller's input arrays, as the run's issue list has them
    by_node: dict[str, list[Any]] = {}
    streams: dict[str, int] = {}
    for step in variant.plan.steps:
        if isinstance(step, EventStep) or not getattr(step, "node", ""):
            continue
        by_node.setdefault(step.node, []).append(variant._op(step, bound, False))
        streams.setdefault(step.node, step.stream)
    spin = cp.RawModule(code=SPIN).get_function("og_node_times_spin")
    launch = getattr(spin, "kernel", None)  # CuPy's Function, as the runtime launches kernels
    cycles = np.int64(SPIN_CYCLES)
    variant.streams.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in by_node}
    start = cp.cuda.Event()
    end = cp.cuda.Event()
    for _ in range(passes):
        for name, ops in by_node.items():
            stream = variant.streams.get(streams[name])
            if launch is not None:
                launch((1, 1, 1), (1, 1, 1), (cycles,), 0, stream)
            else:
                spin((1,), (1,), (cycles,), stream=stream)
            start.record(stream)
            for op in ops:
                op()
            end.record(stream)
            end.synchronize()
            samples[name].append(float(cp.cuda.get_elapsed_time(start, end)) * 1e-3)
    return {name: statistics.median(s) for name, s in samples.items()}


def times_text(times: dict[str, float]) -> str:
    """The `plan-prefetch{times=}` file's text: a JSON object of node names and seconds."""
    return json.dumps(times, indent=0, sort_keys=True) + "\n"


def write_times(times: dict[str, float], path: str) -> None:
    """`times_text` written whole to `path` (a temporary file beside it, then renamed)."""
    write_atomic(path, times_text(times))
