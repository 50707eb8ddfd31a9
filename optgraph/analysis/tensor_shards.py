"""How values split across devices for tensor parallelism: layouts and the rules that move them.

A value of a tensor-parallel graph is either replicated (every device holds all of it) or a
`Split`: along one `axis`, cut into `segments` (global lengths, in order), each segment cut into
`ways` equal chunks, device i holding chunk i of every segment, concatenated. A plain column split
has one segment; a fused q|k|v projection `[hidden, 3*d]` whose result is sliced into q, k and v has
three, so each device holds its heads of q, of k and of v, and the slices stay local:

    qkv : f32[8,192]  Split(axis=1, segments=(64, 64, 64)), ways 2  ->  device i: f32[8,96]
    slice(qkv) {axis = 1, start = 64, end = 128}  ->  Split(1, (64,)), local start 32, end 64

The rules here are pure functions of shapes and attributes (`tensor-parallel` applies them node
by node); a rule returns None where the split cannot pass through the op, and the pass then
gathers the value or reports the node.

- `split_demand`: the values whose producer should split (a backward sweep from attention
  operands, row-parallel matmul inputs and graph outputs through ops that keep a split);
- `splittable_caches`: the KV-cache inputs a split may cut by KV head;
- `slice_bounds`: per value, the cut points slices take along its last axis (the segments);
- `view_split` (`reshape_split`, `transpose_split`, `slice_split`) and `aligned_axis`: layouts
  through views and broadcasting;
- `ShardRecipe`: how a weight or input piece is cut from the user's array; `PieceLayout`: every
  recipe of a split graph and how its split outputs join (`Split.join`).

Complexity: `split_demand` and `slice_bounds` are O(V + E); each rule is O(rank).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from optgraph.errors import PipelineError
from optgraph.ir.graph import QUANT_BLOCKS, AttrValue, Graph, Input, Node, TensorType, Weight
from optgraph.ir.ops import attrs_with_defaults, get_op

if TYPE_CHECKING:  # `optgraph passes` and the other light commands load no NumPy
    import numpy as np


@dataclass(frozen=True)
class Split:
    """Split along `axis` into `segments` (global lengths), each cut in `ways` equal chunks."""

    axis: int
    segments: tuple[int, ...]

    def local_type(self, t: TensorType, ways: int) -> TensorType:
        """The type of one device's piece of a value of global type `t`."""
        return t.with_shape(d // ways if i == self.axis else d for i, d in enumerate(t.shape))

    def chunk_bounds(self, index: int, ways: int) -> list[tuple[int, int]]:
        """The global [start, end) ranges along `axis` that device `index` holds, in order."""
        bounds, start = [], 0
        for length in self.segments:
            chunk = length // ways
            bounds.append((start + index * chunk, start + (index + 1) * chunk))
            start += length
        return bounds

    def is_even(self, ways: int) -> bool:
        return all(length % ways == 0 and length > 0 for length in self.segments)

    def join(self, pieces: Sequence[np.ndarray]) -> np.ndarray:
        """The whole value from its pieces (device order): for each segment, every device's
        chunk of it in turn, the inverse of `ShardRecipe.cut`."""
        import numpy as np  # here, not at the top: `optgraph passes` loads no NumPy

        ways = len(pieces)
        parts, start = [], 0
        for length in self.segments:
            chunk = length // ways
            window = [slice(None)] * pieces[0].ndim
            window[self.axis] = slice(start, start + chunk)
            parts += [piece[tuple(window)] for piece in pieces]
            start += chunk
        return np.concatenate(parts, axis=self.axis)


def stored_segments(t: TensorType, split: Split, ways: int) -> tuple[int, ...] | None:
    """The segments of `split` as `ShardRecipe` cuts the array holding a value of type `t`: the
    same, but for a quantized type split along its last axis, whose array holds blocks of bytes
    there: the segments in bytes, or None where a device's chunk would end inside a block."""
    if not t.is_quantized or split.axis != t.rank - 1:
        return split.segments
    elems, size = QUANT_BLOCKS[t.dtype]
    if any((length // ways) % elems for length in split.segments):
        return None
    return tuple(length // elems * size for length in split.segments)


# Ops whose result keeps the split of the operand named here (operand index), used by the demand
# sweep: elementwise ops are handled by category.
_CARRIERS: Mapping[str, tuple[int, ...]] = {
    "reshape": (0,),
    "transpose": (0,),
    "slice": (0,),
    "rope": (0,),
    "kv_cache_write": (0, 1),
    "cast": (0,),
}


def _weight_matmul(node: Node, weights: frozenset[str]) -> bool:
    return node.op == "matmul" and node.operands[1] in weights


def int_attr(attrs: Mapping[str, AttrValue], key: str) -> int:
    value = attrs[key]
    assert isinstance(value, int)
    return value


def split_demand(graph: Graph, ways: int, outputs: bool = True) -> set[str]:
    """Values that are better split than replicated: read by attention (q; k and v where `ways`
    divides the KV heads, else each device reads its KV head from a replicated k and v), by a
    matmul with a weight as its left operand (row-parallel: a split input needs no gather), or a
    graph output (the vocabulary-split logits head), and what reaches those through ops that keep
    a split. Without `outputs`, only what attention and row-parallel matmuls want."""
    weights = graph.weight_names()
    types = graph.value_types()
    results = set(graph.output_names()) if outputs else set()
    wanted = {  # the logits head, not a KV cache that attention does not split
        n.name for n in graph.nodes if n.name in results and n.op != "kv_cache_write"
    }
    for node in reversed(graph.nodes):
        if node.is_event:
            continue
        category = getattr(get_op(node.op), "category", "")
        if node.op == "attention":
            kv_heads = types[node.operands[1]].shape[1]
            wanted.update(node.operands[: 1 if kv_heads % ways else 3])
        elif _weight_matmul(node, weights):
            wanted.add(node.operands[0])
        elif node.name in wanted:
            if category == "elementwise":
                wanted.update(node.operands)
            else:
                wanted.update(node.operands[i] for i in _CARRIERS.get(node.op, ()))
    return wanted


def splittable_caches(graph: Graph, ways: int) -> frozenset[str]:
    """KV-cache inputs a split may cut by KV head: inputs read once, as the cache (operand 0) of
    a `kv_cache_write`, not outputs themselves, whose head axis (1, `[B,kv_heads,len,D]`) `ways`
    divides. Whether the new rows arrive split by head is the pass's to see."""
    users = graph.users()
    outputs = set(graph.output_names())
    caches = set()
    for given in graph.inputs:
        uses = users.get(given.name, [])
        if len(uses) != 1 or given.name in outputs or given.type.rank != 4:
            continue
        node = graph.nodes[uses[0]]
        is_cache = node.op == "kv_cache_write" and node.operands.index(given.name) == 0
        if is_cache and given.type.shape[1] % ways == 0:
            caches.add(given.name)
    return frozenset(caches)


def slice_bounds(graph: Graph) -> dict[str, set[int]]:
    """For each value, the positions along its last axis where slices of it (or of same-shaped
    elementwise results of it, such as a bias add) start or end."""
    types = graph.value_types()
    bounds: dict[str, set[int]] = {}
    for node in reversed(graph.nodes):
        if node.is_event or node.type is None:
            continue
        category = getattr(get_op(node.op), "category", "")
        if node.op == "slice":
            source = types[node.operands[0]]
            attrs = attrs_with_defaults(node)
            axis = int_attr(attrs, "axis") % source.rank
            if axis == source.rank - 1:
                mine = bounds.setdefault(node.operands[0], set())
                mine.update((int_attr(attrs, "start"), int_attr(attrs, "end")))
        elif category == "elementwise" and node.name in bounds:
            for operand in node.operands:
                if operand in types and types[operand].shape == node.type.shape:
                    bounds.setdefault(operand, set()).update(bounds[node.name])
    return bounds


def segments_of(length: int, cuts: set[int] | None) -> tuple[int, ...]:
    """The segment lengths of an axis of `length` cut at `cuts` (clipped to the axis)."""
    points = sorted({0, length, *(c for c in (cuts or ()) if 0 < c < length)})
    return tuple(b - a for a, b in itertools.pairwise(points))


def aligned_axis(axis: int, result_rank: int, operand: TensorType) -> int | None:
    """The operand axis that broadcasting lines up with the result's `axis`; None where the
    operand has no such axis or it has length 1 (it broadcasts, so every device reads it all)."""
    k = axis - (result_rank - operand.rank)
    if k < 0 or operand.shape[k] == 1:
        return None
    return k


def transpose_split(split: Split, perm: Sequence[int]) -> Split:
    return Split(list(perm).index(split.axis), split.segments)


def slice_split(
    split: Split, source: TensorType, axis: int, start: int, end: int, ways: int
) -> tuple[Split, int, int] | None:
    """(result split, local start, local end) of a slice of a split value; None where the slice
    does not take whole segments of the split axis."""
    axis %= source.rank
    if axis != split.axis:
        return split, start, end
    points = [0]
    for length in split.segments:
        points.append(points[-1] + length)
    if start not in points or end not in points or end <= start:
        return None
    i, j = points.index(start), points.index(end)
    local = [length // ways for length in split.segments]
    return Split(axis, split.segments[i:j]), sum(local[:i]), sum(local[:j])


def reshape_split(
    split: Split, source: TensorType, shape: Sequence[int], ways: int
) -> tuple[Split, tuple[int, ...]] | None:
    """(result split, local shape) of a reshape of a split value; None where the chunks are not
    whole blocks of the new shape (a head cut in two, a split axis merged under another).

    The split axis must keep its outer product (the elements before it) and either expand into
    several axes of which it is the outermost ([T, H*D] -> [B, S, H, D], split on H) or merge
    with the axes after it ([B, S, H, D] -> [T, H*D])."""
    a = split.axis
    outer = math.prod(source.shape[:a])
    prefix, b = 1, 0
    while b < len(shape) and prefix < outer:
        prefix *= shape[b]
        b += 1
    length = source.shape[a]
    while b < len(shape) - 1 and shape[b] == 1 and length > 1:  # size-1 axes move nothing
        b += 1
    if prefix != outer or b == len(shape):
        return None
    if shape[b] <= length:  # the axis expands into shape[b:e] (or stays)
        inner, e = 1, b + 1
        while e < len(shape) and shape[b] * inner < length:
            inner *= shape[e]
            e += 1
        if shape[b] * inner != length or any((s // ways) % inner for s in split.segments):
            return None
        result = Split(b, tuple(s // inner for s in split.segments))
    else:  # axis a merges with the axes after it into shape[b]
        inner, e = 1, a + 1
        while e < source.rank and length * inner < shape[b]:
            inner *= source.shape[e]
            e += 1
        if length * inner != shape[b]:
            return None
        result = Split(b, tuple(s * inner for s in split.segments))
    local = tuple(d // ways if i == b else d for i, d in enumerate(shape))
    return result, local


@dataclass(frozen=True)
class ShardRecipe:
    """How one weight or input piece is cut from the user's array `source`: device `index` of
    `ways` takes its chunk of every segment along `axis`."""

    source: str
    axis: int
    segments: tuple[int, ...]
    index: int
    ways: int

    def cut(self, array: np.ndarray) -> np.ndarray:
        """This piece of the user's `array` (a new contiguous array)."""
        split = Split(self.axis, self.segments)
        rows = [
            i for start, end in split.chunk_bounds(self.index, self.ways) for i in range(start, end)
        ]
        piece: np.ndarray = array.take(rows, axis=self.axis)
        return piece


@dataclass(frozen=True)
class PieceLayout:
    """What a split graph names in place of the user's arrays: `recipes` cut each weight or input
    piece from the user's array (`ShardRecipe.source`); `joins` make each split output whole
    again, source output name -> (its split, the piece outputs in device order)."""

    recipes: Mapping[str, ShardRecipe]
    joins: Mapping[str, tuple[Split, tuple[str, ...]]]

    def cut(
        self, decls: Sequence[Input | Weight], arrays: Mapping[str, np.ndarray], kind: str
    ) -> dict[str, np.ndarray]:
        """The array of each of `decls` (a split graph's inputs or weights): given by name, else
        cut by its recipe from the user's array. Cost: one copy of each piece cut."""
        out: dict[str, np.ndarray] = {}
        for decl in decls:
            recipe = self.recipes.get(decl.name)
            if decl.name in arrays:
                out[decl.name] = arrays[decl.name]
            elif recipe is not None and recipe.source in arrays:
                out[decl.name] = recipe.cut(arrays[recipe.source])
            else:
                source = "" if recipe is None else f" (a piece of %{recipe.source}, not given)"
                raise PipelineError(
                    f"shard_{kind}s: no array and no recipe for {kind} %{decl.name}{source} "
                    "(was the graph split from this graph?)"
                )
        return out

    def join(
        self, names: Sequence[str], outputs: Mapping[str, np.ndarray]
    ) -> dict[str, np.ndarray]:
        """The source outputs `names` from a split graph's `outputs`: each split one joined from
        its pieces, the others as they are."""
        joined = {}
        for name in names:
            join = self.joins.get(name)
            if join is None:
                joined[name] = outputs[name]
            else:
                joined[name] = join[0].join([outputs[piece] for piece in join[1]])
        return joined


def view_split(
    node: Node, split: Split, source: TensorType, ways: int
) -> tuple[Split, dict[str, AttrValue]] | None:
    """(result split, attributes of each piece) of a reshape, transpose or slice of a split value;
    None where the split cannot pass through it."""
    attrs = attrs_with_defaults(node)
    mine: dict[str, AttrValue] = dict(node.attrs)
    if node.op == "transpose":
        perm = attrs["perm"]
        assert isinstance(perm, tuple)
        return transpose_split(split, perm), mine
    if node.op == "reshape":
        shape = attrs["shape"]
        assert isinstance(shape, tuple)
        moved = reshape_split(split, source, shape, ways)
        if moved is None:
            return None
        result, mine["shape"] = moved
        return result, mine
    axis, start, end = (int_attr(attrs, k) for k in ("axis", "start", "end"))
    cut = slice_split(split, source, axis, start, end, ways)
    if cut is None:
        return None
    result, mine["start"], mine["end"] = cut
    return result, mine
