"""The planned executor: run a lowered program on a NumPy byte arena at the planned offsets.

Every arena value is a NumPy view into one `uint8` arena at exactly its planned offset (aliasing
views at their root's offset plus their own), so a memory plan that lets two live buffers share
bytes corrupts results here as it would on a GPU. Each op is evaluated by the reference
interpreter's `evaluate_node` on those views and its result written back into the arena.

Streams are simulated: each stream is a queue of its program steps; at every tick a seeded random
choice picks one runnable stream and runs its next step. A `wait ^e` is runnable only once `^e` has
been recorded (with `ignore_events=True` never blocking, to show what a missing sync does). The host
joins all streams at the end and copies the outputs out.

Checks, all raising `PlanViolation` (or collected in `Execution.violations` with `strict=False`):

- guard bytes: `guard_bytes` of a pattern before and after the arena, and the slack between a
  buffer's bytes and its reserved size, checked at every read of the buffer and after the run;
- read checks (`check_reads=True`): a checksum of each buffer taken when it is written is compared
  at every later read, so a buffer overwritten while still live is named, not only seen as a wrong
  result;
- operand overlap: a kernel's result may cover an operand's bytes only element for element (an
  elementwise op or kv_cache_write in place); NumPy reads before it writes, a GPU kernel would not;
- inputs and weights are read-only arrays: writing into one raises.

    execute(lower(planned), inputs, weights, seed=3)   -> Execution(outputs={...}, trace=[...])

Several devices (docs/ir.md, "Devices"): each device has its own arena (`device_arena_bytes`),
a replicated buffer at its one offset in each; each lane (device, stream) is a queue, and the
seeded random choice runs over all lanes of all devices. Collectives are computed in NumPy with a
rendezvous: an `all_reduce`/`all_gather` runs once every participant's lane has reached it
(operand k read from device group[k]'s arena, the result written into every participant's), a
`send` and its `recv` run together once both lanes have reached them (NCCL's blocking case: the
sent bytes are read from the sender's arena, written into the receiver's). When no lane can move,
the run is a deadlock: a `PlanViolation` naming each blocked collective and what it waits for.
Events are recorded and waited per device.

Quantized weights: by default (`quantized="reference"`) a node reading one is the reference's
too, which dequantizes the whole weight per call, so results stay bit-identical to the reference
(what `--check` on the CPU asserts). `quantized="native"` runs products, gathers and dequantize of
quantized weights with the compiled CPU kernels (`runtime/cpu/quantized_nodes.py`, on `threads`
threads, default all cores): never a whole matrix dequantized for a product, gathers and
dequantize still bit-identical, products within f32 rounding of the reference (their bound:
`runtime/cpu/quantized.py`), the same bits whatever the interleaving or thread count.

Does not model partial overlap of two kernels (each step is atomic) or host-side copies.
Complexity: O(steps · k) scheduling (k lanes) plus the kernels; read checks add O(bytes read).
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from optgraph.codegen.plan.arena_program import Buffer, Program, Step
from optgraph.errors import InputError
from optgraph.ir.graph import Node, TensorType
from optgraph.ir.ops import get_op
from optgraph.ir.weight_layout import model_type, stored_array
from optgraph.reference.interpreter import evaluate_node, numpy_dtype
from optgraph.runtime.cpu.quantized_nodes import evaluate_quantized

QUANTIZED_MODES = ("reference", "native")
GUARD = 0xA5
POISON = 0x7F  # fresh arena bytes: reads of never-written memory give large floats, not zeros


class PlanViolation(RuntimeError):
    """The program broke its own memory plan: a guard byte changed or a live buffer was overwritten."""


@dataclass
class Execution:
    outputs: dict[str, np.ndarray]
    trace: list[tuple[int, Step]]  # (stream, step) in the order the simulator ran them
    violations: list[str] = field(default_factory=list)


def _checked_arrays(
    given: Mapping[str, np.ndarray], program: Program, names: tuple[str, ...], what: str
) -> dict[str, np.ndarray]:
    out: dict[str, np.ndarray] = {}
    weights = {w.name: w for w in program.graph.weights}
    for name in names:
        if name not in given:
            raise InputError(f"missing {what} '%{name}' for graph '{program.graph.name}'")
        b = program.buffers[name]
        weight = weights.get(name)
        shape = model_type(weight).array_shape if weight is not None else b.array_shape
        # np.require, not np.ascontiguousarray: that one turns a rank-0 array into shape [1]
        array = np.require(np.asarray(given[name]), numpy_dtype(b.dtype), "C")
        if array.shape != shape:
            raise InputError(
                f"{what} '%{name}': expected shape {list(shape)}, got {list(array.shape)}"
            )
        if weight is not None and weight.ann.layout is not None:
            array = stored_array(weight, array)
        else:  # a read-only view, not a copy: a GGUF model's weights are gigabytes
            array = array.view()
        array.flags.writeable = False
        out[name] = array
    return out


GROUP_COLLECTIVES = frozenset({"all_reduce", "all_gather"})
Lane = tuple[int, int]  # (device, stream)


class _Machine:
    def __init__(
        self,
        program: Program,
        inputs: dict[str, np.ndarray],
        weights: dict[str, np.ndarray],
        guard_bytes: int,
        check_reads: bool,
        strict: bool,
        native_threads: int | None = None,
        native: bool = False,
    ):
        self.program = program
        self.native = native
        self.native_threads = native_threads
        self.guard = guard_bytes
        self.arenas: dict[int, np.ndarray] = {}
        for d in range(program.device_count):
            size = program.arena_of(d)
            arena = np.full(size + 2 * guard_bytes, POISON, dtype=np.uint8)
            arena[:guard_bytes] = GUARD
            arena[guard_bytes + size :] = GUARD
            self.arenas[d] = arena
        self.own = {**inputs, **weights}
        for b in program.buffers.values():
            if b.kind != "arena":
                continue
            for d in b.devices:
                if b.offset < 0 or b.offset + b.size > program.arena_of(d):
                    raise PlanViolation(
                        f"'%{b.name}' at {b.offset}+{b.size} lies outside the "
                        f"{program.arena_of(d)}-byte arena{self.of(d)}"
                    )
            if b.size < b.nbytes:
                raise PlanViolation(f"'%{b.name}' needs {b.nbytes} bytes but reserves {b.size}")
        self.check_reads = check_reads
        self.strict = strict
        self.digests: dict[tuple[str, int], int] = {}
        self.violations: list[str] = []

    def of(self, device: int) -> str:
        """` of device d` in messages about a program over several devices."""
        return f" of device {device}" if self.program.device_count > 1 else ""

    def fail(self, message: str) -> None:
        if self.strict:
            raise PlanViolation(message)
        self.violations.append(message)

    def root(self, name: str) -> tuple[Buffer, int]:
        b = self.program.buffers[name]
        if b.kind == "alias":
            assert b.root is not None
            root, offset = self.root(b.root)
            return root, offset + b.offset
        return b, 0

    def view(self, name: str, device: int = 0) -> np.ndarray:
        b = self.program.buffers[name]
        root, offset = self.root(name)
        dtype = numpy_dtype(b.dtype)
        shape = b.array_shape  # a quantized value: its blocks' bytes
        if root.kind == "arena":
            return np.ndarray(shape, dtype, self.arenas[device], self.guard + root.offset + offset)
        base = self.own[root.name]
        flat = base.reshape(-1).view(np.uint8)
        return np.ndarray(shape, dtype, flat, offset)

    def types(self, operands: Sequence[str]) -> list[TensorType]:
        buffers = self.program.buffers
        return [TensorType(buffers[o].dtype, buffers[o].shape) for o in operands]

    def _bytes(self, b: Buffer, device: int) -> memoryview:
        """The buffer's bytes in the (contiguous, uint8) arena, as zlib.crc32 reads them."""
        start = self.guard + b.offset
        return self.arenas[device][start : start + b.nbytes].data

    def _slack(self, b: Buffer, device: int) -> np.ndarray:
        start = self.guard + b.offset
        return self.arenas[device][start + b.nbytes : start + b.size]

    def check_buffer(self, name: str, reader: str, device: int = 0) -> None:
        b, _ = self.root(name)
        if b.kind != "arena":
            return
        if np.any(self._slack(b, device) != GUARD):
            self.fail(
                f"guard bytes after '%{b.name}'{self.of(device)} overwritten (seen by '%{reader}')"
            )
        digest = self.digests.get((b.name, device)) if self.check_reads else None
        if digest is not None and zlib.crc32(self._bytes(b, device)) != digest:
            self.fail(
                f"'%{b.name}'{self.of(device)} was overwritten while still live (read by "
                f"'%{reader}'; its bytes @{b.offset}+{b.nbytes})"
            )

    def check_operand_overlap(self, node: Node, operands: list[tuple[int, str]]) -> None:
        """A kernel may write over an operand only element for element (in place): the same
        start and length, and an elementwise op (or kv_cache_write over its cache). NumPy reads
        every operand before writing, so without this check a GPU-only corruption would pass."""
        out = self.program.buffers[node.name]
        op = get_op(node.op)
        for k, operand in operands:
            root, offset = self.root(operand)
            if root.kind != "arena":
                continue
            lo = root.offset + offset
            hi = lo + self.program.buffers[operand].nbytes
            if hi <= out.offset or out.offset + out.nbytes <= lo:
                continue
            same = lo == out.offset and hi == out.offset + out.nbytes
            elementwise = op is not None and op.category == "elementwise"
            if same and (elementwise or (node.op == "kv_cache_write" and k == 0)):
                continue
            self.fail(f"'%{node.name}' is written over its operand '%{operand}' while reading it")

    def write(self, node: Node, result: np.ndarray, device: int) -> None:
        dst = self.view(node.name, device)
        dst[...] = result
        b = self.program.buffers[node.name]
        self._slack(b, device)[...] = GUARD
        if self.check_reads:
            self.digests[(node.name, device)] = zlib.crc32(self._bytes(b, device))

    def launch(self, step: Step) -> None:
        node = self.program.graph.nodes[step.node]
        d = step.device
        for operand in node.operands:
            self.check_buffer(operand, node.name, d)
        self.check_operand_overlap(node, list(enumerate(node.operands)))
        args = [self.view(o, d) for o in node.operands]
        types = self.types(node.operands)
        if self.native:
            result = evaluate_quantized(node, args, types, threads=self.native_threads)
        else:
            result = evaluate_node(node, args, types)
        self.write(node, result, d)

    def collective(self, node: Node) -> None:
        """Run every instance of a collective at once: operand k read on group[k] (a recv's
        operand on the sender), the result written on each participant (none for a send)."""
        if node.op == "send":
            return  # its recv reads the sent bytes; the pair runs together
        if node.op == "recv":
            sender = node.attrs["from"]
            assert isinstance(sender, int)
            pairs = [(sender, node.operands[0])]
        else:
            group = node.attrs["group"]
            assert isinstance(group, tuple)
            pairs = list(zip(group, node.operands))
        for d, operand in pairs:
            self.check_buffer(operand, node.name, d)
        args = [self.view(o, d) for d, o in pairs]
        result = evaluate_node(node, args, self.types([o for _, o in pairs]))
        for d in node.devices:
            local = [(k, o) for k, (e, o) in enumerate(pairs) if e == d]
            self.check_operand_overlap(node, local)
            self.write(node, result, d)

    def finish(self) -> dict[str, np.ndarray]:
        outputs = {}
        for name in self.program.outputs:
            device = self.program.buffers[name].devices[0]  # outputs: the first device
            self.check_buffer(name, "output", device)
            outputs[name] = np.array(self.view(name, device), copy=True)
        g = self.guard
        for d, arena in self.arenas.items():
            size = self.program.arena_of(d)
            if np.any(arena[:g] != GUARD) or np.any(arena[g + size :] != GUARD):
                self.fail(f"guard bytes around the arena{self.of(d)} were overwritten")
        return outputs


class _Lanes:
    """The lanes' step queues and which collective instances have arrived at their heads."""

    def __init__(self, program: Program):
        self.nodes = program.graph.nodes
        self.queues: dict[Lane, deque[Step]] = {}
        for stream, steps in program.streams.items():
            for step in steps:
                self.queues.setdefault((step.device, stream), deque()).append(step)
        receiver = {n.operands[0]: i for i, n in enumerate(self.nodes) if n.op == "recv"}
        self.partner: dict[int, int] = {}  # send <-> recv node indices
        for i, n in enumerate(self.nodes):
            if n.op == "send" and n.name in receiver:
                self.partner[i] = receiver[n.name]
                self.partner[receiver[n.name]] = i

    def party(self, step: Step) -> list[tuple[Lane, int]] | None:
        """The (lane, node) heads a collective step needs at once; None for other steps."""
        node = self.nodes[step.node]
        if step.kind != "launch":
            return None
        if node.op in GROUP_COLLECTIVES:
            return [((d, node.stream), step.node) for d in node.devices]
        if node.op in ("send", "recv") and step.node in self.partner:
            other = self.partner[step.node]
            peer = self.nodes[other]
            mine = ((step.device, node.stream), step.node)
            return sorted([mine, ((peer.devices[0], peer.stream), other)], key=lambda x: x[1])
        return None

    def arrived(self, lane: Lane, node: int) -> bool:
        q = self.queues.get(lane)
        return q is not None and q[0].node == node

    def blocked(self) -> str:
        """Why no lane can move: each waiting collective and event, named."""
        why = []
        for (d, s), q in sorted(self.queues.items()):
            step = q[0]
            party = self.party(step)
            if step.kind == "wait":
                why.append(f"stream {s} of device {d} waits on ^{step.name}, never recorded")
                continue
            node = self.nodes[step.node]
            for lane, index in party or ():
                if not self.arrived(lane, index):
                    other = self.queues.get(lane)
                    at = f"at '%{other[0].name}'" if other else "finished"
                    why.append(
                        f"{node.op} '%{node.name}' on device {d} waits for device {lane[0]} "
                        f"(its stream {lane[1]} is {at})"
                    )
        return "; ".join(dict.fromkeys(why))


def execute(
    program: Program,
    inputs: Mapping[str, np.ndarray],
    weights: Mapping[str, np.ndarray],
    *,
    seed: int | None = 0,
    ignore_events: bool = False,
    guard_bytes: int = 64,
    check_reads: bool = True,
    strict: bool = True,
    quantized: str = "reference",
    threads: int | None = None,
) -> Execution:
    """Run `program`; `seed=None` runs the lanes in issue order (the host's order).

    `quantized`: "reference" (nodes reading quantized weights as the reference: bit-identical)
    or "native" (the compiled CPU kernels on `threads` threads; see the module docstring)."""
    if quantized not in QUANTIZED_MODES:
        expected = ", ".join(QUANTIZED_MODES)
        raise ValueError(f"quantized: expected one of {expected}, got {quantized!r}")
    machine = _Machine(
        program,
        _checked_arrays(inputs, program, program.inputs, "input"),
        _checked_arrays(weights, program, program.weights, "weight"),
        guard_bytes,
        check_reads,
        strict,
        threads,
        quantized == "native",
    )
    lanes = _Lanes(program)
    queues = lanes.queues
    recorded: set[tuple[str, int]] = set()
    rng = np.random.default_rng(seed) if seed is not None else None
    trace: list[tuple[int, Step]] = []

    def is_ready(lane: Lane, step: Step) -> bool:
        if step.kind == "wait":
            return ignore_events or (step.name, lane[0]) in recorded
        party = lanes.party(step)
        return party is None or all(lanes.arrived(other, node) for other, node in party)

    while queues:
        ready = [lane for lane, q in queues.items() if is_ready(lane, q[0])]
        if not ready:
            raise PlanViolation("deadlock: " + lanes.blocked())
        if rng is None:
            lane = min(ready, key=lambda x: (queues[x][0].node, x[0]))
        else:
            lane = ready[int(rng.integers(len(ready)))]
        step = queues[lane][0]
        party = lanes.party(step)
        taken = party if party is not None else [(lane, step.node)]
        for other, _ in taken:
            done = queues[other].popleft()
            trace.append((other[1], done))
            if not queues[other]:
                del queues[other]
        if step.kind == "record":
            recorded.add((step.name, lane[0]))
        elif party is None and step.kind == "launch":
            machine.launch(step)
        elif party is not None:
            last = program.graph.nodes[taken[-1][1]]  # the recv of a pair, else the collective
            machine.collective(last)
    outputs = machine.finish()
    return Execution(outputs, trace, machine.violations)
