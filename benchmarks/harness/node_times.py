"""Each node's GPU time in a program, measured one node at a time: what `plan-prefetch{times=}`
prices the compute with instead of the roofline.

    times = node_times(cp, program, repeats=3)   # {node name: seconds}, after program.run(...)

The program's last run's steps are issued node by node, eagerly, in the plan's order (a valid
order for one stream at a time), each node alone on the device: a spin kernel first holds its
stream while the host issues the node's kernels, products and copies between two timing
events, so the interval holds the node's device time and not the host's issue; then the host
waits for it. Event steps are left out (every node runs after everything before it anyway).
The median of `repeats` passes is kept. CPU nodes, host copies and streamed plans are not
measured (measure the resident plan: the times are per node, whatever the plan). Cost: one
synchronization per node and pass.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path
from typing import Any

SPIN_US = 100.0  # how long the spin kernel holds a node's stream: longer than issuing any node

SPIN = r"""
extern "C" __global__ void og_bench_spin(long long cycles) {
  const long long start = clock64();
  while (clock64() - start < cycles) {}
}
"""


def node_times(cp: Any, program: Any, repeats: int = 3) -> dict[str, float]:
    """Seconds of each GPU node of `program`'s last run (see the module docstring)."""
    from optgraph.codegen.plan.steps import EventStep

    variant = program._variants[program.last_key]
    binding, _ = program._issue[program.last_key]
    bound = dict(binding.inputs) | dict(binding.outputs)
    by_node: dict[str, list[Any]] = {}
    streams: dict[str, int] = {}
    for step in variant.plan.steps:
        if isinstance(step, EventStep) or not getattr(step, "node", ""):
            continue
        by_node.setdefault(step.node, []).append(variant._op(step, bound, False))
        streams.setdefault(step.node, step.stream)
    spin = cp.RawKernel(SPIN, "og_bench_spin")
    rate = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["clockRate"] * 1e3
    cycles = cp.int64(int(rate * SPIN_US * 1e-6))
    variant.streams.synchronize()
    samples: dict[str, list[float]] = {name: [] for name in by_node}
    start, end = cp.cuda.Event(), cp.cuda.Event()
    for _ in range(repeats):
        for name, ops in by_node.items():
            stream = variant.streams.get(streams[name])
            spin((1,), (1,), (cycles,), stream=stream)
            start.record(stream)
            for op in ops:
                op()
            end.record(stream)
            end.synchronize()
            samples[name].append(cp.cuda.get_elapsed_time(start, end) * 1e-3)
    return {name: statistics.median(s) for name, s in samples.items()}


def write_times(times: dict[str, float], path: str | Path) -> None:
    """The `plan-prefetch{times=}` file: a JSON object of node names and seconds."""
    Path(path).write_text(json.dumps(times, indent=0, sort_keys=True) + "\n")
