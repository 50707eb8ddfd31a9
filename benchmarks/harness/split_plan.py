"""The CPU side of bench_split.py: the MoE step planned two ways, and its synchronizations.

- `plan_graphs`: the model of `moe_decode.py` through `SPLIT` (its expert tables on the host:
  `split-backends` places the routed experts on the CPU) and, with every weight on the device,
  through `GPU`;
- `plan_syncs`: the lowered program's host<->device waits (a wait on the host stream for an event
  recorded on a GPU stream, or the reverse); `schedule_syncs`: those one run makes in a given
  `cpu_nodes` way (the calling thread's: its waits, and the GPU parts launched after host work);
  `sync_way_syncs`: the synchronizations `split_sync_way.SyncWay` makes running the same steps
  without a graph;
- `describe`: the figures the dry run and the table print.
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

import optgraph as og
from benchmarks.harness.moe_decode import MoeSizes, generate_moe_decode
from optgraph.analysis.host_syncs import host_device_waits, min_host_device_syncs
from optgraph.analysis.segments import count_splits, format_size
from optgraph.codegen.lowering_options import CPU_NODE_MODES
from optgraph.codegen.plan.cpu_node_schedule import boundary_syncs, calling_thread_schedule
from optgraph.codegen.plan.steps import (
    HOST_SPACES,
    CopyStep,
    CudaPlan,
    EventStep,
    GemmStep,
    HostStep,
    KernelStep,
)
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline

SPLIT = (
    "verify,dce,cse,assign-streams{max-streams=2},split-backends,fuse,insert-sync,"
    "analyze-lifetimes,plan-memory"
)
GPU = "verify,dce,cse,fuse,assign-streams{max-streams=2},insert-sync,analyze-lifetimes,plan-memory"
SPLIT_MODES = CPU_NODE_MODES  # the ways the runtime runs CPU nodes (LoweringOptions.cpu_nodes)


def plan_graphs(args: argparse.Namespace) -> tuple[Graph, Graph, Graph]:
    """(source, split program, all-GPU program); `--model qwen3moe`: the imported model's
    (`moe_imported.py`)."""
    if getattr(args, "model", "synthetic") == "qwen3moe":
        from benchmarks.harness.moe_imported import plan_imported

        return plan_imported(args, SPLIT, GPU)
    sizes = MoeSizes(
        layers=args.layers, hidden=args.hidden, heads=args.heads, kv_heads=args.kv_heads,
        experts=args.experts, expert_ffn=args.expert_ffn, shared_ffn=args.shared_ffn,
        vocab=args.vocab, cache_len=args.cache_len,
    )  # fmt: skip
    text = generate_moe_decode(sizes)
    source = og.parse(text)
    on_device = og.parse(text.replace(" host\n", "\n"))
    return source, run_pipeline(source, SPLIT), run_pipeline(on_device, GPU)


def model_title(args: argparse.Namespace) -> str:
    """What the model is, for the dry run and the table."""
    if getattr(args, "model", "synthetic") == "qwen3moe":
        from benchmarks.harness.moe_imported import config_values

        c = config_values(args)
        return (
            f"imported Qwen3-MoE decode, {args.layers} layers, hidden {c['hidden_size']}, "
            f"{c['num_experts']} experts (top {c['num_experts_per_tok']}, ffn "
            f"{c['moe_intermediate_size']}, {args.qwen3moe_expert_dtype}), "
            + (
                "every expert on the CPU"
                if args.qwen3moe_cpu_experts is None
                else f"the last {args.qwen3moe_cpu_experts} experts of each layer on the CPU"
            )
        )
    return (
        f"MoE decode, {args.layers} layers, {args.experts} experts (top 2, ffn {args.expert_ffn})"
    )


def plan_syncs(plan: CudaPlan) -> int:
    """Waits in the lowered program across the host/device boundary."""
    host = {s.stream for s in plan.steps if isinstance(s, HostStep)}
    recorded: dict[str, int] = {}
    count = 0
    for step in plan.steps:
        if isinstance(step, EventStep) and step.kind == "record":
            recorded[step.event] = step.stream
        elif isinstance(step, EventStep) and step.event in recorded:
            count += (recorded[step.event] in host) != (step.stream in host)
    return count


def schedule_syncs(plan: CudaPlan, cpu_nodes: str) -> int:
    """Host<->device synchronizations of one run in the `cpu_nodes` way, before the caller's."""
    if cpu_nodes == "calling-thread":
        return boundary_syncs(calling_thread_schedule(plan.steps))
    return plan_syncs(plan)


def sync_way_syncs(plan: CudaPlan) -> int:
    """What `split_sync_way.SyncWay` synchronizes: the staged inputs (one synchronous copy); a
    synchronization of every stream whenever CPU nodes or a host<->device copy follow GPU work;
    each synchronous copy; the end of the step; each output copied back."""
    count, dirty = 1, False
    for step in plan.steps:
        if isinstance(step, KernelStep | GemmStep) or (
            isinstance(step, CopyStep) and step.kind not in ("h2d", "d2h")
        ):
            dirty = True
        elif isinstance(step, HostStep | CopyStep):
            count += dirty + isinstance(step, CopyStep)
            dirty = False
    outputs = [n for n in dict.fromkeys(plan.outputs) if plan.types[n].nbytes]
    return count + 1 + sum(plan.locations[n].space not in HOST_SPACES for n in outputs)


def describe(source: Graph, split: Graph, plan: CudaPlan) -> dict[str, Any]:
    cpu = [n for n in split.nodes if n.ann.backend == "cpu" and not n.is_event]
    host_bytes = sum(w.type.nbytes for w in split.weights if w.placement == "host")
    return {
        "splits": count_splits(split),
        "cpu_ops": len(cpu),
        "host_weights": format_size(host_bytes),
        "ir_syncs": host_device_waits(split),
        "min_syncs": min_host_device_syncs(split),
        "plan_syncs": plan_syncs(plan),
        "calling_thread_syncs": schedule_syncs(plan, "calling-thread"),
        "sync_way_syncs": sync_way_syncs(plan),
    }


def max_rel_diff(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64), b.astype(np.float64)
    return float(np.max(np.abs(a - b)) / max(np.max(np.abs(b)), 1e-30))
