"""When a captured CUDA graph may be replayed: the key, the cache and the re-typing of a graph.

A CUDA graph bakes in its kernels (so the shapes and dtypes they were generated for) and every
pointer it touches. Everything else it reads from device memory at replay: input data, `pos` and
`kv_len` values, weights. So a captured graph is valid for a run exactly when

1. the run's inputs have the same dtypes and shapes (`GraphKey.inputs`): otherwise the program is
   specialized again for the new types and a new graph is captured;
2. the same inputs and outputs are bound by the caller's device pointer rather than staged through
   the program's own buffers (`GraphKey.bound_inputs`, `bound_outputs`): otherwise the graph has a
   different set of copy nodes, a different topology, and is captured anew;
3. the bound pointers are the same (`Binding`): if only they differ, the topology is unchanged and
   the instantiated graph is *updated* in place (`cudaGraphExecUpdate`) instead of re-instantiated.
   A bound step's pointers are part of its key instead (`GraphKey.pinned`): several bound steps
   of one program each keep their own graph.

`GraphCache.decide(key, binding)` returns REPLAY, UPDATE or CAPTURE accordingly; it holds at most
`capacity` graphs and evicts the least recently used one (handing it to `on_evict` to destroy).

Specialization for new input shapes. `retype_graph(graph, input_types)` re-infers every node type
for new input types, dropping plan annotations that are no longer valid; when a node cannot take
them (a `reshape` with a static `shape` attribute, say) it raises an `InputError` naming each
changed input with its old and new type (`shape_change`). The runtime never re-types or lowers
itself: it asks the API layer's `Relower` callback (`optgraph.api.programs`) for the new variant, which
runs the re-typed graph unplanned (`cuda_program` without a `specialize` hook) or re-runs the
program's pipeline on the re-typed source graph, so every shape gets a memory plan
(`CompiledProgram.specialize`). Either way every specialization shares the program's one weights
buffer, so `moved_weights` must find nothing in the two plans: a pipeline that placed the weights
differently for the new shapes (streamed or host-placed ones, say) is refused.

This module imports no CuPy, so all of it is tested on machines without a GPU.
"""

from __future__ import annotations

import enum
import re
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from optgraph.codegen.plan.steps import CudaPlan
from optgraph.errors import InputError, OptGraphError
from optgraph.ir.graph import Graph, Node, Region, TensorType
from optgraph.ir.ops import infer_type

Handle = TypeVar("Handle")


@dataclass(frozen=True)
class GraphKey:
    """What a captured graph's structure depends on (see the module docstring)."""

    inputs: tuple[tuple[str, str, tuple[int, ...]], ...]
    bound_inputs: frozenset[str] = frozenset()
    bound_outputs: frozenset[str] = frozenset()
    in_place: frozenset[tuple[str, str]] = frozenset()  # (output, input) computed in place
    part: int | None = None  # one GPU part of a run whose CPU nodes run on the calling thread
    # A bound step's own pointers (`CudaProgram.bind`): part of its graph's identity, so that the
    # bound steps of one program (a decode loop's two, reading and writing in turn) each keep a
    # graph to replay rather than updating one graph's pointers at every call. None: a `run`'s
    # graph, updated in place when only the pointers change (3. above).
    pinned: Binding | None = None

    @staticmethod
    def of(
        input_types: Mapping[str, TensorType],
        bound_inputs: frozenset[str] = frozenset(),
        bound_outputs: frozenset[str] = frozenset(),
        in_place: Mapping[str, str] | None = None,
    ) -> GraphKey:
        items = tuple(sorted((n, t.dtype, tuple(t.shape)) for n, t in input_types.items()))
        pairs = frozenset((in_place or {}).items())
        return GraphKey(items, frozenset(bound_inputs), frozenset(bound_outputs), pairs)

    def types(self) -> dict[str, TensorType]:
        return {n: TensorType(d, s) for n, d, s in self.inputs}


@dataclass(frozen=True)
class Binding:
    """The caller's device pointers baked into a graph: (name, pointer) of bound inputs, outputs."""

    inputs: tuple[tuple[str, int], ...] = ()
    outputs: tuple[tuple[str, int], ...] = ()

    @staticmethod
    def of(inputs: Mapping[str, int], outputs: Mapping[str, int]) -> Binding:
        return Binding(tuple(sorted(inputs.items())), tuple(sorted(outputs.items())))


class Action(enum.Enum):
    REPLAY = "replay"  # same key, same pointers: launch the instantiated graph
    UPDATE = "update"  # same key, other pointers: capture, cudaGraphExecUpdate, launch
    CAPTURE = "capture"  # new key: capture, instantiate, launch


@dataclass
class RuntimeCounters:
    """What the runtime did, for tests (assert behaviour through these, never through timing)."""

    eager_runs: int = 0
    captures: int = 0  # stream captures that were instantiated as a new graph
    updates: int = 0  # stream captures applied to an existing graph with cudaGraphExecUpdate
    update_fallbacks: int = 0  # updates CUDA refused, re-instantiated instead
    replays: int = 0  # graph launches (after capture, update or as is)
    specializations: int = 0  # variants built, one per distinct input types (the first included)
    weight_uploads: int = 0
    evictions: int = 0
    allocations_refused: int = 0  # allocations attempted (and refused) during capture

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


@dataclass
class _Entry(Generic[Handle]):
    handle: Handle
    binding: Binding


@dataclass
class GraphCache(Generic[Handle]):
    """Captured graphs by key, least recently used evicted first."""

    capacity: int = 8
    on_evict: Callable[[Handle], None] | None = None
    _entries: OrderedDict[GraphKey, _Entry[Handle]] = field(default_factory=OrderedDict)
    # Bumped whenever an entry's handle or binding changes or an entry goes: a caller holding a
    # handle and the generation it read it at may launch it while the generation is unchanged.
    generation: int = 0

    def decide(self, key: GraphKey, binding: Binding) -> Action:
        entry = self._entries.get(key)
        if entry is None:
            return Action.CAPTURE
        self._entries.move_to_end(key)
        return Action.REPLAY if entry.binding == binding else Action.UPDATE

    def get(self, key: GraphKey) -> Handle:
        return self._entries[key].handle

    def store(self, key: GraphKey, binding: Binding, handle: Handle) -> int:
        """Remember `handle` for `key`; returns how many entries were evicted."""
        self.generation += 1
        old = self._entries.pop(key, None)
        if old is not None and old.handle is not handle and self.on_evict is not None:
            self.on_evict(old.handle)
        self._entries[key] = _Entry(handle, binding)
        evicted = 0
        while len(self._entries) > self.capacity:
            _, entry = self._entries.popitem(last=False)
            if self.on_evict is not None:
                self.on_evict(entry.handle)
            evicted += 1
        return evicted

    def rebind(self, key: GraphKey, binding: Binding) -> None:
        """The graph of `key` was updated in place to `binding`'s pointers."""
        self.generation += 1
        self._entries[key].binding = binding

    def current(self, key: GraphKey, binding: Binding) -> Handle | None:
        """The handle of `key` if its graph is bound to `binding` now, else None."""
        entry = self._entries.get(key)
        return entry.handle if entry is not None and entry.binding == binding else None

    def clear(self) -> None:
        self.generation += 1
        while self._entries:
            _, entry = self._entries.popitem()
            if self.on_evict is not None:
                self.on_evict(entry.handle)

    def __len__(self) -> int:
        return len(self._entries)

    def __contains__(self, key: object) -> bool:
        return key in self._entries


# -- specialization ------------------------------------------------------------------------------

_PLAN_KEYS = {"offset": None, "size": None, "live": None, "visible": None}


def _retype_node(node: Node, types: dict[str, TensorType]) -> Node:
    body = node.body
    if body is not None:
        env = dict(zip(body.params, (types[o] for o in node.operands)))
        inner = []
        for n in body.nodes:
            t = infer_type(n, [env[o] for o in n.operands])
            env[n.name] = t
            inner.append(replace(n, type=t))
        body = Region(body.params, tuple(inner), body.result)
        node = replace(node, body=body)
    t = infer_type(node, [types[o] for o in node.operands])
    return replace(node, type=t, ann=replace(node.ann, **_PLAN_KEYS))


def shape_change(graph: Graph, input_types: Mapping[str, TensorType]) -> str:
    """Each input of `graph` whose type `input_types` changes, with both types, for messages:
    "input '%x' as f32[9,64] (was f32[8,64])"."""
    changes = [
        f"input '%{i.name}' as {input_types[i.name]} (was {i.type})"
        for i in graph.inputs
        if i.name in input_types and input_types[i.name] != i.type
    ]
    return " and ".join(changes) or "the same input types"


def retype_graph(graph: Graph, input_types: Mapping[str, TensorType]) -> Graph:
    """`graph` with new input types and every node type inferred again (plan annotations dropped).

    Raises `InputError` when the graph cannot take those types (a reshape whose element count no
    longer matches, say), naming the node, and each changed input with its old and new type.
    """
    unknown = sorted(set(input_types) - graph.input_names())
    if unknown:
        raise InputError(f"graph '{graph.name}' has no input '%{unknown[0]}'")
    inputs = tuple(replace(i, type=input_types.get(i.name, i.type)) for i in graph.inputs)
    types: dict[str, TensorType] = {i.name: i.type for i in inputs}
    types.update((w.name, w.type) for w in graph.weights)
    nodes = []
    for node in graph.nodes:
        if node.is_event:
            nodes.append(node)
            continue
        try:
            node = _retype_node(node, types)
        except OptGraphError as err:
            change = shape_change(graph, input_types)
            raise InputError(
                f"graph '{graph.name}' cannot take {change}: {err.message}", node.span
            ) from None
        assert node.type is not None
        types[node.name] = node.type
        nodes.append(node)
    return replace(graph, inputs=inputs, nodes=tuple(nodes))


def moved_weights(compiled: CudaPlan, specialized: CudaPlan) -> list[str]:
    """Weights whose place (device buffer offset, pinned host offset) differs between the plans
    of two variants, sorted; a specialization must have none (see the module docstring)."""

    def places(plan: CudaPlan) -> dict[str, tuple[int | None, int | None]]:
        device, host = plan.weight_offsets, plan.host_weight_offsets
        return {n: (device.get(n), host.get(n)) for n in device.keys() | host.keys()}

    a, b = places(compiled), places(specialized)
    return sorted(n for n in a.keys() | b.keys() if a.get(n) != b.get(n))


_DOT_NODE = re.compile(r'"(graph_\d+_node_\d+)"\s*\[(.*?)"\s*\]', re.DOTALL)
_DOT_KINDS = ("KERNEL", "MEMCPY", "MEMSET", "EVENT_RECORD", "WAIT_EVENT", "EMPTY", "HOST", "GRAPH")


@dataclass
class DotNodes:
    """The nodes of a `cudaGraphDebugDotPrint` dump, by kind; kernels also by function name."""

    kinds: dict[str, int]
    kernels: list[str]

    @property
    def total(self) -> int:
        return sum(self.kinds.values())


def count_dot_nodes(dot: str) -> DotNodes:
    """Classify every node definition (`"graph_N_node_M"[... label="..."]`) of a DOT dump."""
    kinds: dict[str, int] = {}
    kernels: list[str] = []
    seen: set[str] = set()
    for match in _DOT_NODE.finditer(dot):
        node, body = match.group(1), match.group(2)
        if node in seen:
            continue
        seen.add(node)
        kind = next((k for k in _DOT_KINDS if k in body.upper()), "OTHER")
        kinds[kind] = kinds.get(kind, 0) + 1
        if kind == "KERNEL":
            name = re.search(r"\b(og_[A-Za-z0-9_]+)", body)
            kernels.append(name.group(1) if name else "")
    return DotNodes(kinds, kernels)


def input_signature(graph: Graph) -> dict[str, TensorType]:
    return {i.name: i.type for i in graph.inputs}


__all__ = [
    "Action",
    "Binding",
    "GraphCache",
    "GraphKey",
    "RuntimeCounters",
    "count_dot_nodes",
    "input_signature",
    "moved_weights",
    "retype_graph",
    "shape_change",
]
