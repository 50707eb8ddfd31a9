"""A decode layer's q, k and v products that do the rope and the KV-cache writes themselves.

After the q/k/v products (one merged launch), a decode layer runs rope(q), rope(k) and the two
cache writes (another launch, `rope_cache_writes`) before attention. When a one-row product's
only reader is a rope, a cache write, or a rope whose only reader is a cache write, the
product's store loop does that work (`epilogues`) and those nodes issue nothing: a
layer's q/k/v work is one launch.

    %q = fused(%h, %g, %wq)  %q_rot = rope(%q4, %pos)      -> the q product stores rope(q) in
                                                              %q's bytes; %q_rot lives there
    %k = fused(%h, %g, %wk)  %k_rot = rope(%k4, %pos)
    %kc = kv_cache_write(%k_cache, %k_t, %pos)             -> the k product writes rope(k) rows
    %v = fused(%h, %g, %wv)  %vc = kv_cache_write(...)     -> the v product writes its rows

Legality:
- every fold: a one-row product kernel (fused region without epilogue, or a plain matmul)
  whose result and its views have exactly the one reader named, none of them an output, on the
  same stream and backend; rope with full rotary; the product's layout can hold rope's column
  pairs in one tile (`epilogues.pairing`);
- the positions (rope's, the write's) computed before the product is issued, on its stream;
- a cache write: in place (`in_place_outputs`: nothing else reads the cache input, so writing
  its rows at the product's place instead of the write's changes what no one reads), the new
  rows the product's (or its rope's) result or a view of it at offset 0 in the same order;
- q (a rope whose result others read): the rotated value takes the product's bytes, so those
  bytes must stay the product's until the rope's last reader: on a graph of one stream, no
  value placed over them is produced between the product and that reader (unplanned graphs:
  every value has its own buffer). Else it takes the rope's own bytes from the product's place
  on, when no node from the product up to the rope reads or writes them (an imported layer
  computes q, k and v before the ropes: k's rotated value may sit over q's bytes).

`product_folds(graph, locations, in_place)` finds them; `fold_step` is a product's launch.
Not handled: partial rotary, products with an epilogue (a bias), several streams for q.

Complexity: O(V + E) to index the graph once (views by root, issue order, users), then each
product's checks look at its readers and at the nodes between it and its rope's last reader.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace

from optgraph.codegen.cuda_source import Kernel, Launch
from optgraph.codegen.decode.rope_cache_writes import IssueOrder
from optgraph.codegen.kernels.one_row import product_kernel
from optgraph.codegen.kernels.one_row.epilogues import OneRowFold, is_full_rotary
from optgraph.codegen.plan.in_place_outputs import unwritten_inputs
from optgraph.codegen.plan.steps import DecodeRewrite, Extent, KernelStep, Location
from optgraph.ir.graph import Graph, Node, TensorType
from optgraph.ir.layout import alias_roots, alias_views

# q/k/v products do rope and the cache writes in their store (one launch fewer a layer than
# `rope_cache_writes` alone); False: the rope and write nodes issue their own kernels.
FOLD_QKV = True


@dataclass(frozen=True)
class ProductFold:
    """A product and the nodes its kernel does the work of (they issue nothing)."""

    product: Node
    rope: Node | None
    write: Node | None
    launch: Launch
    in_rope_bytes: bool = False  # q: the rotated value goes to the rope's bytes, not the product's

    @property
    def absorbed(self) -> tuple[str, ...]:
        return tuple(n.name for n in (self.rope, self.write) if n is not None)

    def taken(self, kernel: str) -> DecodeRewrite:
        """This fold as the lowered plan text lists it, `kernel` the product's launch's:

        q: DecodeRewrite("qkv_folds", "q", "og_gemv_<hash>", ("q_rot",),
                         "rope in the product's store, the rotated value in %q's bytes")
        """
        if self.rope is not None and self.write is not None:
            note = "rope and the cache write in the product's store"
        elif self.write is not None:
            note = "the cache write in the product's store"
        else:
            assert self.rope is not None
            home = self.rope if self.in_rope_bytes else self.product
            note = f"rope in the product's store, the rotated value in %{home.name}'s bytes"
        return DecodeRewrite("qkv_folds", self.product.name, kernel, self.absorbed, note)


class _Graph:
    """What the legality checks read, computed once per graph."""

    def __init__(self, graph: Graph, locations: Mapping[str, Location]):
        self.graph = graph
        self.roots = alias_roots(graph)
        self.by_name = {n.name: n for n in graph.nodes}
        self.index = {n.name: i for i, n in enumerate(graph.nodes)}
        self.users = graph.users()
        self.outputs = set(graph.output_names())
        self.types = graph.value_types()
        self.locations = locations
        self.views_of = alias_views(graph)
        self.one_stream = len({n.stream for n in graph.nodes if not n.is_event}) == 1
        self.order = IssueOrder(graph)

    def views(self, name: str) -> set[str]:
        return {name} | {view for view, _ in self.views_of.get(name, [])}

    def readers(self, name: str) -> set[str]:
        """Non-view nodes reading `name` or a view of it; an output counts as a reader."""
        views = self.views(name)
        found = {self.graph.nodes[u].name for v in views for u in self.users.get(v, [])}
        return (found - views) | ({"#output"} if views & self.outputs else set())

    def view_of(self, value: str, root: str) -> bool:
        return value == root or self.roots.get(value) == (root, 0)

    def bytes_kept(self, product: Node, rope: Node) -> bool:
        """Whether `product`'s bytes may hold the rotated value until its last reader."""
        if not self.one_stream:
            return False
        where = self.locations[product.name]
        if where.space not in ("arena", "value"):
            return False
        mine = Extent(where.space, where.key, where.offset, self.types[product.name].nbytes)
        views = self.views(rope.name)
        last = max((u for v in views for u in self.users.get(v, [])), default=-1)
        if last < 0:
            return False  # read by no node (an unoptimized graph): nothing to gain
        for node in self.graph.nodes[self.index[product.name] + 1 : last + 1]:
            if node.is_event or node.name in self.roots or node.name not in self.locations:
                continue
            if node is rope:
                continue  # folded: it writes nothing
            loc = self.locations[node.name]
            if node.type is not None and mine.overlaps(
                Extent(loc.space, loc.key, loc.offset, node.type.nbytes)
            ):
                return False
        return True

    def rope_bytes_free(self, product: Node, rope: Node) -> bool:
        """Whether the rope's own bytes may take the rotated value from the product's place
        on: no node from the product up to the rope reads or writes any of them."""
        where = self.locations.get(rope.name)
        if not self.one_stream or where is None or where.space not in ("arena", "value"):
            return False
        theirs = Extent(where.space, where.key, where.offset, self.types[rope.name].nbytes)
        for node in self.graph.nodes[self.index[product.name] : self.index[rope.name]]:
            if node.is_event:
                continue
            touched = node.operands if node is product else (node.name, *node.operands)
            for value in touched:
                loc = self.locations.get(value)
                if loc is not None and theirs.overlaps(
                    Extent(loc.space, loc.key, loc.offset, self.types[value].nbytes)
                ):
                    return False
        return True


def rope_read_products(graph: Graph) -> frozenset[str]:
    """The values a full-rotary rope reads (directly or through a view at offset 0): where one
    is a one-row product, its kernel takes the layout a fold of that rope needs (an even number
    of column threads a tile, `geometry.layout(even=True)`) whether or not the rope is
    folded, so that a plan that folds it and one that cannot (several streams: a plan that
    streams weights) sum the product in the same order and give the same bits. O(V).

        %k = matmul(%x, %wk) : f16[1,512]  %k4 = reshape(%k)  %kr = rope(%k4, %pos)  -> {"k"}
    """
    roots = alias_roots(graph)
    types = graph.value_types()
    found: set[str] = set()
    for node in graph.nodes:
        if node.op != "rope" or not node.operands:
            continue
        x = node.operands[0]
        root, offset = roots.get(x, (x, 0))
        t = types[x]
        if offset == 0 and t.rank == 4 and is_full_rotary(node, t.shape[-1]):
            found.add(root)
    return frozenset(found)


def product_folds(
    graph: Graph,
    locations: Mapping[str, Location],
    in_place: Mapping[str, str],
    most_splits: Mapping[str, int] | None = None,
) -> dict[str, ProductFold]:
    """{product name: its fold} for every product whose kernel can do its readers' work;
    `most_splits`: products' split counts at most (`codegen/plan/sibling_splits.py`)."""
    if not FOLD_QKV:
        return {}
    g = _Graph(graph, locations)
    folds: dict[str, ProductFold] = {}
    for node in graph.nodes:
        if node.op not in ("fused", "matmul") or node.type is None:
            continue
        found = _fold_of(g, node, in_place, (most_splits or {}).get(node.name))
        if found is not None:
            folds[node.name] = found
    return folds


def _same_place(a: Node, b: Node) -> bool:
    return a.stream == b.stream and a.ann.backend == b.ann.backend


def _fold_of(
    g: _Graph, product: Node, in_place: Mapping[str, str], most_splits: int | None = None
) -> ProductFold | None:
    readers = g.readers(product.name)
    if len(readers) != 1 or "#output" in readers:
        return None
    reader = g.by_name[next(iter(readers))]
    if not _same_place(product, reader) or product.type is None:
        return None
    rope = write = None
    in_rope_bytes = False
    if reader.op == "rope" and g.view_of(reader.operands[0], product.name):
        rope = reader
        after = g.readers(rope.name)
        if "#output" in after:
            return None
        if len(after) == 1:
            candidate = g.by_name[next(iter(after))]
            if _is_write_of(g, candidate, rope.name, in_place) and _same_place(rope, candidate):
                write = candidate
        if write is None and not g.bytes_kept(product, rope):
            in_rope_bytes = g.rope_bytes_free(product, rope)
            if not in_rope_bytes:
                return None
    elif _is_write_of(g, reader, product.name, in_place):
        write = reader
    else:
        return None
    extra = ([rope.operands[1]] if rope is not None else []) + (
        [write.operands[2]] if write is not None else []
    )
    if not all(g.order.ready(value, product) for value in extra):
        return None  # a position computed after the product: not readable at its place
    fold = _one_row_fold(g, product, rope, write)
    if fold is None:
        return None
    if rope is not None:  # a position no kernel writes: its rope factors before the PDL wait
        fold = replace(fold, pos_is_input=rope.operands[1] in unwritten_inputs(g.graph, in_place))
    types = tuple(g.types[o] for o in product.operands)
    resident = frozenset(
        k for k, o in enumerate(product.operands) if g.locations[o].space == "weights"
    )
    if product.op == "fused":
        launches = product_kernel.one_row_region(product, types, resident, fold, False, most_splits)
    else:
        launches = product_kernel.one_row_matmul(product, types, resident, fold, False, most_splits)
    if not launches:
        return None
    return ProductFold(product, rope, write, launches[0], in_rope_bytes)


def _is_write_of(g: _Graph, node: Node, source: str, in_place: Mapping[str, str]) -> bool:
    """Whether `node` is an in-place cache write whose new rows are `source`'s, in order."""
    if node.op != "kv_cache_write" or node.name not in in_place or len(node.operands) != 3:
        return False
    if not g.view_of(node.operands[1], source) or node.operands[1] == node.operands[0]:
        return False
    new, cache = g.types[node.operands[1]], g.types[node.operands[0]]
    return (
        new.rank == cache.rank == 4
        and new.dtype == cache.dtype
        and new.shape[-1] == cache.shape[-1]
        and new.shape[:2] == cache.shape[:2]
    )


def _one_row_fold(
    g: _Graph, product: Node, rope: Node | None, write: Node | None
) -> OneRowFold | None:
    assert product.type is not None
    if rope is not None:
        x = g.types[rope.operands[0]]
        if x.rank != 4 or x.numel != product.type.numel or x.dtype != product.type.dtype:
            return None
        if not is_full_rotary(rope, x.shape[-1]):
            return None
        head, seq, pos = x.shape[-1], x.shape[1], g.types[rope.operands[1]].dtype
    else:
        head, seq, pos = 0, 1, "i32"
    cache = None
    write_pos = "i32"
    if write is not None:
        new, kv = g.types[write.operands[1]], g.types[write.operands[0]]
        if new.numel != product.type.numel or (rope is not None and new.shape[-1] != head):
            return None
        head = new.shape[-1]
        cache = (kv.shape[2], new.shape[2])
        write_pos = g.types[write.operands[2]].dtype
    return OneRowFold(head, rope, seq, cache, pos, write_pos)


def fold_step(
    fold: ProductFold, locations: Mapping[str, Location], types: Mapping[str, TensorType]
) -> tuple[KernelStep, Kernel]:
    """The product's launch: it reads its operands and the positions, and writes its own bytes
    (q: the rotated value) or the cache (k, v: the write's result, the input's bytes)."""
    product, rope, write = fold.product, fold.rope, fold.write
    extra = [rope.operands[1]] if rope is not None else []
    extra += [write.operands[2]] if write is not None else []
    values = [*product.operands, *extra]
    target = write.name if write is not None else product.name
    roles = {"out": locations[target]}
    roles.update((f"in{k}", locations[v]) for k, v in enumerate(values))
    args = tuple(roles[r] for r in fold.launch.args)
    reads = tuple(Extent.of(locations[v], types[v].nbytes) for v in values)
    writes = (Extent.of(locations[target], types[target].nbytes),)
    launch = fold.launch
    step = KernelStep(
        product.name, product.stream, launch.kernel.name, launch.grid, launch.block, 0, args,
        reads, writes,
    )  # fmt: skip
    return step, launch.kernel


def place_folds(
    graph: Graph,
    locations: dict[str, Location],
    in_place: Mapping[str, str],
    most_splits: Mapping[str, int] | None = None,
) -> tuple[dict[str, ProductFold], set[str]]:
    """(folds by product, the nodes they absorb); a q fold's rope result (and its views) now
    lives in the product's bytes, in `locations` -- or, where values placed over the product's
    bytes come before the rope's last reader, the product (and its views) writes into the
    rope's bytes instead. `most_splits`: see `product_folds`."""
    folds = product_folds(graph, locations, in_place, most_splits)
    views = alias_views(graph)
    for fold in folds.values():
        if fold.rope is None or fold.write is not None:
            continue
        moved, kept = (fold.product, fold.rope) if fold.in_rope_bytes else (fold.rope, fold.product)
        home = locations[kept.name]
        locations[moved.name] = home
        for view, offset in views.get(moved.name, []):
            locations[view] = home.shifted(offset)
    return folds, {name for fold in folds.values() for name in fold.absorbed}
