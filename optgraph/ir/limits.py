"""Limits on sizes and ids that every later stage relies on, checked by `verify`.

Byte counts, offsets and clocks are int64 in NumPy (memory bounds, the arena, happens-before), and
`visible` annotations hold one entry per stream id. A tensor of 2^62 elements or a stream id of
10^11 is a typo or an attack, not a model: `verify` reports it at the declaration instead of letting
a later stage overflow, allocate terabytes or loop over ten billion streams.

    before: input %x : f32[4611686018427387904]     -> OverflowError deep in memory bounds
    after:  model.ir:2:9: error: %x: f32[4611686018427387904] holds
            18,446,744,073,709,551,616 bytes; a tensor may hold at most 281,474,976,710,656 bytes
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from operator import attrgetter

from optgraph.errors import Diagnostic, Span
from optgraph.ir.graph import NO_ANNOTATIONS, Annotations, Graph, Node, TensorType

MAX_TENSOR_BYTES = 1 << 48  # 256 TiB: far above any device or host, far below int64
MAX_GRAPH_BYTES = 1 << 62  # all tensors together: sums of sizes stay within int64
MAX_STREAM_ID = 1023  # streams are CUDA streams; `visible` holds one entry per id
MAX_DEVICE_ID = 1023  # passes keep per-device tables (arenas, clocks) indexed by id
MAX_INTEGER_DIGITS = 30  # an integer literal longer than this cannot be a size, id or attribute


def byte_count(count: int) -> str:
    """`1,099,511,627,776 bytes`; a count too long to read as a number by its power of two."""
    if count.bit_length() > 80:
        return f"about 2^{count.bit_length() - 1} bytes"
    return f"{count:,} bytes"


def _typed_declarations(graph: Graph) -> Iterator[tuple[str, TensorType, Span | None]]:
    for i in graph.inputs:
        yield i.name, i.type, i.span
    for w in graph.weights:
        yield w.name, w.type, w.span
    for node in graph.nodes:
        if node.type is not None:
            yield node.name, node.type, node.span
        if node.body is not None:
            for inner in node.body.nodes:
                if inner.type is not None:
                    yield inner.name, inner.type, inner.span or node.span


def _annotation_diagnostics(ann: Annotations, where: str, span: Span | None) -> list[Diagnostic]:
    out = []
    if ann.stream is not None and ann.stream > MAX_STREAM_ID:
        out.append(
            Diagnostic(
                f"{where}: stream {ann.stream} is above the largest stream id {MAX_STREAM_ID}", span
            )
        )
    if ann.device is not None and max(ann.device) > MAX_DEVICE_ID:
        out.append(
            Diagnostic(
                f"{where}: device {max(ann.device)} is above the largest device id {MAX_DEVICE_ID}",
                span,
            )
        )
    for key in ("offset", "size", "segment", "slot"):
        value = getattr(ann, key)
        if value is not None and value > MAX_GRAPH_BYTES:
            out.append(Diagnostic(f"{where}: annotation '{key}' {value} is out of range", span))
    for key in ("live", "visible"):
        values = getattr(ann, key)
        if values is not None and any(abs(v) > MAX_GRAPH_BYTES for v in values):
            out.append(Diagnostic(f"{where}: annotation '{key}' is out of range", span))
    if ann.visible is not None and len(ann.visible) > (MAX_STREAM_ID + 1) * (MAX_DEVICE_ID + 1):
        # one entry per (device, stream) lane
        out.append(Diagnostic(f"{where}: annotation 'visible' has more entries than lanes", span))
    return out


def _node_where(node: Node) -> str:
    return f"^{node.name}" if node.is_event else f"%{node.name}"


def _is_within_limits(ann: Annotations) -> bool:
    """The quick test `_annotation_diagnostics` makes in full: no annotation beyond a limit."""
    if ann.stream is not None and ann.stream > MAX_STREAM_ID:
        return False
    if ann.device is not None and max(ann.device) > MAX_DEVICE_ID:
        return False
    for value in (ann.offset, ann.size, ann.segment, ann.slot):
        if value is not None and value > MAX_GRAPH_BYTES:
            return False
    for values in (ann.live, ann.visible):
        if values and (max(values) > MAX_GRAPH_BYTES or min(values) < -MAX_GRAPH_BYTES):
            return False
    return ann.visible is None or len(ann.visible) <= (MAX_STREAM_ID + 1) * (MAX_DEVICE_ID + 1)


def _sizes_within_limits(graph: Graph) -> bool:
    """The quick test of the sizes `limit_diagnostics` checks in full: every tensor and their
    sum within the limits. Reads each type object's bytes once (a graph shares a few); the
    counting runs in C (`Counter`, `map`)."""
    types = [i.type for i in graph.inputs] + [w.type for w in graph.weights]
    types += map(_TYPE, graph.nodes)
    for body in filter(None, map(_BODY, graph.nodes)):
        types += map(_TYPE, body.nodes)
    counts = Counter(map(id, types))
    total = 0
    for tensor_type in dict(zip(map(id, types), types)).values():
        if tensor_type is None:
            continue
        nbytes = tensor_type.nbytes
        if nbytes > MAX_TENSOR_BYTES:
            return False
        total += nbytes * counts[id(tensor_type)]
    return total <= MAX_GRAPH_BYTES


_TYPE = attrgetter("type")
_BODY = attrgetter("body")
_ANN = attrgetter("ann")


def limit_diagnostics(graph: Graph) -> list[Diagnostic]:
    """Every tensor, stream id and annotation of `graph` beyond the limits above. O(V): a type's
    bytes are computed once per type object (parsed and derived graphs share them)."""
    if _sizes_within_limits(graph):  # the usual case: only the annotations to check
        return _declaration_annotation_diagnostics(graph) + node_annotation_diagnostics(graph)
    out: list[Diagnostic] = []
    total = 0
    sizes: dict[int, int] = {}  # id(type) -> bytes, for the types alive during this call
    for name, tensor_type, span in _typed_declarations(graph):
        nbytes = sizes.get(id(tensor_type))
        if nbytes is None:
            nbytes = sizes[id(tensor_type)] = tensor_type.nbytes
        total += nbytes
        if nbytes > MAX_TENSOR_BYTES:
            out.append(
                Diagnostic(
                    f"%{name}: {tensor_type} holds {byte_count(nbytes)}; a tensor may hold at "
                    f"most {byte_count(MAX_TENSOR_BYTES)}",
                    span,
                )
            )
    if total > MAX_GRAPH_BYTES and not out:
        out.append(
            Diagnostic(
                f"graph '{graph.name}': its tensors hold {byte_count(total)} together; at most "
                f"{byte_count(MAX_GRAPH_BYTES)}",
                None,
            )
        )
    return out + _declaration_annotation_diagnostics(graph) + node_annotation_diagnostics(graph)


def _declaration_annotation_diagnostics(graph: Graph) -> list[Diagnostic]:
    anns = [i.ann for i in graph.inputs] + [w.ann for w in graph.weights]
    distinct = dict(zip(map(id, anns), anns))  # declarations share annotation objects
    if all(ann is NO_ANNOTATIONS or _is_within_limits(ann) for ann in distinct.values()):
        return []
    out: list[Diagnostic] = []
    for decl in graph.inputs:
        out.extend(_annotation_diagnostics(decl.ann, f"%{decl.name}", decl.span))
    for weight in graph.weights:
        if not _is_within_limits(weight.ann):
            out.extend(_annotation_diagnostics(weight.ann, f"%{weight.name}", weight.span))
    return out


def node_annotation_diagnostics(graph: Graph) -> list[Diagnostic]:
    """The annotations of `graph`'s nodes beyond the limits above. O(V)."""
    anns = list(map(_ANN, graph.nodes))
    distinct = dict(zip(map(id, anns), anns))  # nodes share annotation objects
    if all(ann is NO_ANNOTATIONS or _is_within_limits(ann) for ann in distinct.values()):
        return []
    out: list[Diagnostic] = []
    for node in graph.nodes:
        ann = node.ann
        if ann is not NO_ANNOTATIONS and not _is_within_limits(ann):
            out.extend(_annotation_diagnostics(ann, _node_where(node), node.span))
    return out
