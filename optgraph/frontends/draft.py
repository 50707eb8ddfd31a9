"""The graph an importer builds before it becomes IR: nodes, known constants and weights.

An importer appends `Node`s (each with its source's result type) to a `Draft`. A node may carry an
op that the IR does not have (`erf`, `cos`, `sin`, ...): the raising rules of `raising.py` may
still turn the pattern it belongs to into an IR op (`gelu`, `rope`). `Draft.finish` drops what the
outputs do not need, turns the constants still read into weights, and fails with one error listing
every op left unmapped, with its count and node names.

Constants are NumPy arrays known at import time (folded shape arithmetic, buffers, literals):
raising reads their values (an `eps`, a rope frequency table). Those still read at the end become
weights named after their source (a torch buffer keeps its name) or `const.N`; those of at most
`ir.constants.INLINE_LIMIT` elements carry their value in the graph (`weight %c : i64[1] = [1]`),
so a run without the weights file computes with them, not with random data. The weights
returned still hold every constant's array.

Names: an IR value name is letters, digits, `_` and `.` (docs/ir.md). `ir_name` keeps such a
name as it is and spells every other character `c` as `_xHH_` (HH its code point in hex), so a
model's own names come back with `source_name`.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np

from optgraph.errors import Diagnostic, OptGraphError, Span
from optgraph.ir.constants import INLINE_LIMIT, array_bytes
from optgraph.ir.graph import AttrValue, Graph, Input, Node, Output, TensorType, Weight
from optgraph.ir.ops import get_op
from optgraph.ir.verify import verify
from optgraph.reference.kernels import ir_dtype

_VALID_NAME = re.compile(r"[A-Za-z0-9_.]+")
_ESCAPE = re.compile(r"_x([0-9a-f]{2,6})_")
SHARED_CONSTANT = 64  # elements: constants this small are read under one name when equal


def ir_name(name: str) -> str:
    """`name` as an IR value name: kept when valid, other characters spelled `_xHH_`."""
    if _VALID_NAME.fullmatch(name):
        return name
    return "".join(c if _VALID_NAME.fullmatch(c) else f"_x{ord(c):02x}_" for c in name) or "_"


def source_name(name: str) -> str:
    """The model's own name of an IR name made by `ir_name`."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 16)), name)


def tensor_type(dtype: np.dtype, shape: Sequence[int], what: str) -> TensorType:
    """The IR type of a NumPy dtype and shape; an `OptGraphError` naming `what` otherwise."""
    name = ir_dtype(np.dtype(dtype))
    if name is None:
        raise OptGraphError(f"import: {what} has dtype {dtype}, which optgraph does not support")
    return TensorType(name, tuple(int(d) for d in shape))


def in_file(err: OptGraphError, path: str) -> OptGraphError:
    """`err` saying which model file `path` it is about: a diagnostic that names no place is
    located at the file's start (a dtype the IR lacks, a graph with no output); one located in
    another file (a `.pt2` program's node at its line of the model's Python source) names `path`
    in its message."""
    located = []
    for d in err.diagnostics:
        if d.span is None:
            d = Diagnostic(d.message, Span(path, 1, 1), d.severity)
        elif d.span.path != path:
            rest = d.message.removeprefix("import: ")
            d = Diagnostic(f"import: {path}: {rest}", d.span, d.severity)
        located.append(d)
    return type(err).from_diagnostics(located)


def as_ir_array(array: np.ndarray) -> np.ndarray:
    """A constant in a dtype the IR has: float64 becomes float32 (the models' compute dtype)."""
    if array.dtype == np.float64:
        return array.astype(np.float32)
    if array.dtype in (np.int8, np.int16, np.uint8):
        return array.astype(np.int32)
    return array


@dataclass
class Draft:
    """A graph under construction. `spans` locate source nodes for error messages."""

    name: str
    inputs: list[Input] = field(default_factory=list)
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    nodes: list[Node] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    types: dict[str, TensorType] = field(default_factory=dict)
    # float32 values of constants that folded through a cast to f16 / bf16 (a half-precision
    # model's rope tables, computed in f32): raising recognises tables by these
    wide: dict[str, np.ndarray] = field(default_factory=dict)
    # float64 values of constants held as float32: torch and ONNX fold float64 arithmetic on
    # constants (Flux's rope tables) in float64, and only the result is narrowed
    doubles: dict[str, np.ndarray] = field(default_factory=dict)
    _counter: int = 0
    _producers: dict[str, Node] = field(default_factory=dict)  # node name -> the node

    def fresh(self, hint: str) -> str:
        """A value name not used yet, starting with `hint`."""
        while True:
            self._counter += 1
            candidate = f"{hint}.{self._counter}"
            if candidate not in self.constants and candidate not in self.weights:
                return candidate

    def constant(self, array: np.ndarray, hint: str = "const") -> str:
        name = self.fresh(hint)
        self.add_constant(name, array)
        return name

    def add_constant(self, name: str, array: np.ndarray) -> None:
        """Constant `name` in an IR dtype (`as_ir_array`); a float64 one keeps its exact value
        in `doubles` for the folds that read it."""
        array = np.asarray(array)
        value = as_ir_array(array)
        # A scalar is stored as [1]: it broadcasts the same, and the planned executor's array
        # checks turn 0-d arrays into [1] ones (np.ascontiguousarray).
        self.constants[name] = value.reshape(1) if value.ndim == 0 else value
        if array.dtype == np.float64:
            self.doubles[name] = array.reshape(1) if array.ndim == 0 else array

    def exact(self, name: str) -> np.ndarray:
        """A constant's value for folding: float64 where it was computed in float64 (the IR
        holds it as float32), else as stored."""
        found = self.doubles.get(name)
        return self.constants[name] if found is None else found

    def node(
        self,
        op: str,
        operands: Sequence[str],
        result: TensorType,
        attrs: Mapping[str, AttrValue] | None = None,
        *,
        name: str | None = None,
        span: Span | None = None,
    ) -> str:
        """Append `name = op(operands) {attrs} : result` and return the name."""
        node_name = name if name is not None else self.fresh("t")
        node = Node(node_name, op, tuple(operands), dict(attrs or {}), result, span=span)
        self.nodes.append(node)
        self._producers[node_name] = node
        self.types[node_name] = result
        return node_name

    def producer(self, name: str) -> Node | None:
        """The node whose result `name` is; None for an input, a weight or a constant."""
        return self._producers.get(name)

    def input(self, name: str, result: TensorType) -> str:
        self.inputs.append(Input(name, result))
        self.types[name] = result
        return name

    def type_of(self, name: str) -> TensorType:
        found = self.types.get(name)
        if found is not None:
            return found
        array = self.constants.get(name, self.weights.get(name))
        if array is None:
            raise KeyError(name)
        return tensor_type(array.dtype, array.shape, name)

    def _weight(self, name: str, array: np.ndarray) -> Weight:
        """The declaration of a weight; a constant of the import at most `INLINE_LIMIT` elements
        carries its value (`ir.constants`), so the graph runs without a weights file."""
        t = tensor_type(array.dtype, array.shape, name)
        value = _inline(t, array) if name in self.constants else None
        return Weight(name, t, value=value)

    def finish(self) -> tuple[Graph, dict[str, np.ndarray]]:
        """The IR graph and its weights (equal constants read under one name); an
        `OptGraphError` listing every unmapped op."""
        nodes = _live_nodes(
            _shared_constants(self.nodes, self.constants, self.outputs), self.outputs
        )
        check_mapped(nodes)
        read = {o for n in nodes for o in n.operands} | set(self.outputs)
        weights = {k: v for k, v in self.weights.items() if k in read}
        weights.update((k, v) for k, v in self.constants.items() if k in read)
        graph = Graph(
            ir_name(self.name),
            tuple(self.inputs),
            tuple(self._weight(k, v) for k, v in weights.items()),
            tuple(nodes),
            tuple(Output(o) for o in self.outputs),
            path=self.name,
        )
        verify(graph)
        return graph, weights


def _inline(t: TensorType, array: np.ndarray) -> bytes | None:
    """A constant's value to write into the graph, when it is small enough (`INLINE_LIMIT`)."""
    return array_bytes(array, t) if t.numel <= INLINE_LIMIT else None


def _shared_constants(
    nodes: Sequence[Node], constants: Mapping[str, np.ndarray], outputs: Sequence[str]
) -> list[Node]:
    """`nodes` reading one name for small constants (at most `SHARED_CONSTANT` elements: literals,
    positions, shape arithmetic) of equal dtype, shape and bytes -- each layer of an export folds
    its own `arange(1)` -- so that `cse` merges the nodes computing the same from them. Larger
    constants (tables, buffers) keep their names. O(nodes + operands)."""
    first: dict[tuple[str, tuple[int, ...], bytes], str] = {}
    same: dict[str, str] = {}
    kept = set(outputs)
    for node in nodes:
        for name in node.operands:
            value = constants.get(name)
            if value is None or value.size > SHARED_CONSTANT or name in same or name in kept:
                continue
            key = (value.dtype.str, value.shape, np.ascontiguousarray(value).tobytes())
            canonical = first.setdefault(key, name)
            if canonical != name:
                same[name] = canonical
    if not same:
        return list(nodes)
    return [
        replace(n, operands=tuple(same.get(o, o) for o in n.operands))
        if any(o in same for o in n.operands)
        else n
        for n in nodes
    ]


def _live_nodes(nodes: Sequence[Node], outputs: Sequence[str]) -> list[Node]:
    needed = set(outputs)
    kept: list[Node] = []
    for node in reversed(nodes):
        if node.name in needed:
            kept.append(node)
            needed.update(node.operands)
    return kept[::-1]


def check_mapped(nodes: Sequence[Node]) -> None:
    """An `OptGraphError` listing every op of `nodes` the IR does not have, if any."""
    unmapped = [n for n in nodes if get_op(n.op) is None]
    if not unmapped:
        return
    counts = Counter(n.op for n in unmapped)
    lines = []
    for op, count in sorted(counts.items()):
        names = [n.name for n in unmapped if n.op == op]
        shown = ", ".join(names[:5]) + (", ..." if len(names) > 5 else "")
        lines.append(f"  {op} ×{count}: {shown}")
    first = unmapped[0]
    raise OptGraphError(
        f"import: {len(counts)} op(s) optgraph cannot map (op ×count: nodes):\n" + "\n".join(lines),
        first.span,
    )
