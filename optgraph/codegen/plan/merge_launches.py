"""Merge consecutive independent kernel launches of a stream into one launch (lowering time).

A launch-bound decode pays a few microseconds per dependent launch even inside a CUDA graph with
Programmatic Dependent Launch, and many consecutive kernels of a stream do not depend on each other:
the q, k and v one-row products of a layer, rope(q), rope(k) and the v cache write. Merged, they are
one kernel whose blocks are partitioned among the members (`merged_kernel`): one launch instead of
three, and their blocks run side by side instead of one grid after another.

    kernel %l0.q og_gemv_7edf grid=(32, 1, 1) block=(256, 1, 1) args=arena+67584,... stream 0
    kernel %l0.k og_gemv_8ecd grid=(8, 1, 1) block=(256, 1, 1) args=arena+0,... stream 0
    kernel %l0.v og_gemv_8ecd grid=(8, 1, 1) block=(256, 1, 1) args=arena+32768,... stream 0
->  kernel %l0.q+%l0.k+%l0.v og_merged_3f1c grid=(48, 1, 1) block=(256, 1, 1) args=... stream 0

Which launches merge (greedily, in issue order: a launch joins the open group of its stream or
closes it and opens a new one):

- consecutive `KernelStep`s of one stream: any other step of that stream between them (an event,
  cuBLAS, a copy, a host function) closes the group; steps of other streams may interleave, and
  the merged launch takes the place of the group's first member in the issue list;
- of distinct nodes (a node's second kernel reads what its first wrote);
- mutually independent: no member reads a value that depends on an earlier member, through
  aliasing views, nodes that issued nothing, or nodes issued on other streams since the group
  opened (a value of another stream could only be read after a `wait`, which closes the group
  anyway; the rule keeps merging safe in graphs that are not synchronized);
- no member's written bytes overlap another member's read or written bytes, by planned location
  (`Extent`: space, key, offset, size, recorded by `lower_cuda`). Necessary beyond data
  dependences: the memory planner may give member B's result the bytes of a value member A
  reads, because A happened-before B on the stream; merged, they would run concurrently;
- equal block dims (a member's `__syncthreads` must be reached by its whole block), no dynamic
  shared memory, static shared memory known and at most 48 KB summed over the distinct member
  kernels (bigger kernels, attention's, simply stay alone), at most `MAX_MEMBERS` members, and a
  kernel with a `__device__` workspace at most once (a workspace and its counters are one
  launch's).

Complexity: O(N · (M·E + S)) for N steps, groups of at most M = `MAX_MEMBERS` members with E
extents each, and S streams (the dependence sets of the open groups, one per stream, are
updated per node): linear in the plan for the fixed M.

Does not handle: members with different block dims (no padding of blocks), dynamic shared memory,
reordering launches to make more of them consecutive, or a memory plan that knows which launches
will merge (the planner's reuse of bytes between would-be members blocks some merges).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

from optgraph.codegen.cuda_source import Kernel
from optgraph.codegen.plan.merged_kernel import is_mergeable, merged_kernel
from optgraph.codegen.plan.steps import Extent, KernelStep, LaunchMerge, Step
from optgraph.ir.graph import Graph, Node

MAX_MEMBERS = 8
SHARED_LIMIT = 48 * 1024  # static shared memory of one kernel, in bytes
MAX_BLOCKS = 2**31 - 1  # gridDim.x


@dataclass
class Group:
    """The open group of one stream: its members and what depends on them."""

    slot: int  # where the merged launch goes in the issue list (the first member's place)
    members: list[KernelStep] = field(default_factory=list)
    kernels: list[Kernel] = field(default_factory=list)
    nodes: set[str] = field(default_factory=set)
    tainted: set[str] = field(default_factory=set)  # values that may depend on a member

    def add(self, step: KernelStep, kernel: Kernel) -> None:
        self.members.append(step)
        self.kernels.append(kernel)
        self.nodes.add(step.node)
        self.tainted.add(step.node)


def is_candidate(step: Step, kernel: Kernel | None) -> bool:
    """Whether `step` may be a member of a merged launch at all."""
    return (
        isinstance(step, KernelStep)
        and kernel is not None
        and not step.nodes
        and step.shared_mem == 0
        and step.reads is not None
        and step.writes is not None
        and is_mergeable(kernel)
        and kernel.shared_bytes is not None
        and kernel.shared_bytes <= SHARED_LIMIT
    )


def _overlaps(mine: Sequence[Extent], theirs: Sequence[Extent]) -> bool:
    return any(a.overlaps(b) for a in mine for b in theirs)


def conflict(group: Group, step: KernelStep, kernel: Kernel, node: Node) -> str | None:
    """Why candidate `step` (of `node`) cannot join `group`, or None when it can."""
    first = group.members[0]
    if len(group.members) >= MAX_MEMBERS:
        return "the group is full"
    if step.block != first.block:
        return "block dims differ"
    if node.name in group.nodes:
        return "a member is the same node"
    if any(o in group.tainted for o in node.operands):
        return "it reads a value that depends on a member"
    names = {k.name for k in group.kernels}
    if kernel.decls and kernel.name in names:
        return "it shares a member's __device__ workspace"
    shared = {k.name: k.shared_bytes or 0 for k in (*group.kernels, kernel)}
    if sum(shared.values()) > SHARED_LIMIT:
        return "too much static shared memory"
    blocks = sum(m.grid[0] * m.grid[1] * m.grid[2] for m in (*group.members, step))
    if blocks > MAX_BLOCKS:
        return "too many blocks"
    assert step.reads is not None and step.writes is not None
    for m in group.members:
        assert m.reads is not None and m.writes is not None
        if _overlaps(step.writes, m.reads + m.writes) or _overlaps(step.reads, m.writes):
            return f"its planned bytes overlap those of %{m.node}"
    return None


def merged_step(group: Group) -> tuple[KernelStep, Kernel | None]:
    """One launch of `group`'s members and its kernel (a single member: itself, and None)."""
    if len(group.members) == 1:
        return group.members[0], None
    kernel = merged_kernel([(k, m.grid) for k, m in zip(group.kernels, group.members)])
    blocks = sum(m.grid[0] * m.grid[1] * m.grid[2] for m in group.members)
    step = replace(
        group.members[0],
        kernel=kernel.name,
        grid=(blocks, 1, 1),
        args=tuple(a for m in group.members for a in m.args),
        reads=tuple(e for m in group.members for e in m.reads or ()),
        writes=tuple(e for m in group.members for e in m.writes or ()),
        nodes=tuple(m.node for m in group.members),
    )
    return step, kernel


def launch_merge(group: Group, kernel: Kernel) -> LaunchMerge:
    """The record of `group` merged into `kernel` (what the lowered plan text prints)."""
    return LaunchMerge(
        kernel.name,
        group.members[0].stream,
        tuple(m.node for m in group.members),
        tuple(k.name for k in group.kernels),
        tuple(m.grid for m in group.members),
    )


def merge_kernel_steps(
    graph: Graph, steps: Sequence[Step], origins: Sequence[int], kernels: Mapping[str, Kernel]
) -> tuple[list[Step], dict[str, Kernel], tuple[LaunchMerge, ...]]:
    """`steps` with every mergeable run of launches as one launch, the kernels the new steps
    launch (merged kernels added, kernels no longer launched alone dropped) and a record of each
    merged launch, in issue order. `origins[i]` is the index in `graph.nodes` of the node that
    issued `steps[i]` (ascending)."""
    out: list[Step | None] = []
    open_groups: dict[int, Group] = {}
    merged: dict[str, Kernel] = {}
    records: dict[int, LaunchMerge] = {}  # by the merged launch's slot

    def close(stream: int) -> None:
        group = open_groups.pop(stream, None)
        if group is not None:
            step, kernel = merged_step(group)
            if kernel is not None:
                merged[kernel.name] = kernel
                records[group.slot] = launch_merge(group, kernel)
            out[group.slot] = step

    by_node: dict[int, list[Step]] = {}
    for step, origin in zip(steps, origins, strict=True):
        by_node.setdefault(origin, []).append(step)
    for index, node in enumerate(graph.nodes):
        issued = by_node.get(index, [])
        streams = {s.stream for s in issued}
        for stream, group in open_groups.items():
            # A value depends on a member when an operand does; a node issued on another stream
            # since the group opened counts too (the merged launch is issued before it). Events
            # are steps, not values (an event on the group's stream closes it below).
            if node.is_event:
                continue
            if (stream not in streams and issued) or any(o in group.tainted for o in node.operands):
                group.tainted.add(node.name)
        for step in issued:
            kernel = kernels.get(step.kernel) if isinstance(step, KernelStep) else None
            if not isinstance(step, KernelStep) or kernel is None or not is_candidate(step, kernel):
                close(step.stream)
                out.append(step)
                continue
            current = open_groups.get(step.stream)
            if current is not None and conflict(current, step, kernel, node) is None:
                current.add(step, kernel)
                continue
            close(step.stream)
            fresh = open_groups[step.stream] = Group(len(out))
            fresh.add(step, kernel)
            out.append(None)
    for stream in list(open_groups):
        close(stream)
    result = [s for s in out if s is not None]
    launched = {s.kernel for s in result if isinstance(s, KernelStep)}
    table = {**kernels, **merged}
    kept = {name: table[name] for name in table if name in launched}
    return result, kept, tuple(records[slot] for slot in sorted(records))
