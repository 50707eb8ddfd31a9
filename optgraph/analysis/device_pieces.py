"""The per-device pieces of a graph being split for tensor parallelism, and the graph they make.

`DevicePieces` is what `passes/tensor_parallel.py` writes into while it sweeps the graph: fresh
names (`%v.d<i>`, `%w.s1.d<i>`), nodes placed on one device or all of them, the pieces of each
split value, weights (and KV-cache inputs) cut into pieces (with the `ShardRecipe` of each),
outputs left as their pieces, and the collectives that make a split value whole again:

    replicated("h")   (h split along axis 1 on 2 devices as %h.d0, %h.d1)
    ->  %h = all_gather(%h.d0, %h.d1) {axis = 1, group = [0, 1]} : f32[1,64] !{device = [0, 1]}
    pieces_of("x", Split(1, (64,)))   (x replicated)
    ->  %x.d0 = slice(%x) {axis = 1, end = 32, start = 0} !{device = 0}   (and %x.d1)

Which nodes split and how (the rules) is the pass's; the layouts are `analysis/tensor_shards`'.
Complexity: O(1) per name and per node written, O(ways) per piece set.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from optgraph.analysis.tensor_shards import PieceLayout, ShardRecipe, Split, stored_segments
from optgraph.errors import Span, VerifyError
from optgraph.ir.graph import QUANT_BLOCKS, AttrValue, Graph, Input, Node, Output, Weight
from optgraph.ir.names import fresh_name

Attrs = Mapping[str, AttrValue]


class DevicePieces:
    """The nodes written so far for `ways` devices, and where each value's pieces are."""

    def __init__(self, graph: Graph, ways: int) -> None:
        self.graph, self.ways = graph, ways
        self.everywhere = tuple(range(ways))
        self.types = graph.value_types()
        self.weights = {w.name: w for w in graph.weights}
        self.inputs = {i.name: i for i in graph.inputs}
        self.taken = set(self.types)
        self.has_replica = set(graph.input_names())  # values whose own name exists on every device
        self.pieces: dict[str, tuple[Split, tuple[str, ...]]] = {}
        self.nodes: list[Node] = []
        self.weight_pieces: dict[tuple[str, int, tuple[int, ...]], tuple[str, ...]] = {}
        self.recipes: dict[str, ShardRecipe] = {}
        self.replicated_weights: set[str] = set()
        self.cut_weights: dict[str, list[Weight]] = {}
        self.cut_inputs: dict[str, list[Input]] = {}
        self.split_outputs: dict[str, tuple[Split, tuple[str, ...]]] = {}

    def fresh(self, name: str) -> str:
        return fresh_name(name, self.taken)

    def emit(self, node: Node, devices: tuple[int, ...]) -> None:
        self.nodes.append(replace(node, ann=replace(node.ann, device=devices)))

    def replicated(self, value: str, span: Span | None) -> str:
        """`value` readable on every device: a weight or input as is, a split value gathered."""
        if value in self.weights:
            self.replicated_weights.add(value)
            return value
        if value in self.has_replica:
            return value
        split, names = self.pieces[value]
        if len(split.segments) > 1:
            raise VerifyError(
                f"tensor-parallel: %{value} is split in {len(split.segments)} segments along axis "
                f"{split.axis} and is read whole: read it through slices of one segment each",
                span,
            )
        gather = Node(value, "all_gather", names, {"axis": split.axis, "group": self.everywhere},
                      self.types[value], span=span)  # fmt: skip
        self.emit(gather, self.everywhere)
        self.has_replica.add(value)
        return value

    def can_piece(self, value: str, split: Split) -> bool:
        have = self.pieces.get(value)
        if (have is not None and have[0] == split) or value in self.weights:
            return True
        return value in self.has_replica and len(split.segments) == 1

    def pieces_of(self, value: str, split: Split) -> tuple[str, ...]:
        """Per-device names of `value` under `split` (`_can_piece` holds): its own pieces, a
        weight cut at compile time, or a replicated value sliced on each device."""
        have = self.pieces.get(value)
        if have is not None and have[0] == split:
            return have[1]
        if value in self.weights:
            return self.weightpieces_of(value, split)
        chunk = split.segments[0] // self.ways
        bounds = [(i * chunk, (i + 1) * chunk) for i in range(self.ways)]
        names = self.slices(value, split.axis, bounds)
        self.pieces[value] = (split, names)
        return names

    def slices(self, value: str, axis: int, bounds: list[tuple[int, int]]) -> tuple[str, ...]:
        """`slice(value)` on each device i, [start, end) = bounds[i] along `axis`."""
        names = []
        for i, (start, end) in enumerate(bounds):
            t = self.types[value]
            local = t.with_shape(end - start if k == axis else d for k, d in enumerate(t.shape))
            name = self.fresh(f"{value}.d{i}")
            attrs = {"axis": axis, "end": end, "start": start}
            self.emit(Node(name, "slice", (value,), attrs, local), (i,))
            names.append(name)
        return tuple(names)

    def weightpieces_of(self, weight: str, split: Split) -> tuple[str, ...]:
        key = (weight, split.axis, split.segments)
        if key not in self.weight_pieces:
            family = sum(1 for k in self.weight_pieces if k[0] == weight)
            stem = weight if family == 0 else f"{weight}.s{family}"
            names = tuple(self.fresh(f"{stem}.d{i}") for i in range(self.ways))
            source = self.weights[weight]
            local = split.local_type(source.type, self.ways)
            stored = stored_segments(source.type, split, self.ways)
            if stored is None:
                raise VerifyError(
                    f"tensor-parallel: {self.ways} devices would cut quantized weight "
                    f"%{weight} {source.type} along its last dimension into chunks of "
                    f"{local.shape[-1]}, inside its {QUANT_BLOCKS[source.type.dtype][0]}-element "
                    "blocks",
                    source.span,
                )
            for i, name in enumerate(names):
                self.recipes[name] = ShardRecipe(weight, split.axis, stored, i, self.ways)
                piece = replace(source, name=name, type=local, ann=replace(source.ann, device=(i,)))
                self.cut_weights.setdefault(weight, []).append(piece)
            self.weight_pieces[key] = names
        return self.weight_pieces[key]

    def inputpieces_of(self, value: str, split: Split) -> tuple[str, ...]:
        """Input `value` cut into per-device input pieces `%value.d<i>` (device i holds its chunk
        only; the user's whole array is cut by their recipes): its own name then exists nowhere."""
        source = self.inputs[value]
        local = split.local_type(source.type, self.ways)
        names = tuple(self.fresh(f"{value}.d{i}") for i in range(self.ways))
        for i, name in enumerate(names):
            self.recipes[name] = ShardRecipe(value, split.axis, split.segments, i, self.ways)
            piece = replace(source, name=name, type=local, ann=replace(source.ann, device=(i,)))
            self.cut_inputs.setdefault(value, []).append(piece)
        self.has_replica.discard(value)
        self.pieces[value] = (split, names)
        return names

    def output_pieces(self, value: str) -> None:
        """Output `value` as its pieces (`%v.d0`, ...), joined for the user by `layout().joins`."""
        self.split_outputs[value] = self.pieces[value]

    def layout(self) -> PieceLayout:
        return PieceLayout(dict(self.recipes), dict(self.split_outputs))

    def emit_split(
        self, node: Node, split: Split, operands: list[tuple[str, ...]], attrs: list[Attrs] | None
    ) -> None:
        """One piece of `node` per device: operand lists per device, attributes per device."""
        assert node.type is not None
        local = split.local_type(node.type, self.ways)
        names = []
        for i in range(self.ways):
            name = self.fresh(f"{node.name}.d{i}")
            mine = node.attrs if attrs is None else attrs[i]
            piece = Node(name, node.op, operands[i], mine, local, span=node.span,
                         operand_spans=node.operand_spans)  # fmt: skip
            self.emit(piece, (i,))
            names.append(name)
        self.pieces[node.name] = (split, tuple(names))

    def per_device(self, names: list[str | tuple[str, ...]]) -> list[tuple[str, ...]]:
        """Operand lists per device from, per operand, one replicated name or per-device names."""
        return [tuple(n if isinstance(n, str) else n[i] for n in names) for i in range(self.ways)]

    def split_of(self, value: str) -> Split | None:
        """The layout of `value`'s pieces, None where it has none (replicated or not yet seen)."""
        have = self.pieces.get(value)
        return None if have is None else have[0]

    def assembled(self) -> Graph:
        """The graph of the nodes written so far: each input everywhere or cut into its pieces,
        each weight replicated and/or cut into the pieces the nodes read, each output whole or
        as its pieces."""
        inputs: list[Input] = []
        for given in self.graph.inputs:
            pieces = self.cut_inputs.get(given.name)
            everywhere = replace(given, ann=replace(given.ann, device=self.everywhere))
            inputs += [everywhere] if pieces is None else pieces
        outputs: list[Output] = []
        for output in self.graph.outputs:
            split = self.split_outputs.get(output.name)
            names = (output.name,) if split is None else split[1]
            outputs += [Output(name, output.span) for name in names]
        weights: list[Weight] = []
        for weight in self.graph.weights:
            if weight.name in self.replicated_weights:
                weights.append(replace(weight, ann=replace(weight.ann, device=self.everywhere)))
            weights += self.cut_weights.get(weight.name, [])
        return replace(self.graph, inputs=tuple(inputs), weights=tuple(weights),
                       nodes=tuple(self.nodes), outputs=tuple(outputs))  # fmt: skip
