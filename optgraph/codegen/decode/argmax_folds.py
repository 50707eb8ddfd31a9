"""An argmax and its cast done by fewer kernels: the argmax's store casts, or the product whose
one-row result it reads finds it in its last block.

A decode step ends with `next = cast(argmax(logits))`: after the logits product, an argmax
kernel of one block, then a cast kernel of one element. Two settings, each off by default:

- `ARGMAX_CAST`: an argmax whose only reader is a cast to an integer dtype stores its index as
  that dtype (`indexing.argmax_launch`); the cast issues nothing:

      %i = argmax(%logits) {axis = -1}   %t = cast(%i) {dtype = "i32"}
      ->  one kernel: %t[line] = (int)(first index of the line's maximum)

- `ARGMAX_IN_PRODUCT`: an argmax of the whole one-row result of a one-row product (a fused
  region or a matmul lowered by `product_kernel`) is done by the product's last block
  (`argmax_tail`), with its cast where the cast folds as above; neither issues anything:

      %logits = fused(%h, %g, %w)   %i = argmax(%logits)   %t = cast(%i)
      ->  the product's launch stores %logits, then its last block stores %t[0]

Legality (what makes the early store safe where the memory plan put the stored value):
- the argmax is issued right after the product (views of it between, which issue nothing;
  `ARGMAX_IN_PRODUCT`), the cast right after the argmax, all on one stream and on the device:
  nothing else runs between them, and what
  happened before the cast (events included) happened before the product;
- the argmax's result has the cast as its only reader (no view, not an output) when a cast
  folds; the cast's dtype is an integer one (i32, i64);
- the argmax covers its operand in one line (all its elements along `axis`) when the stored
  value's bytes overlap the operand's (the argmax kernel reads a line before storing its
  index; several lines would race) or for a product (its tail handles one row);
- the kernel stores the index after every element it needs is read: the last block of a
  product arrives after every other block has read its operands and stored its tile.

Not handled: an argmax with readers besides one cast, nodes between the three, several rows,
products that `qkv_folds` already folds, cuBLAS products.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from optgraph.codegen.cuda_source import Kernel, Launch
from optgraph.codegen.kernels.indexing import argmax_launch
from optgraph.codegen.kernels.one_row import product_kernel
from optgraph.codegen.kernels.one_row.argmax_tail import ARG_PARAM, with_argmax_tail
from optgraph.codegen.plan.steps import DecodeRewrite, Extent, KernelStep, Location
from optgraph.ir.attrs import int_attr
from optgraph.ir.graph import Graph, Node, TensorType
from optgraph.ir.layout import alias_roots
from optgraph.ir.ops import attrs_with_defaults

# An argmax whose only reader is an integer cast stores the cast value (one kernel fewer).
ARGMAX_CAST = False
# An argmax of a one-row product's result is done by the product's last block.
ARGMAX_IN_PRODUCT = False

INDEX_DTYPES = frozenset({"i32", "i64"})


@dataclass(frozen=True)
class ArgmaxFold:
    """The node whose launch does the work (`issuer`: the product, or the argmax) and the
    nodes that then issue nothing."""

    issuer: Node
    argmax: Node
    cast: Node | None
    launch: Launch

    @property
    def stored(self) -> Node:
        """The node whose value the index is stored as."""
        return self.cast if self.cast is not None else self.argmax

    @property
    def absorbed(self) -> tuple[str, ...]:
        nodes = (self.argmax, self.cast) if self.issuer is not self.argmax else (self.cast,)
        return tuple(n.name for n in nodes if n is not None)

    def taken(self, kernel: str) -> DecodeRewrite:
        """This fold as the lowered plan text lists it, `kernel` the issuer's launch's:

        DecodeRewrite("argmax_folds", "i", "og_argmax_<hash>", ("t",),
                      "the argmax stores its index as %t (i32)")
        """
        stored = self.stored
        assert stored.type is not None
        index = f"%{stored.name} ({stored.type.dtype})"
        if self.issuer is self.argmax:
            note = f"the argmax stores its index as {index}"
        else:
            note = f"the product's last block finds the argmax, stored as {index}"
        return DecodeRewrite("argmax_folds", self.issuer.name, kernel, self.absorbed, note)


def _same_place(a: Node, b: Node) -> bool:
    return a.stream == b.stream and a.ann.backend == b.ann.backend and a.ann.backend != "cpu"


def _one_line(argmax: Node, x: TensorType) -> bool:
    axis = int_attr(attrs_with_defaults(argmax), "axis") % x.rank
    return x.rank > 0 and x.shape[axis] == x.numel


class _Graph:
    """What the checks read, computed once per graph."""

    def __init__(self, graph: Graph, locations: Mapping[str, Location]):
        self.nodes = graph.nodes
        self.index = {n.name: i for i, n in enumerate(graph.nodes)}
        self.users = graph.users()
        self.outputs = set(graph.output_names())
        self.roots = alias_roots(graph)
        self.viewed = {root for root, _ in self.roots.values()}
        self.types = graph.value_types()
        self.locations = locations

    def next_node(self, node: Node) -> Node | None:
        i = self.index[node.name] + 1
        return self.nodes[i] if i < len(self.nodes) else None

    def cast_of(self, argmax: Node) -> Node | None:
        """The integer cast issued right after `argmax` and its only reader, or None."""
        after = self.next_node(argmax)
        readers = self.users.get(argmax.name, [])
        if after is None or after.op != "cast" or readers != [self.index[after.name]]:
            return None
        if argmax.name in self.outputs or argmax.name in self.viewed:
            return None
        if after.type is None or after.type.dtype not in INDEX_DTYPES:
            return None
        return after if _same_place(argmax, after) else None

    def overlaps(self, a: str, b: str) -> bool:
        return Extent.of(self.locations[a], self.types[a].nbytes).overlaps(
            Extent.of(self.locations[b], self.types[b].nbytes)
        )


def argmax_folds(
    graph: Graph, locations: Mapping[str, Location], taken: frozenset[str] = frozenset()
) -> dict[str, ArgmaxFold]:
    """{issuer name: its fold} under the settings; `taken`: nodes whose launch another fold
    already builds (their kernels are not rebuilt here)."""
    if not (ARGMAX_CAST or ARGMAX_IN_PRODUCT):
        return {}
    g = _Graph(graph, locations)
    folds: dict[str, ArgmaxFold] = {}
    for node in graph.nodes:
        if node.op != "argmax" or node.type is None or node.name in taken:
            continue
        cast = g.cast_of(node)
        found = _in_product(g, node, cast, taken) if ARGMAX_IN_PRODUCT else None
        if found is None and ARGMAX_CAST and cast is not None:
            found = _with_cast(g, node, cast)
        if found is not None:
            folds[found.issuer.name] = found
    return folds


def _with_cast(g: _Graph, argmax: Node, cast: Node) -> ArgmaxFold | None:
    x = g.types[argmax.operands[0]]
    if not _one_line(argmax, x) and g.overlaps(cast.name, argmax.operands[0]):
        return None
    assert cast.type is not None
    return ArgmaxFold(argmax, argmax, cast, argmax_launch(argmax, x, cast.type.dtype))


def _in_product(
    g: _Graph, argmax: Node, cast: Node | None, taken: frozenset[str]
) -> ArgmaxFold | None:
    row = argmax.operands[0]
    i = g.index[argmax.name] - 1
    while i >= 0 and g.nodes[i].name in g.roots:
        i -= 1  # views of the product between: they issue nothing
    product = g.nodes[i] if i >= 0 else None
    if product is None or product.name in taken or product.type is None:
        return None
    if row != product.name and g.roots.get(row) != (product.name, 0):
        return None
    if product.op not in ("fused", "matmul") or not _same_place(product, argmax):
        return None
    x = g.types[row]
    if not _one_line(argmax, x) or x.numel != product.type.numel:
        return None
    index_dtype = cast.type.dtype if cast is not None and cast.type is not None else "i64"
    types = tuple(g.types[o] for o in product.operands)
    resident = frozenset(
        k for k, o in enumerate(product.operands) if g.locations[o].space == "weights"
    )
    if product.op == "fused":
        launches = product_kernel.one_row_region(product, types, resident)
    else:
        launches = product_kernel.one_row_matmul(product, types, resident)
    if not launches or len(launches) != 1:
        return None
    launch = with_argmax_tail(launches[0], product.name, product.type, index_dtype)
    return None if launch is None else ArgmaxFold(product, argmax, cast, launch)


def argmax_step(
    fold: ArgmaxFold, locations: Mapping[str, Location], types: Mapping[str, TensorType]
) -> tuple[KernelStep, Kernel]:
    """The issuer's launch: it reads the issuer's operands and writes its own result (a
    product) and the stored index."""
    issuer, stored = fold.issuer, fold.stored
    roles = {f"in{k}": locations[o] for k, o in enumerate(issuer.operands)}
    if issuer is fold.argmax:
        roles["out"] = locations[stored.name]
        written: tuple[str, ...] = (stored.name,)
    else:
        roles["out"] = locations[issuer.name]
        roles[ARG_PARAM] = locations[stored.name]
        written = (issuer.name, stored.name)
    launch = fold.launch
    reads = tuple(Extent.of(locations[o], types[o].nbytes) for o in issuer.operands)
    writes = tuple(Extent.of(locations[w], types[w].nbytes) for w in written)
    step = KernelStep(
        issuer.name, issuer.stream, launch.kernel.name, launch.grid, launch.block, 0,
        tuple(roles[r] for r in launch.args), reads, writes,
    )  # fmt: skip
    return step, launch.kernel
