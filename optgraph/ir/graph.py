"""The in-memory graph: a flat, topologically ordered list of SSA nodes.

A `Graph` is immutable: passes build new graphs with `dataclasses.replace` (or the `with_*` helpers)
and never mutate their input. The order of `Graph.nodes` is the issue order: the order in which the
host launches work. Everything a pass decides is stored in typed fields (`Node.ann`, `Node.body`,
`record`/`wait` nodes), so the printed text shows it and `parse(print(g)) == g`.

Value names are stored without their sigil: the IR `%h` is the name `"h"`, the event `^e0` is `"e0"`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, TypedDict, Unpack

from optgraph.errors import Span

DTYPES: tuple[str, ...] = ("f32", "f16", "bf16", "i32", "i64", "bool")
DTYPE_BYTES: Mapping[str, int] = {"f32": 4, "f16": 2, "bf16": 2, "i32": 4, "i64": 8, "bool": 1}
FLOAT_DTYPES: frozenset[str] = frozenset({"f32", "f16", "bf16"})
INT_DTYPES: frozenset[str] = frozenset({"i32", "i64"})
# Quantized weights (docs/ir.md, "Quantized weights"): ggml's block formats, bit for bit as GGUF
# stores them. dtype -> (elements per block, bytes per block); blocks run along the last axis.
QUANT_BLOCKS: Mapping[str, tuple[int, int]] = {
    "q8_0": (32, 34),
    "q4_0": (32, 18),
    "q4_1": (32, 20),
    "q5_0": (32, 22),
    "q4_k": (256, 144),
    "q5_k": (256, 176),
    "q6_k": (256, 210),
    "mxfp4": (32, 17),
}
QUANT_DTYPES: tuple[str, ...] = tuple(QUANT_BLOCKS)

BACKENDS: tuple[str, ...] = ("cpu", "cuda")
# How a weight is stored against the array the model supplies (`optgraph/ir/weight_layout.py`).
WEIGHT_LAYOUTS: tuple[str, ...] = ("transposed",)
WEIGHT_PLACEMENTS: tuple[str, ...] = ("device", "host")
EVENT_OPS: frozenset[str] = frozenset({"record", "wait"})

AttrValue = bool | int | float | str | tuple[int, ...]


@dataclass(frozen=True)
class TensorType:
    """A dtype and a static shape; printed `f32[2,4]` (a scalar is `f32[]`)."""

    dtype: str
    shape: tuple[int, ...]

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def numel(self) -> int:
        numel: int | None = self.__dict__.get("_numel")  # kept like `nbytes` below
        if numel is None:
            numel = self.__dict__["_numel"] = math.prod(self.shape)
        return numel

    @property
    def nbytes(self) -> int:
        # Kept in the instance `__dict__` like the text below: cost models, limits and memory
        # plans ask the few type objects of a graph for their bytes once per node.
        # A quantized type counts its stored blocks (a partial block, which verify refuses,
        # as a whole one).
        nbytes: int | None = self.__dict__.get("_nbytes")
        if nbytes is None:
            block = QUANT_BLOCKS.get(self.dtype)
            if block is None:
                nbytes = self.numel * DTYPE_BYTES[self.dtype]
            else:
                nbytes = math.prod(self.array_shape)
            self.__dict__["_nbytes"] = nbytes
        return nbytes

    @property
    def is_quantized(self) -> bool:
        return self.dtype in QUANT_BLOCKS

    @property
    def array_shape(self) -> tuple[int, ...]:
        """The shape of the array holding the value: `shape`, or for a quantized type the
        `uint8` blocks of each row, `(*shape[:-1], shape[-1] / block elements * block bytes)`
        (a GGUF tensor's `data`)."""
        block = QUANT_BLOCKS.get(self.dtype)
        if block is None:
            return self.shape
        elems, size = block
        last = self.shape[-1] if self.shape else 1
        return (*self.shape[:-1], -(-last // elems) * size)

    def __hash__(self) -> int:
        # Kept like the text below: the passes' memos key on types, a few objects hashed often.
        h: int | None = self.__dict__.get("_hash")
        if h is None:
            h = self.__dict__["_hash"] = hash((self.dtype, self.shape))
        return h

    def __getstate__(self) -> dict[str, Any]:
        # A string's hash differs from one process to the next: a pickle leaves it behind.
        state = dict(self.__dict__)
        state.pop("_hash", None)
        return state

    def with_shape(self, shape: Iterable[int]) -> TensorType:
        return TensorType(self.dtype, tuple(shape))

    def with_dtype(self, dtype: str) -> TensorType:
        return TensorType(dtype, self.shape)

    def __str__(self) -> str:
        # Printed once per type object (kept in the instance `__dict__`, outside the fields): a
        # graph shares a few type objects among all its nodes, and printing and cse's node keys
        # format every node.
        text: str | None = self.__dict__.get("_text")
        if text is None:
            text = self.__dict__["_text"] = f"{self.dtype}[{','.join(str(d) for d in self.shape)}]"
        return text


class AnnotationChanges(TypedDict, total=False):
    """Keyword arguments of `Node.with_ann`: the `Annotations` fields to replace."""

    device: tuple[int, ...] | None
    stream: int | None
    backend: str | None
    offset: int | None
    size: int | None
    live: tuple[int, int] | None
    visible: tuple[int, ...] | None
    segment: int | None
    slot: int | None
    layout: str | None


@dataclass(frozen=True)
class Annotations:
    """What scheduling passes decided about one node, printed as `!{key = value, ...}`.

    - `device`: the devices the node runs on (the value it defines lives on), distinct ids;
      printed `device = 1` for one device, `device = [0, 1]` for a replicated value; absent: 0.
    - `stream`: CUDA stream id (assign-streams).
    - `backend`: "cpu" or "cuda" (split-backends).
    - `offset`, `size`: byte offset and reserved bytes of the result in the arena (plan-memory).
    - `live`: (first write, last access) as node indices in issue order (analyze-lifetimes).
    - `visible`: per stream s, the index of the first node on s from which every access to the
      buffer happens-before, i.e. the buffer is free as seen from s; -1 where never (analyze-lifetimes).
    - `segment`, `slot`: weight-streaming segment and prefetch slot (plan-prefetch).
    - `layout`: on a weight only, how it is stored against the array the model supplies:
      `"transposed"` (transpose-weights) means the graph reads the transpose of that array.
    """

    device: tuple[int, ...] | None = None
    stream: int | None = None
    backend: str | None = None
    offset: int | None = None
    size: int | None = None
    live: tuple[int, int] | None = None
    visible: tuple[int, ...] | None = None
    segment: int | None = None
    slot: int | None = None
    layout: str | None = None

    def items(self) -> Iterator[tuple[str, int | str | tuple[int, ...]]]:
        """The fields that are set, in canonical (declaration) order."""
        fields = self.__dict__  # read directly: the printer asks every node's annotations
        return iter([(key, fields[key]) for key in ANNOTATION_KEYS if fields[key] is not None])

    def is_empty(self) -> bool:
        return next(self.items(), None) is None

    @property
    def devices(self) -> tuple[int, ...]:
        """The devices of the annotated value or node; (0,) where none is named."""
        return DEFAULT_DEVICES if self.device is None else self.device


DEFAULT_DEVICES: tuple[int, ...] = (0,)
ANNOTATION_KEYS: tuple[str, ...] = (
    "device",
    "stream",
    "backend",
    "offset",
    "size",
    "live",
    "visible",
    "segment",
    "slot",
    "layout",
)
NO_ANNOTATIONS = Annotations()
# How each annotation's value is written (both parsers read by this): "devices" an id or a list of
# ids, "int" a non-negative integer, "str" one of ANNOTATION_CHOICES, "ints" a list, "pair" two.
ANNOTATION_KINDS: dict[str, str] = {
    "device": "devices",
    "stream": "int",
    "backend": "str",
    "offset": "int",
    "size": "int",
    "live": "pair",
    "visible": "ints",
    "segment": "int",
    "slot": "int",
    "layout": "str",
}
ANNOTATION_CHOICES: dict[str, tuple[str, ...]] = {"backend": BACKENDS, "layout": WEIGHT_LAYOUTS}
assert tuple(ANNOTATION_KINDS) == ANNOTATION_KEYS
_ANNOTATION_FIELDS = frozenset(ANNOTATION_KEYS)


@dataclass(frozen=True)
class Region:
    """The body of a `fused` node: parameters bound to the node's operands, nodes, one result."""

    params: tuple[str, ...]
    nodes: tuple[Node, ...]
    result: str


# Where a node keeps, in its instance `__dict__`, facts derived from its op, attributes, type and
# body for given operand types (never from annotations, names or spans): the verifier's inferred
# type, the cost model's bytes and flops, the attributes with their defaults. Like
# `functools.cached_property`, the entry sits outside the dataclass fields, so equality and printing
# never see it; `dataclasses.replace` drops it.
TYPE_FACTS = "_type_facts"


@dataclass(frozen=True)
class Node:
    """One SSA node. For `record`/`wait` nodes `name` is the event and `type` is None."""

    name: str
    op: str
    operands: tuple[str, ...] = ()
    attrs: Mapping[str, AttrValue] = field(default_factory=dict)
    type: TensorType | None = None
    ann: Annotations = NO_ANNOTATIONS
    body: Region | None = None
    span: Span | None = field(default=None, compare=False, repr=False)
    operand_spans: Sequence[Span] = field(default=(), compare=False, repr=False)

    @property
    def is_event(self) -> bool:
        return self.op in EVENT_OPS

    @property
    def stream(self) -> int:
        """The stream the node runs on; 0 where no stream was assigned."""
        return 0 if self.ann.stream is None else self.ann.stream

    @property
    def devices(self) -> tuple[int, ...]:
        """The devices the node runs on (its result lives on); (0,) where none is named."""
        return self.ann.devices

    def attr(self, key: str, default: AttrValue | None = None) -> AttrValue | None:
        return self.attrs.get(key, default)

    def with_ann(self, **changes: Unpack[AnnotationChanges]) -> Node:
        """This node with some annotations changed. Annotations change neither type nor cost,
        so the new node shares this one's `TYPE_FACTS`. A field-for-field copy: passes annotate
        every node of a graph, and `dataclasses.replace` costs several times more."""
        if not changes.keys() <= _ANNOTATION_FIELDS:
            raise TypeError(f"unknown annotations {sorted(changes.keys() - _ANNOTATION_FIELDS)}")
        ann = object.__new__(Annotations)
        ann.__dict__.update(self.ann.__dict__)
        ann.__dict__.update(changes)
        node = object.__new__(Node)
        node.__dict__.update(self.__dict__)
        node.__dict__["ann"] = ann
        return node

    def with_annotations(self, ann: Annotations) -> Node:
        """This node with `ann` as its annotations, an object it may share with other nodes
        (`with_ann` makes one per node); shares this one's `TYPE_FACTS` like `with_ann`."""
        node = object.__new__(Node)
        fields = node.__dict__
        fields.update(self.__dict__)
        fields["ann"] = ann
        return node

    def with_fields(self, **changes: Any) -> Node:
        """This node with other `name`, `operands`, `ann`, `span` or `operand_spans` (fields the
        `TYPE_FACTS` do not depend on, so the new node shares them): `dataclasses.replace` for
        the passes that rename or re-wire every node they move (fuse builds each region's body
        this way), a field-for-field copy at a fraction of its cost."""
        if not changes.keys() <= _RELINK_FIELDS:
            raise TypeError(f"with_fields cannot change {sorted(changes.keys() - _RELINK_FIELDS)}")
        node = object.__new__(Node)
        node.__dict__.update(self.__dict__)
        node.__dict__.update(changes)
        return node

    def type_facts(self) -> dict[str, Any]:
        """The node's `TYPE_FACTS` (made empty on first use)."""
        facts: dict[str, Any] | None = self.__dict__.get(TYPE_FACTS)
        if facts is None:
            facts = self.__dict__[TYPE_FACTS] = {}
        return facts


# Where `analysis.schedule_estimate` keeps a graph's data predecessors and node costs, in its
# instance `__dict__`: named here, with the graph's other facts about its values alone, so that
# `verify` hands them to a graph that differs from a verified one only in annotations.
DATA_PREDECESSORS = "_data_predecessors"
# Where `Graph.value_types` keeps its dict (`verify` leaves the one its walk builds there).
VALUE_TYPES = "_value_types"
NODE_COSTS = "_node_costs"

_RELINK_FIELDS = frozenset({"name", "operands", "ann", "span", "operand_spans"})


@dataclass(frozen=True)
class Input:
    """A graph input. Its only annotation is `device`: the devices the host uploads it to."""

    name: str
    type: TensorType
    span: Span | None = field(default=None, compare=False, repr=False)
    ann: Annotations = NO_ANNOTATIONS


@dataclass(frozen=True)
class Weight:
    """A named parameter. `placement` is the user's hint: keep it on the device or in host memory.
    `value`: a constant's value, the bytes of its array (`optgraph.ir.constants`); None for a
    weight the user supplies."""

    name: str
    type: TensorType
    placement: str = "device"
    ann: Annotations = NO_ANNOTATIONS
    span: Span | None = field(default=None, compare=False, repr=False)
    value: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True)
class Output:
    name: str
    span: Span | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class Graph:
    name: str
    inputs: tuple[Input, ...] = ()
    weights: tuple[Weight, ...] = ()
    nodes: tuple[Node, ...] = ()
    outputs: tuple[Output, ...] = ()
    path: str = field(default="<graph>", compare=False, repr=False)

    # -- lookups (O(V) each; callers that need them repeatedly keep the result) --
    # value_types, producers and device_count are computed once per graph object (graphs are
    # immutable) and kept in the instance `__dict__`, outside the fields; each caller gets a
    # dict of its own.

    def value_types(self) -> dict[str, TensorType]:
        """Type of every value: inputs, weights and node results (events excluded)."""
        types: dict[str, TensorType] | None = self.__dict__.get(VALUE_TYPES)
        if types is None:
            types = {i.name: i.type for i in self.inputs}
            types.update((w.name, w.type) for w in self.weights)
            types.update((n.name, n.type) for n in self.nodes if n.type is not None)
            self.__dict__[VALUE_TYPES] = types
        return dict(types)

    def producers(self) -> dict[str, int]:
        """Index in `nodes` of the node defining each value (inputs and weights are absent)."""
        found: dict[str, int] | None = self.__dict__.get("_producers")
        if found is None:
            found = {n.name: i for i, n in enumerate(self.nodes) if n.op not in EVENT_OPS}
            self.__dict__["_producers"] = found
        return dict(found)

    def users(self) -> dict[str, list[int]]:
        """Indices of the nodes reading each value, in issue order."""
        users: dict[str, list[int]] = {}
        for i, n in enumerate(self.nodes):
            for operand in n.operands:
                users.setdefault(operand, []).append(i)
        return users

    def value_devices(self) -> dict[str, tuple[int, ...]]:
        """The devices every value lives on: inputs, weights and node results (events excluded)."""
        devices: dict[str, tuple[int, ...]] = {i.name: i.ann.devices for i in self.inputs}
        devices.update((w.name, w.ann.devices) for w in self.weights)
        devices.update((n.name, n.devices) for n in self.nodes if n.op not in EVENT_OPS)
        return devices

    def device_count(self) -> int:
        """1 + the largest device id named by an annotation (1 for a single-device graph)."""
        count: int | None = self.__dict__.get("_device_count")
        if count is None:
            annotated = [i.ann for i in self.inputs] + [w.ann for w in self.weights]
            annotated += [n.ann for n in self.nodes]
            count = 1 + max((max(a.device) for a in annotated if a.device), default=0)
            self.__dict__["_device_count"] = count
        return count

    def output_names(self) -> tuple[str, ...]:
        return tuple(o.name for o in self.outputs)

    def weight_names(self) -> frozenset[str]:
        return frozenset(w.name for w in self.weights)

    def input_names(self) -> frozenset[str]:
        return frozenset(i.name for i in self.inputs)

    def compute_nodes(self) -> Iterator[tuple[int, Node]]:
        """(index, node) for every node that is not an event."""
        return ((i, n) for i, n in enumerate(self.nodes) if n.op not in EVENT_OPS)

    def with_nodes(self, nodes: Iterable[Node]) -> Graph:
        return replace(self, nodes=tuple(nodes))


def differs_only_in_annotations(a: Graph, b: Graph, kept: tuple[str, ...] = ()) -> bool:
    """Whether `b` is `a` with some node annotations changed (none of those named in `kept`) and
    spans: the same name, inputs, weights and outputs, and node for node the same name, op,
    operands, attributes, type and body. O(V), mostly identity tests: passes that annotate keep
    the other fields' objects (`Node.with_ann`)."""
    if a is b:
        return True
    if len(a.nodes) != len(b.nodes) or (a.name, a.inputs, a.weights, a.outputs) != (
        b.name,
        b.inputs,
        b.weights,
        b.outputs,
    ):
        return False
    for x, y in zip(a.nodes, b.nodes):
        if x is y:
            continue
        if (
            x.name != y.name
            or x.op != y.op
            or x.operands != y.operands
            or (x.type is not y.type and x.type != y.type)
            or (x.attrs is not y.attrs and x.attrs != y.attrs)
            or (x.body is not y.body and x.body != y.body)
        ):
            return False
        if x.ann is not y.ann:
            for k in kept:
                if getattr(x.ann, k) != getattr(y.ann, k):
                    return False
    return True
