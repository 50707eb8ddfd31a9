"""The arena plan: an offset for every buffer, sharing bytes only where happens-before allows.

What `plan-memory` annotates and what the memory bounds and the report re-plan. Two buffers may
share bytes only if every access to one happens-before the first write of the other, read from
the `visible` points of `optgraph.analysis.lifetimes`: A is free for a producer p on stream s iff
`visible_A[s] != -1 and visible_A[s] <= p` ("entirely before", a partial order). Buffers chained
in place form one slot (`build_slots`); `arena_packing` places the slots in several orders and
`plan` keeps the smallest arena (the first order whose arena meets the slots' lower bound ends the
search: no later one is smaller). `check_plan` re-derives everything from a planned graph and
reports each overlapping pair that is neither ordered nor a legal in-place reuse.

    buffers %a [0, 1] and %b [1, 2], %b = neg(%a) elementwise:  one slot, %a@0 and %b@0 (in place)

Several devices: each device has its own arena, and a buffer that lives on several devices (a
replicated value) gets one offset valid in each of them. The slots are planned jointly: a slot's
`ends` are per lane (device, stream), 0 on the lanes of devices it does not live on, so two slots
conflict only if they share a device and the later one starts before the earlier is free on one
of its lanes there. `MemoryPlan.device_arena_bytes` gives each device's arena (its buffers' top).

Complexity: O(n·k·log n + P) to find the P conflicting pairs (k lanes), then O(P log P) per
ordering; `check_plan` O(n log n + overlapping pairs).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace

from optgraph.analysis.arena_packing import NEVER, Slot, arena_top, placements
from optgraph.analysis.happens_before import HappensBefore, happens_before, schedule_memo
from optgraph.analysis.lifetimes import Lifetime, compute_lifetimes, stream_ids
from optgraph.ir.graph import EVENT_OPS, Graph, TensorType
from optgraph.ir.layout import alias_roots
from optgraph.ir.ops import get_op

ALGOS: tuple[str, ...] = ("best", "size", "lifetime", "issue", "none")


@dataclass
class MemoryPlan:
    offsets: dict[str, int]  # buffer (root) name -> byte offset
    sizes: dict[str, int]  # buffer name -> bytes reserved (aligned)
    arena_bytes: int
    algo: str  # the ordering that produced it
    # every ordering tried -> its arena (up to the first that meets `lower_bound`)
    arenas: dict[str, int] = field(default_factory=dict)
    inplace: dict[str, str] = field(default_factory=dict)  # result -> operand buffer it reuses
    device_arena_bytes: dict[int, int] = field(default_factory=dict)  # device -> its arena


def _end(visible: int) -> int:
    return NEVER if visible < 0 else visible


def inplace_source(
    graph: Graph,
    index: int,
    lifetimes: dict[str, Lifetime],
    roots: dict[str, tuple[str, int]],
    types: dict[str, TensorType],
    hb: HappensBefore,
) -> str | None:
    """The buffer node `index` may overwrite with its result, if any."""
    node = graph.nodes[index]
    op = get_op(node.op)
    if op is None or op.inplace_operand is None or node.type is None:
        return None
    if op.category == "elementwise":
        candidates = range(len(node.operands))
    elif node.op == "kv_cache_write":
        candidates = range(op.inplace_operand, op.inplace_operand + 1)
    else:
        return None
    for k in candidates:
        operand = node.operands[k]
        root, offset = roots.get(operand, (operand, 0))
        lt = lifetimes.get(root)
        if lt is None or lt.is_output or offset != 0 or types[operand] != node.type:
            continue
        if lt.nbytes != node.type.nbytes:
            continue
        others = [o for o in node.operands if o != operand and roots.get(o, (o, 0))[0] == root]
        if others:
            continue
        mine = hb.instances_of(index)
        if any(
            _not_free_before(hb, [a for a in lt.accesses if a not in mine], index, node.stream, d)
            for d in node.devices
        ):
            continue
        return root
    return None


def _not_free_before(
    hb: HappensBefore, accesses: list[int], index: int, stream: int, d: int
) -> bool:
    """Whether some access on device d does not happen-before node `index` on (d, stream)."""
    on_device = [a for a in accesses if hb.device_of[a] == d]
    return bool(on_device) and hb.first_node_after(on_device, stream, d) not in range(index + 1)


def _slot_ends(lt: Lifetime, streams: int) -> list[int]:
    """Per lane: from where the buffer is free; 0 (always) on devices it does not live on."""
    return [_end(v) if lane // streams in lt.devices else 0 for lane, v in enumerate(lt.visible)]


def build_slots(
    graph: Graph,
    lifetimes: dict[str, Lifetime],
    alignment: int,
    hb: HappensBefore,
    inplace: bool,
) -> tuple[list[Slot], dict[str, str]]:
    """Group buffers into slots (in-place chains), in issue order of their first producer."""
    roots = alias_roots(graph)
    types = graph.value_types()
    streams = len(stream_ids(graph))
    one_device = graph.device_count() == 1  # then a slot's ends are its visible points
    may_reuse: dict[str, bool] = {}  # op name -> whether `inplace_source` may find a source
    slot_of: dict[str, int] = {}
    slots: list[Slot] = []
    reuse: dict[str, str] = {}
    nodes = graph.nodes
    ordered = list(lifetimes.values())  # in issue order when made by `compute_lifetimes`
    if any(a.producer > b.producer for a, b in itertools.pairwise(ordered)):
        ordered.sort(key=lambda lt: lt.producer)
    for lt in ordered:
        node = nodes[lt.producer]
        source = None
        if inplace:
            can = may_reuse.get(node.op)
            if can is None:
                op = get_op(node.op)
                can = may_reuse[node.op] = op is not None and op.inplace_operand is not None
            if can:
                source = inplace_source(graph, lt.producer, lifetimes, roots, types, hb)
        if one_device:
            ends = [NEVER if v < 0 else v for v in lt.visible]
        else:
            ends = _slot_ends(lt, streams)
        if source is not None:
            slot = slots[slot_of[source]]
            slot.members.append(lt.name)
            slot.last = max(slot.last, lt.last)
            slot.ends = [max(e, v) for e, v in zip(slot.ends, ends)]
            slot.devices = tuple(sorted(set(slot.devices) | set(lt.devices)))
            slot_of[lt.name] = slot_of[source]
            reuse[lt.name] = source
            continue
        slot_of[lt.name] = len(slots)
        devices = node.ann.devices
        stream = node.ann.stream or 0
        slots.append(
            Slot(
                members=[lt.name],
                size=-(-lt.nbytes // alignment) * alignment,
                start=lt.producer,
                stream=devices[0] * streams + stream,
                last=lt.last,
                ends=ends,
                lanes=tuple(d * streams + stream for d in devices),
                devices=devices,
            )
        )
    return slots, reuse


def plan(
    graph: Graph,
    algo: str = "best",
    alignment: int = 256,
    inplace: bool = True,
    lifetimes: dict[str, Lifetime] | None = None,
    hb: HappensBefore | None = None,
    explicit_limit: int = 2_000_000,
) -> MemoryPlan:
    """Plan the arena. `lifetimes` may be given (tests shorten them to prove they matter).
    Planned once per schedule, options and lifetimes (`schedule_memo`: the report plans the
    one-stream order again, which for a graph on one stream is plan-memory's); each caller gets
    a plan of its own."""
    hb = hb or happens_before(graph)
    lifetimes = compute_lifetimes(graph, hb) if lifetimes is None else lifetimes
    memo = schedule_memo(graph, hb)
    key = ("plan", algo, alignment, inplace, explicit_limit)
    found = memo.get(key) if memo is not None else None
    if isinstance(found, tuple) and found[0] == lifetimes:
        return _copy_plan(found[1])
    memory = _plan(graph, algo, alignment, inplace, lifetimes, hb, explicit_limit)
    if memo is not None:
        memo[key] = (dict(lifetimes), _copy_plan(memory))
    return memory


def _copy_plan(memory: MemoryPlan) -> MemoryPlan:
    return replace(
        memory,
        offsets=dict(memory.offsets),
        sizes=dict(memory.sizes),
        arenas=dict(memory.arenas),
        inplace=dict(memory.inplace),
        device_arena_bytes=dict(memory.device_arena_bytes),
    )


def _plan(
    graph: Graph,
    algo: str,
    alignment: int,
    inplace: bool,
    lifetimes: dict[str, Lifetime],
    hb: HappensBefore,
    explicit_limit: int,
) -> MemoryPlan:
    slots, reuse = build_slots(graph, lifetimes, alignment, hb, inplace and algo != "none")
    if algo == "none":
        offsets, cursor = [], 0
        for s in slots:
            offsets.append(cursor)
            cursor += s.size
        arenas = {"none": cursor}
        chosen = "none"
    else:
        names = list(ALGOS[1:4]) if algo == "best" else [algo]
        results = placements(slots, names, explicit_limit, stop_at_bound=True)
        arenas = {name: arena_top(slots, offs) for name, offs in results.items()}
        chosen = min(arenas, key=lambda name: (arenas[name], list(results).index(name)))
        offsets = results[chosen]
    out_offsets: dict[str, int] = {}
    out_sizes: dict[str, int] = {}
    device_arena: dict[int, int] = dict.fromkeys(range(graph.device_count()), 0)
    for slot, offset in zip(slots, offsets):
        for name in slot.members:
            out_offsets[name] = offset
            out_sizes[name] = slot.size
        for d in slot.devices:
            device_arena[d] = max(device_arena[d], offset + slot.size)
    return MemoryPlan(out_offsets, out_sizes, arenas[chosen], chosen, arenas, reuse, device_arena)


def entirely_before(a: Lifetime, b: Lifetime, graph: Graph) -> bool:
    """Every access to `a` happens-before `b`'s first write on each device both live on (read
    off a's visible points)."""
    node = graph.nodes[b.producer]
    streams = len(stream_ids(graph))
    lanes = [d * streams + node.stream for d in node.devices if d in a.devices]
    return all(lane < len(a.visible) and 0 <= a.visible[lane] <= b.producer for lane in lanes)


def check_plan(graph: Graph) -> list[str]:
    """Problems of the memory plan annotated on `graph`; [] when it is sound.

    Recomputes lifetimes from the graph (never trusting `live`/`visible`) and checks every pair of
    buffers whose bytes overlap: one must be entirely before the other, or the later one must be a
    legal in-place reuse of the earlier at the same offset. O(n log n + overlapping pairs).
    """
    hb = happens_before(graph)
    lifetimes = compute_lifetimes(graph, hb)
    roots = alias_roots(graph)
    types = graph.value_types()
    problems: list[str] = []
    placed: list[tuple[int, int, Lifetime]] = []
    for lt in lifetimes.values():
        ann = graph.nodes[lt.producer].ann
        if ann.offset is None or ann.size is None:
            problems.append(f"'%{lt.name}' has no offset/size")
        elif ann.offset < 0 or ann.size < lt.nbytes:
            problems.append(
                f"'%{lt.name}' reserves {ann.size} bytes at {ann.offset}, needs {lt.nbytes}"
            )
        elif lt.nbytes:
            placed.append((ann.offset, ann.offset + lt.nbytes, lt))
    placed.sort(key=lambda t: t[0])
    active: list[tuple[int, int, Lifetime]] = []
    for lo, hi, b in placed:
        active = [t for t in active if t[1] > lo]
        for _, _, a in active:
            if not set(a.devices) & set(b.devices):
                continue  # different arenas
            first, second = (a, b) if a.producer < b.producer else (b, a)
            if entirely_before(first, second, graph):
                continue
            source = inplace_source(graph, second.producer, lifetimes, roots, types, hb)
            offsets = (
                graph.nodes[first.producer].ann.offset,
                graph.nodes[second.producer].ann.offset,
            )
            if source == first.name and offsets[0] == offsets[1]:
                continue
            problems.append(
                f"'%{second.name}' (written at node {second.producer}) shares bytes with "
                f"'%{first.name}' (live {first.first}..{first.last}) before every access to it "
                "happens-before that write"
            )
        active.append((lo, hi, b))
    return problems


def apply_plan(
    graph: Graph, memory: MemoryPlan, lifetimes: dict[str, Lifetime] | None = None
) -> Graph:
    """Annotate `offset`/`size` on every buffer's producer; clear them on everything else. With
    `lifetimes`, also what `annotate_lifetimes` annotates, in the same walk (one new node per
    buffer, not two)."""
    offsets, sizes = memory.offsets, memory.sizes
    wanted = {lt.producer: lt for lt in lifetimes.values()} if lifetimes is not None else None
    nodes = list(graph.nodes)
    for i, node in enumerate(nodes):
        ann = node.ann
        changes: dict[str, object] = {}
        if node.name in offsets and node.op not in EVENT_OPS:
            offset, size = offsets[node.name], sizes[node.name]
            if ann.offset != offset or ann.size != size:
                changes = {"offset": offset, "size": size}
        elif ann.offset is not None or ann.size is not None:
            changes = {"offset": None, "size": None}
        if wanted is not None:
            lt = wanted.get(i)
            if lt is None:
                if ann.live is not None or ann.visible:
                    changes |= {"live": None, "visible": None}
            elif ann.live != (lt.first, lt.last) or ann.visible != lt.visible:
                changes |= {"live": (lt.first, lt.last), "visible": lt.visible}
        if changes:
            nodes[i] = node.with_ann(**changes)  # type: ignore[arg-type]
    return graph.with_nodes(nodes)
