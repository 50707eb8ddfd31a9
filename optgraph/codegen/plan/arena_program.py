"""The lowered program: what a runtime needs to run a planned graph, and nothing to decide.

`codegen/program_lowering.lower(graph)` turns a graph that plan-memory has annotated into a
`Program` (this module holds the data types only, so a runtime reads them without lowering):

- per stream, the steps in issue order: `launch` (one kernel: a node that is not an aliasing view),
  `record ^e`, `wait ^e`; the host issues them in the graph's issue order and joins at the end;
- a buffer table: every value's dtype, shape, row-major byte strides and where its bytes are:
  `arena` (planned offset and reserved size), `alias` (a root value and a byte offset in it),
  `input` or `weight` (arrays of their own);
- the arena size, the graph's inputs, weights and outputs.

Several devices (docs/ir.md, "Devices"): a node has one step per device it runs on (`Step.device`),
in `streams[stream id]` with the steps of every device on that stream id; each lane (device,
stream) runs its own steps in order. Each device has its own arena (`device_arena_bytes`); an
arena buffer lists its devices and has the same offset in each of their arenas. Collectives are
`launch` steps of their `all_reduce`/`all_gather`/`send`/`recv` nodes (a runtime runs one
instance per participant). With one device every step is on device 0 and the JSON is unchanged.

`to_json()`/`from_json()` serialize it (`optgraph compile -o DIR` writes `program.json`); the JSON
holds the planned IR text too, so node operands and attributes travel with it.

    before: %a = exp(%x) : f32[64] !{stream = 1, offset = 0, size = 256}  ...
    after:  streams[1] = [launch %a (node 0), record ^e0]; buffers["a"] = arena @0, 256 bytes

Does not handle: kernels (codegen's CUDA sources are separate); graphs that are not planned (run
plan-memory first). Complexity O(V).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from optgraph.codegen.plan.json_records import json_record, json_text
from optgraph.errors import OptGraphError
from optgraph.ir.graph import Graph, TensorType
from optgraph.ir.parser import parse
from optgraph.ir.printer import print_graph

FORMAT = "optgraph-program/1"
STEP_KINDS = ("launch", "record", "wait")


@dataclass(frozen=True)
class Buffer:
    """Where one value's bytes are. `offset` is in the arena (arena) or in `root` (alias)."""

    name: str
    kind: str  # "arena" | "alias" | "input" | "weight"
    dtype: str
    shape: tuple[int, ...]
    strides: tuple[int, ...]  # bytes, row-major
    offset: int = 0
    size: int = 0  # bytes reserved (arena), else the value's bytes
    root: str | None = None
    devices: tuple[int, ...] = (0,)  # the devices holding the value (arena: at `offset` in each)

    @property
    def nbytes(self) -> int:
        return TensorType(self.dtype, self.shape).nbytes

    @property
    def array_shape(self) -> tuple[int, ...]:
        """The shape of the array holding the value (a quantized one's: its blocks' bytes)."""
        return TensorType(self.dtype, self.shape).array_shape


@dataclass(frozen=True)
class Step:
    kind: str  # "launch" | "record" | "wait"
    name: str  # the value a launch computes, or the event
    node: int  # index of the node in the planned graph
    device: int = 0  # the device whose lane (device, stream) runs the step


@dataclass(frozen=True)
class Program:
    graph: Graph
    arena_bytes: int
    buffers: dict[str, Buffer]
    streams: dict[int, tuple[Step, ...]]
    inputs: tuple[str, ...]
    weights: tuple[str, ...]
    outputs: tuple[str, ...]
    device_arena_bytes: tuple[int, ...] = ()  # per device 0..n-1; () means one device

    @property
    def device_count(self) -> int:
        return max(1, len(self.device_arena_bytes))

    def arena_of(self, device: int) -> int:
        """Bytes of `device`'s arena."""
        return self.device_arena_bytes[device] if self.device_arena_bytes else self.arena_bytes

    @property
    def events(self) -> tuple[str, ...]:
        return tuple(n.name for n in self.graph.nodes if n.op == "record")

    def launches(self) -> int:
        return sum(1 for steps in self.streams.values() for s in steps if s.kind == "launch")

    def to_json(self) -> str:
        data = {
            "format": FORMAT,
            "name": self.graph.name,
            "arena_bytes": self.arena_bytes,
            "inputs": list(self.inputs),
            "weights": list(self.weights),
            "outputs": list(self.outputs),
            "events": list(self.events),
            "buffers": {name: _buffer_json(b) for name, b in self.buffers.items()},
            "streams": {
                str(s): [[x.kind, x.name, x.node, *([x.device] if x.device else [])] for x in steps]
                for s, steps in self.streams.items()
            },
            "ir": print_graph(self.graph),
        }
        if self.device_arena_bytes:
            data["device_arena_bytes"] = list(self.device_arena_bytes)
        return json_text(data)

    @classmethod
    def from_json(cls, text: str) -> Program:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as err:
            raise OptGraphError(f"program.json: not JSON ({err})") from None
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise OptGraphError(f"program.json: expected format '{FORMAT}'")
        graph = parse(data["ir"], "<program.json>")
        buffers = {
            name: Buffer(
                name=name,
                kind=b["kind"],
                dtype=b["dtype"],
                shape=tuple(b["shape"]),
                strides=tuple(b["strides"]),
                offset=b["offset"],
                size=b["size"],
                root=b.get("root"),
                devices=tuple(b.get("devices", (0,))),
            )
            for name, b in data["buffers"].items()
        }
        streams = {
            int(s): tuple(Step(*step) for step in steps) for s, steps in data["streams"].items()
        }
        return cls(
            graph=graph,
            arena_bytes=int(data["arena_bytes"]),
            buffers=buffers,
            streams=streams,
            inputs=tuple(data["inputs"]),
            weights=tuple(data["weights"]),
            outputs=tuple(data["outputs"]),
            device_arena_bytes=tuple(data.get("device_arena_bytes", ())),
        )


def _buffer_json(b: Buffer) -> dict[str, object]:
    out = json_record(b)
    del out["name"]
    out["shape"] = list(b.shape)
    out["strides"] = list(b.strides)
    if b.root is None:
        del out["root"]
    if b.devices == (0,):
        del out["devices"]
    else:
        out["devices"] = list(b.devices)
    return out
