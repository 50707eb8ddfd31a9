"""A lowered CUDA plan as text a human reads: per stream, in issue order, what each step does.

`describe_plan` (plan_text.py) is the launch list with every pointer and kernel source, for the
CHECK fixtures; `plan_outline(plan)` is the reading copy: no source, no pointers, only what was
decided. Each step is numbered by its place in the plan's one issue order (so the streams'
lists interleave by number), then:

- a launch: the nodes it computes, its kernel, grid and block; a merged launch
  (`merge_launches`) one `merges` line per member (node, its own kernel and grid); nodes a
  decode rewrite folded into it (they issue nothing) on an `also` line;
- cuBLAS calls, copies (kind, bytes), events (`record` / `wait`), host functions, collectives;
- last, the decode rewrites taken (`CudaPlan.rewrites`), one a line: which rewrite, the node
  whose launch does the work and its kernel, the other nodes involved, what was done.

    KernelStep(l0.q+l0.k, og_merged_5b68, grid (3,1,1)), rewrites: qkv_folds q takes q_rot
    ->    1  kernel %l0.q+%l0.k og_merged_5b68 grid=(3, 1, 1) block=(256, 1, 1)
               merges %l0.q og_gemv_e7fc grid=(2, 1, 1)
               merges %l0.k og_gemv_88e0 grid=(1, 1, 1)
               also computes %l0.q_rot
          ...
          decode rewrites (1):
            qkv_folds          %l0.q in og_gemv_e7fc takes %l0.q_rot: rope in the product's ...

Every name is a node, kernel (named by a hash of its text) or event name: the text is the same
from run to run. Complexity: linear in the steps and records.
"""

from __future__ import annotations

from collections.abc import Mapping

from optgraph.codegen.plan.steps import (
    CollectiveStep,
    CopyStep,
    CudaPlan,
    DecodeRewrite,
    EventStep,
    GemmStep,
    HostStep,
    KernelStep,
    LaunchMerge,
    Step,
)

REWRITE_COLUMN = len("early_cache_reads ")  # the longest rewrite name and a space


def _names(nodes: tuple[str, ...], joiner: str = ", ") -> str:
    return joiner.join(f"%{n}" for n in nodes)


def _dims(dims: tuple[int, int, int]) -> str:
    return f"({dims[0]}, {dims[1]}, {dims[2]})"


def _kernel_lines(
    step: KernelStep,
    merges: Mapping[tuple[str, ...], LaunchMerge],
    folded: Mapping[str, tuple[str, ...]],
) -> list[str]:
    """A launch: its head line, one `merges` line per member, an `also` line for folded nodes."""
    nodes = _names(step.members, "+")
    lines = [f"kernel {nodes} {step.kernel} grid={_dims(step.grid)} block={_dims(step.block)}"]
    merge = merges.get(step.nodes) if step.nodes else None
    if merge is not None:
        for node, kernel, grid in zip(merge.nodes, merge.kernels, merge.grids, strict=True):
            lines.append(f"  merges %{node} {kernel} grid={_dims(grid)}")
    also = tuple(n for member in step.members for n in folded.get(member, ()))
    if also:
        lines.append(f"  also computes {_names(also)}")
    return lines


def _step_lines(
    step: Step,
    merges: Mapping[tuple[str, ...], LaunchMerge],
    folded: Mapping[str, tuple[str, ...]],
) -> list[str]:
    """The lines of one step, without its number."""
    if isinstance(step, KernelStep):
        return _kernel_lines(step, merges, folded)
    if isinstance(step, EventStep):
        return [f"{step.kind} ^{step.event}"]
    if isinstance(step, CopyStep):
        return [f"copy %{step.node} {step.kind} {step.nbytes} bytes"]
    if isinstance(step, GemmStep):
        g = step.gemm
        ops = "NT"[g.transa] + "NT"[g.transb]
        dtype = g.dtype + (f"->{g.c_dtype}" if g.c_dtype else "")
        shape = f"m={g.m} n={g.n} k={g.k} batch={g.batch}"
        return [f"gemm %{step.node} cuBLAS {dtype} {ops} {shape}"]
    if isinstance(step, HostStep):
        return [f"host %{step.node} (NumPy on the host)"]
    assert isinstance(step, CollectiveStep)
    group = ",".join(str(d) for d in step.group)
    return [f"{step.kind} %{step.node} {step.dtype} count={step.count} group=[{group}]"]


def rewrite_line(rewrite: DecodeRewrite) -> str:
    """One decode rewrite as a line of the outline's last section (name padded to a column):

    qkv_folds          %l0.k in og_gemv_6324 takes %l0.k_rot, %l0.k_cache_new: rope and ...
    early_cache_reads  %l0.attn in og_attention_decode_wide_beaa: loads its cache rows ...
    """
    where = f"%{rewrite.node}" + (f" in {rewrite.kernel}" if rewrite.kernel else "")
    takes = f" takes {_names(rewrite.nodes)}" if rewrite.absorbs and rewrite.nodes else ""
    return f"{rewrite.rewrite:<{REWRITE_COLUMN}} {where}{takes}: {rewrite.note}"


def _counts(plan: CudaPlan) -> str:
    """`12 steps: 12 launches (4 merged), 2 events`: the kinds of step the plan has."""
    kinds = (
        (GemmStep, "cuBLAS call", "cuBLAS calls"),
        (CopyStep, "copy", "copies"),
        (EventStep, "event", "events"),
        (HostStep, "host function", "host functions"),
        (CollectiveStep, "collective", "collectives"),
    )
    launches = plan.count(KernelStep)
    parts = [f"{launches} launch{'es' * (launches != 1)} ({len(plan.merges)} merged)"]
    for kind, one, many in kinds:
        n = plan.count(kind)
        if n:
            parts.append(f"{n} {one if n == 1 else many}")
    return f"{len(plan.steps)} steps: " + ", ".join(parts)


def _bytes(plan: CudaPlan) -> str:
    """`arena 17920 bytes, weights 361728 bytes` and the host buffers where there are any."""
    sizes = [("arena", plan.arena_bytes), ("weights", plan.weights_bytes)]
    sizes += [("host arena", plan.host_arena_bytes), ("host weights", plan.host_weights_bytes)]
    return ", ".join(f"{name} {n} bytes" for k, (name, n) in enumerate(sizes) if n or k < 2)


def plan_outline(plan: CudaPlan) -> list[str]:
    """The outline's lines (see the module docstring), without a trailing newline each."""
    merges = {m.nodes: m for m in plan.merges}
    folded: dict[str, tuple[str, ...]] = {}
    for rewrite in plan.rewrites:
        if rewrite.absorbs:
            folded[rewrite.node] = folded.get(rewrite.node, ()) + rewrite.nodes
    lines = [_counts(plan), _bytes(plan)]
    width = len(str(max(len(plan.steps) - 1, 0)))
    for stream in plan.streams:
        lines.append(f"stream {stream}:")
        for index, step in enumerate(plan.steps):
            if step.stream != stream:
                continue
            head, *rest = _step_lines(step, merges, folded)
            lines.append(f"  {index:>{width}}  {head}")
            lines.extend(f"  {'':>{width}}    {line}" for line in rest)
    lines.append(f"decode rewrites ({len(plan.rewrites)}):")
    lines.extend(f"  {rewrite_line(r)}" for r in plan.rewrites)
    return lines
