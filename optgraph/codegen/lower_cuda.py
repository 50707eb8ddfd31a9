"""Lower a scheduled graph to the CUDA runtime's launch list: where every value lives, what to issue.

`lower_for_cuda(graph, options)` is what `optgraph.compile` runs: the `LoweredProgram` the CUDA
runtime runs (`codegen/plan/lowered.py`), made of `lower_cuda` plans. `lower_cuda(graph)` walks
`graph.nodes` in issue order (the host launch order) and returns a
`CudaPlan`:

- `locations`: for every value, a `Location(space, key, offset)` of its first byte. Spaces are
  `arena` (node results at their planned `offset`), `weights` (one buffer, each weight at a
  256-byte aligned offset in declaration order), `input` (one buffer per input, key = its name, so
  the runtime can bind a caller's device array by pointer) and, for graphs without a memory plan,
  `value` (one buffer per node result: the *unplanned fallback*). Aliasing views
  (`ir.layout.alias_roots`) point into their root's bytes and issue nothing.
- `steps`: `KernelStep`, `GemmStep`, `CopyStep` (memcpy) and `EventStep` (record / wait),
  each on the node's stream. A planned `kv_cache_write` whose result has its cache's bytes takes
  the in-place kernel.
- split and streamed programs (split-backends, plan-prefetch): values that live on the host (CPU
  results, copies `{to = "cpu"}`) are in the `host_arena` space, a pinned mirror of the arena at
  the same offsets; weights the device does not keep (streamed, `host`-placed, CPU-read) are in
  `host_weights` (pinned); a CPU node is a `HostStep` (a host function on its stream), and a
  `CopyStep`'s `kind` ("h2d", "d2h", "d2d", "h2h") follows from its two spaces.

    %h = matmul(%x, %w) !{stream = 0, offset = 0}     -> GemmStep(stream 0, a=weights+0, b=input x, c=arena+0)
    record ^e0 !{stream = 0}                           -> EventStep("record", "e0", 0)

The decode rewrites (`codegen/decode/`) decide here; the plan keeps what they took as records
(`plan.rewrites`, `decode/taken.py`) and each merged launch's members (`plan.merges`), so that
`lowered_plan_text` can print them (`lowered_plan.txt`). `plan_text` spells a plan as text and
as JSON; `plan.source()` is its CUDA source (the `kernels.cu` of `optgraph compile -o`).
Complexity: O(V) plus the kernel text.
"""

from __future__ import annotations

from collections.abc import Mapping

from optgraph.analysis.prefetch_copies import synchronous_prefetch
from optgraph.analysis.segments import (
    device_resident_weights,
    host_read_weights,
    host_values,
    host_weight_layout,
)
from optgraph.codegen.cuda_dispatch import node_code
from optgraph.codegen.cuda_source import CodegenError, DeviceCopy, Kernel, Launch
from optgraph.codegen.decode import gathered_rows
from optgraph.codegen.decode.argmax_folds import argmax_folds, argmax_step
from optgraph.codegen.decode.early_cache_reads import early_attention_step, early_cache_reads
from optgraph.codegen.decode.qkv_folds import fold_step, place_folds, rope_read_products
from optgraph.codegen.decode.rope_cache_writes import rope_cache_step, rope_cache_writes
from optgraph.codegen.decode.taken import rewrites_taken
from optgraph.codegen.kernels.matmul import Gemm
from optgraph.codegen.kernels.one_row.kernel_cache import remembered
from optgraph.codegen.kernels.one_row.l2_ahead import l2_ahead_products
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.codegen.plan.collective_steps import COLLECTIVE_OPS, collective_step, first_device
from optgraph.codegen.plan.cpu_node_schedule import cpu_schedule
from optgraph.codegen.plan.in_place_outputs import check_in_place, in_place_candidates
from optgraph.codegen.plan.lowered import LoweredProgram, LoweredVariant
from optgraph.codegen.plan.merge_launches import merge_kernel_steps
from optgraph.codegen.plan.scratch_space import place_scratch
from optgraph.codegen.plan.sibling_splits import sibling_splits
from optgraph.codegen.plan.steps import (
    HOST_SPACES,
    CollectiveStep,
    CopyStep,
    CudaPlan,
    DecodeRewrite,
    EventStep,
    Extent,
    GemmStep,
    HostStep,
    KernelStep,
    LaunchMerge,
    Location,
    Step,
)
from optgraph.ir.graph import Graph, Node, TensorType
from optgraph.ir.layout import alias_roots

WEIGHT_ALIGNMENT = 256

__all__ = [
    "HOST_SPACES",
    "CollectiveStep",
    "CopyStep",
    "CudaPlan",
    "EventStep",
    "Extent",
    "GemmStep",
    "HostStep",
    "KernelStep",
    "Location",
    "Step",
    "lower_cuda",
    "lower_for_cuda",
    "lower_variant",
    "storage",
]


def _align(nbytes: int, alignment: int = WEIGHT_ALIGNMENT) -> int:
    return -(-nbytes // alignment) * alignment


def _is_planned(graph: Graph) -> bool:
    return any(n.ann.offset is not None for n in graph.nodes)


def storage(graph: Graph) -> tuple[dict[str, Location], dict[str, int], dict[str, int], int, int]:
    """(locations, weight offsets, unplanned value sizes, arena bytes, weight bytes)."""
    types = graph.value_types()
    roots = alias_roots(graph)
    planned = _is_planned(graph)
    locations: dict[str, Location] = {i.name: Location("input", i.name, 0) for i in graph.inputs}
    weight_offsets: dict[str, int] = {}
    on_host = host_values(graph)
    off_device = host_read_weights(graph) - device_resident_weights(graph)
    host_offsets, _ = host_weight_layout(graph)
    cursor = 0
    for w in graph.weights:
        if w.name in off_device:
            locations[w.name] = Location("host_weights", "", host_offsets[w.name])
            continue
        weight_offsets[w.name] = cursor
        locations[w.name] = Location("weights", "", cursor)
        cursor += _align(w.type.nbytes)
    arena = 0
    value_bytes: dict[str, int] = {}
    for node in graph.nodes:
        if node.is_event or node.name in roots:
            continue
        assert node.type is not None
        if planned:
            if node.ann.offset is None:
                raise CodegenError(
                    f"{node.op}: '%{node.name}' has no arena offset but the graph is memory-planned"
                    " (run plan-memory again after changing the graph)",
                    node.span,
                )
            space = "host_arena" if node.name in on_host else "arena"
            locations[node.name] = Location(space, "", node.ann.offset)
            size = node.ann.size if node.ann.size is not None else node.type.nbytes
            arena = max(arena, node.ann.offset + size)
        else:
            locations[node.name] = Location("value", node.name, 0)
            value_bytes[node.name] = max(node.type.nbytes, 1)
    for name, (root, offset) in roots.items():
        locations[name] = locations[root].shifted(offset)
    del types
    return locations, weight_offsets, value_bytes, arena, cursor


def _step_for(
    node: Node,
    work: object,
    roles: Mapping[str, Location],
    types: Mapping[str, TensorType],
) -> Step:
    stream = node.stream
    if isinstance(work, Launch):
        args = tuple(roles[r] for r in work.args)
        # Every role a kernel takes is the node's result or an operand, read or written whole:
        # the node writes its result (a kv_cache_write in place: its cache, the same bytes).
        assert node.type is not None
        reads = tuple(
            Extent.of(roles[f"in{k}"], types[o].nbytes) for k, o in enumerate(node.operands)
        )
        writes = (Extent.of(roles["out"], node.type.nbytes),)
        if "scratch" in work.args:  # it writes its scratch, not the result: never merged
            return KernelStep(
                node.name, stream, work.kernel.name, work.grid, work.block, work.shared_mem, args
            )
        return KernelStep(
            node.name, stream, work.kernel.name, work.grid, work.block, work.shared_mem, args,
            reads, writes,
        )  # fmt: skip
    if isinstance(work, Gemm):
        return GemmStep(
            node.name,
            stream,
            work,
            roles[work.a].shifted(work.a_offset),
            roles[work.b].shifted(work.b_offset),
            roles[work.c].shifted(work.c_offset),
        )
    assert isinstance(work, DeviceCopy)
    dst, src = roles[work.dst], roles[work.src]
    kind = (
        ("h" if src.space in HOST_SPACES else "d")
        + "2"
        + ("h" if dst.space in HOST_SPACES else "d")
    )
    return CopyStep(
        node.name,
        stream,
        dst.shifted(work.dst_offset),
        src.shifted(work.src_offset),
        work.nbytes,
        kind,
    )


def lower_cuda(
    graph: Graph, merge_launches: bool = True, in_place: Mapping[str, str] | None = None
) -> CudaPlan:
    """The launch list and storage of `graph` (any graph: streams, events and offsets optional).

    `merge_launches`: consecutive independent kernels of a stream become one launch
    (`codegen/plan/merge_launches.py`); False keeps one launch per kernel. `in_place`: {output:
    input} pairs (`codegen/plan/in_place_outputs.py`) whose output is computed in the input's buffer
    (a KV cache the caller updates where it keeps it). The one-row products' kernels are
    generated once per structure meanwhile (`codegen/kernels/one_row/kernel_cache.py`)."""
    with remembered():
        return _lowered(graph, merge_launches, in_place)


def _lowered(graph: Graph, merge_launches: bool, in_place: Mapping[str, str] | None) -> CudaPlan:
    """`lower_cuda`'s work (see there)."""
    locations, weight_offsets, value_bytes, arena, weight_bytes = storage(graph)
    types = graph.value_types()
    roots = alias_roots(graph)
    if in_place:
        try:
            check_in_place(graph, dict(in_place))
        except ValueError as err:
            raise CodegenError(str(err)) from None
        for output, source in in_place.items():
            locations[output] = locations[source]
        for name, (root, offset) in roots.items():
            if root in in_place:
                locations[name] = locations[root].shifted(offset)
    scratch, arena = place_scratch(graph, arena, value_bytes)
    # products sharing a launch (q/k/v): split counts for one wave, folded or not
    siblings = sibling_splits(graph, roots, types, weight_offsets) if merge_launches else {}
    folds, absorbed = place_folds(graph, locations, in_place or {}, siblings)  # q/k/v products
    folded = rope_cache_writes(graph, in_place or {})  # a key's rope and its cache write
    folded = {r: w for r, w in folded.items() if r not in absorbed}
    argmaxes = argmax_folds(graph, locations, frozenset([*folds, *folded, *absorbed]))
    absorbed |= {name for fold in argmaxes.values() for name in fold.absorbed}
    folded_writes = {w.name for w in folded.values()} | absorbed
    early_reads = early_cache_reads(graph, in_place or {}, types)  # before the PDL wait
    ahead = l2_ahead_products(graph, roots, types)  # weights into L2 during an attention
    rope_read = rope_read_products(graph)  # the layout of a rope fold, folded or not
    steps: list[Step] = []
    origins: list[int] = []  # the index in graph.nodes of each step's node
    kernels: dict[str, Kernel] = {}
    events: list[str] = []
    # A CPU view (an alias of its operand) or event owns no buffer: plan-memory gives no offset.
    if not _is_planned(graph) and any(
        n.ann.backend == "cpu" and not n.is_event and n.name not in roots for n in graph.nodes
    ):
        raise CodegenError("a graph with CPU nodes needs a memory plan (run plan-memory first)")
    for index, node in enumerate(graph.nodes):
        origins.extend([index - 1] * (len(steps) - len(origins)))  # the previous node's
        if node.is_event:
            steps.append(EventStep(node.op, node.name, node.stream))
            if node.name not in events:
                events.append(node.name)
            continue
        if node.op in COLLECTIVE_OPS:  # a rank graph's collective (codegen/rank_programs.py)
            roles = {"out": locations[node.name]}
            roles.update((f"in{k}", locations[o]) for k, o in enumerate(node.operands))
            steps.append(collective_step(node, first_device(node), roles, types))
            continue
        if node.name in roots:
            continue  # an aliasing view (a send's result too): its bytes are its root's
        if node.ann.backend == "cpu":
            steps.append(HostStep(node.name, node.stream, index))
            continue
        if node.name in folded_writes:
            continue  # done by another node's kernel (rope_cache_writes.py, qkv_folds.py)
        if node.name in argmaxes:  # an argmax and its cast in fewer kernels (argmax_folds.py)
            step, kernel = argmax_step(argmaxes[node.name], locations, types)
            kernels[kernel.name] = kernel
            steps.append(step)
            continue
        if node.name in folded or node.name in folds:
            if node.name in folds:
                step, kernel = fold_step(folds[node.name], locations, types)
            else:
                step, kernel = rope_cache_step(node, folded[node.name], locations, types)
            kernels[kernel.name] = kernel
            steps.append(step)
            continue
        if node.name in early_reads:
            step, launch = early_attention_step(node, early_reads[node.name], locations, types)
            kernels[launch.kernel.name] = launch.kernel
            steps.append(step)
            continue
        operand_types = [types[o] for o in node.operands]
        roles = {"out": locations[node.name]}
        roles.update((f"in{k}", locations[o]) for k, o in enumerate(node.operands))
        if node.name in scratch:
            roles["scratch"] = scratch[node.name]
        overwrites = bool(node.operands) and roles["out"] == roles["in0"]
        resident = frozenset(k for k, o in enumerate(node.operands) if o in weight_offsets)
        work_list = node_code(
            node,
            operand_types,
            in_place=overwrites,
            resident=resident,
            l2_ahead=node.name in ahead,
            most_splits=siblings.get(node.name),
            rope_pairs=node.name in rope_read,
        )
        for work in work_list:
            if isinstance(work, Launch):
                kernels[work.kernel.name] = work.kernel
            if isinstance(work, DeviceCopy) and roles[work.dst] == roles[work.src]:
                continue  # a copy onto itself (an in-place plan): nothing to move
            steps.append(_step_for(node, work, roles, types))
    origins.extend([len(graph.nodes) - 1] * (len(steps) - len(origins)))
    gathered: list[DecodeRewrite] = []
    if gathered_rows.GATHER_ROWS:  # a one-row get_rows read by its readers' kernels
        steps, origins, kernels, gathered = gathered_rows.gather_rows(
            graph, steps, origins, kernels, locations, in_place or {}
        )
    rewrites = rewrites_taken(graph, steps, folds, folded, argmaxes, early_reads, gathered)
    merges: tuple[LaunchMerge, ...] = ()
    if merge_launches:
        steps, kernels, merges = merge_kernel_steps(graph, steps, origins, kernels)
    streams = tuple(sorted({n.stream for n in graph.nodes} | {0}))
    return CudaPlan(
        graph.name,
        steps,
        kernels,
        locations,
        types,
        arena,
        weight_bytes,
        weight_offsets,
        value_bytes,
        streams,
        tuple(i.name for i in graph.inputs),
        graph.output_names(),
        tuple(events),
        *host_weight_layout(graph),
        max(
            (locations[n].offset + (types[n].nbytes) for n in host_values(graph) if n not in roots),
            default=0,
        ),
        rewrites,
        merges,
    )


def lower_variant(
    graph: Graph, options: LoweringOptions, in_place: Mapping[str, str] | None = None
) -> LoweredVariant:
    """`graph` lowered with `options`, each output of `in_place` placed in its input's buffer."""
    pairs = dict(in_place or {})
    plan = lower_cuda(graph, merge_launches=options.merge_launches, in_place=pairs)
    fallback = None
    if any(n.op == "prefetch" for n in graph.nodes):
        sync = synchronous_prefetch(graph)
        sync_plan = lower_cuda(sync, merge_launches=options.merge_launches, in_place=pairs)
        fallback = LoweredVariant(sync, sync_plan, pairs, None, cpu_schedule(sync_plan, options))
    return LoweredVariant(graph, plan, pairs, fallback, cpu_schedule(plan, options))


def lower_for_cuda(graph: Graph, options: LoweringOptions | None = None) -> LoweredProgram:
    """The lowered program of `graph` (any graph: streams, events and offsets optional)."""
    options = options or LoweringOptions()
    return LoweredProgram(graph, options, lower_variant(graph, options), in_place_candidates(graph))
