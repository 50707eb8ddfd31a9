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

Does not model partial overlap of two kernels (each step is atomic) or host-side copies.
Complexity: O(steps · k) scheduling plus the kernels; read checks add O(bytes read).
"""

from __future__ import annotations

import zlib
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from optgraph.codegen.program import Buffer, Program, Step
from optgraph.errors import InputError
from optgraph.ir.graph import Node
from optgraph.ir.ops import get_op
from optgraph.ir.weight_layout import model_type, stored_array
from optgraph.runtime.reference import evaluate_node, numpy_dtype

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
        shape = model_type(weight).shape if weight is not None else b.shape
        # np.require, not np.ascontiguousarray: that one turns a rank-0 array into shape [1]
        array = np.require(np.asarray(given[name]), numpy_dtype(b.dtype), "C")
        if array.shape != shape:
            raise InputError(
                f"{what} '%{name}': expected shape {list(shape)}, got {list(array.shape)}"
            )
        if weight is not None and weight.ann.layout is not None:
            array = stored_array(weight, array)
        else:
            array = array.copy()
        array.flags.writeable = False
        out[name] = array
    return out


class _Machine:
    def __init__(
        self,
        program: Program,
        inputs: dict[str, np.ndarray],
        weights: dict[str, np.ndarray],
        guard_bytes: int,
        check_reads: bool,
        strict: bool,
    ):
        self.program = program
        self.guard = guard_bytes
        self.arena = np.full(program.arena_bytes + 2 * guard_bytes, POISON, dtype=np.uint8)
        self.arena[:guard_bytes] = GUARD
        self.arena[guard_bytes + program.arena_bytes :] = GUARD
        self.own = {**inputs, **weights}
        for b in program.buffers.values():
            if b.kind == "arena" and (b.offset < 0 or b.offset + b.size > program.arena_bytes):
                raise PlanViolation(
                    f"'%{b.name}' at {b.offset}+{b.size} lies outside the {program.arena_bytes}-byte arena"
                )
            if b.kind == "arena" and b.size < b.nbytes:
                raise PlanViolation(f"'%{b.name}' needs {b.nbytes} bytes but reserves {b.size}")
        self.check_reads = check_reads
        self.strict = strict
        self.digests: dict[str, int] = {}
        self.violations: list[str] = []

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

    def view(self, name: str) -> np.ndarray:
        b = self.program.buffers[name]
        root, offset = self.root(name)
        dtype = numpy_dtype(b.dtype)
        if root.kind == "arena":
            return np.ndarray(b.shape, dtype, self.arena, self.guard + root.offset + offset)
        base = self.own[root.name]
        flat = base.reshape(-1).view(np.uint8)
        return np.ndarray(b.shape, dtype, flat, offset)

    def _bytes(self, b: Buffer) -> memoryview:
        """The buffer's bytes in the (contiguous, uint8) arena, as zlib.crc32 reads them."""
        start = self.guard + b.offset
        return self.arena[start : start + b.nbytes].data

    def _slack(self, b: Buffer) -> np.ndarray:
        start = self.guard + b.offset
        return self.arena[start + b.nbytes : start + b.size]

    def check_buffer(self, name: str, reader: str) -> None:
        b, _ = self.root(name)
        if b.kind != "arena":
            return
        if np.any(self._slack(b) != GUARD):
            self.fail(f"guard bytes after '%{b.name}' overwritten (seen by '%{reader}')")
        digest = self.digests.get(b.name) if self.check_reads else None
        if digest is not None and zlib.crc32(self._bytes(b)) != digest:
            self.fail(
                f"'%{b.name}' was overwritten while still live (read by '%{reader}'; its bytes "
                f"@{b.offset}+{b.nbytes})"
            )

    def check_operand_overlap(self, node: Node) -> None:
        """A kernel may write over an operand only element for element (in place): the same
        start and length, and an elementwise op (or kv_cache_write over its cache). NumPy reads
        every operand before writing, so without this check a GPU-only corruption would pass."""
        out = self.program.buffers[node.name]
        op = get_op(node.op)
        for k, operand in enumerate(node.operands):
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

    def launch(self, step: Step) -> None:
        node = self.program.graph.nodes[step.node]
        for operand in node.operands:
            self.check_buffer(operand, node.name)
        self.check_operand_overlap(node)
        args = [self.view(o) for o in node.operands]
        result = evaluate_node(node, args)
        dst = self.view(node.name)
        dst[...] = result
        b = self.program.buffers[node.name]
        self._slack(b)[...] = GUARD
        if self.check_reads:
            self.digests[node.name] = zlib.crc32(self._bytes(b))

    def finish(self) -> dict[str, np.ndarray]:
        outputs = {}
        for name in self.program.outputs:
            self.check_buffer(name, "output")
            outputs[name] = np.array(self.view(name), copy=True)
        g = self.guard
        if np.any(self.arena[:g] != GUARD) or np.any(
            self.arena[g + self.program.arena_bytes :] != GUARD
        ):
            self.fail("guard bytes around the arena were overwritten")
        return outputs


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
) -> Execution:
    """Run `program`; `seed=None` runs the streams in issue order (the host's order)."""
    machine = _Machine(
        program,
        _checked_arrays(inputs, program, program.inputs, "input"),
        _checked_arrays(weights, program, program.weights, "weight"),
        guard_bytes,
        check_reads,
        strict,
    )
    queues = {s: deque(steps) for s, steps in program.streams.items() if steps}
    recorded: set[str] = set()
    rng = np.random.default_rng(seed) if seed is not None else None
    trace: list[tuple[int, Step]] = []
    while queues:
        ready = [
            s
            for s, q in queues.items()
            if q[0].kind != "wait" or ignore_events or q[0].name in recorded
        ]
        if not ready:
            raise PlanViolation(
                "deadlock: every stream waits on an event not yet recorded ("
                + ", ".join(f"stream {s}: ^{q[0].name}" for s, q in queues.items())
                + ")"
            )
        if rng is None:
            stream = min(ready, key=lambda s: queues[s][0].node)
        else:
            stream = ready[int(rng.integers(len(ready)))]
        step = queues[stream].popleft()
        if not queues[stream]:
            del queues[stream]
        trace.append((stream, step))
        if step.kind == "launch":
            machine.launch(step)
        elif step.kind == "record":
            recorded.add(step.name)
    outputs = machine.finish()
    return Execution(outputs, trace, machine.violations)
