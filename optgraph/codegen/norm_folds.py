"""Row norms done by the one-row product that produced their row: no norm kernel (lowering time).

A decode layer normalizes the residual stream right after the product that stores it (the
o-projection's and the down product's residual add): a stand-alone rms_norm is a launch of one
block. When `NORM_FOLDS` is on, the product's kernel computes the norm too (`cuda_gemv_norm`:
per-tile partial sums of squares, the last tile normalizes the row) and the norm issues
nothing:

    kernel %l0.h_attn og_gemv_1284 grid=(32, 5, 1) ...        reads x, wo, h; writes h_attn
    kernel %l0.mlp_in og_rms_norm_50de grid=(1, 1, 1) ...      reads h_attn, g; writes mlp_in
->  kernel %l0.h_attn og_gemv_77ab grid=(32, 5, 1) ...  reads x, wo, h, g; writes h_attn, mlp_in

Legality: the norm is an rms_norm of the whole row (one row), issued right after its input's
producer (the next node in issue order, same stream and backend: nothing runs between, so
writing the norm's bytes earlier clobbers no value still live there); the producer is a fused
product region that `cuda_fused.gemv_region` runs as one kernel of one row, not folded
otherwise (`qkv_folds`, `rope_cache_writes`); the norm's planned bytes overlap neither the
row nor the norm's weight. They may overlap the product's operands (the planner gives the norm
the residual's bytes, the residual's last reader being the product): the norm is written by the
block that arrives last, after every block of the grid has done all its reads.
The step lists every byte it reads and writes (`KernelStep.reads` / `writes`), so launch
merging and the race checks see the norm's result as the product's write.

The first layer's norm follows `get_rows` of one row: that becomes one block gathering the row
and normalizing it (`cuda_gemv_norm.gather_norm_launch`; the norm's bytes then overlap none of
the gather's).

Not handled: layer_norm, rows computed by other kernels, several rows, products folded with rope
or cache writes.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass

from optgraph.codegen import cuda_fused
from optgraph.codegen.cuda_gemv_norm import RowNorm, gather_norm_launch
from optgraph.codegen.cuda_source import Kernel, Launch
from optgraph.codegen.cuda_steps import Extent, KernelStep, Location
from optgraph.ir.attrs import float_attr
from optgraph.ir.graph import Graph, Node, TensorType
from optgraph.ir.ops import attrs_with_defaults

# The products before a one-row rms_norm compute it (off: the norm is a kernel of its own). A
# module setting, as the other lowering choices (`benchmarks/bench_decode_launches.py` A/Bs it).
NORM_FOLDS = False


@dataclass(frozen=True)
class NormFold:
    """A product whose kernel also stores `norm`'s result."""

    product: Node
    norm: Node
    launch: Launch


def _extent(loc: Location, t: TensorType) -> Extent:
    return Extent(loc.space, loc.key, loc.offset, t.nbytes)


def _fold(
    product: Node,
    norm: Node,
    locations: Mapping[str, Location],
    types: Mapping[str, TensorType],
) -> NormFold | None:
    """The fold of `norm` into `product` (issued just before it), or None when illegal."""
    if product.op not in ("fused", "get_rows") or product.type is None or norm.type is None:
        return None
    if norm.operands[0] != product.name or norm.operands[1] == product.name:
        return None
    row = types[product.name]
    if (product.stream, product.ann.backend) != (norm.stream, norm.ann.backend):
        return None
    if row.numel != row.shape[-1] or norm.type.numel != row.numel:
        return None
    # The tail reads the row and the weight; the product's operands may share the norm's bytes
    # (the planner gives it the residual's): every block has read them before the last arrives.
    # The gather (one block) writes the norm while its threads read: no overlap at all.
    read_late = [product.name, norm.operands[1]]
    read_late += list(product.operands) if product.op == "get_rows" else []
    mine = _extent(locations[norm.name], norm.type)
    if any(mine.overlaps(_extent(locations[v], types[v])) for v in read_late):
        return None
    weight = types[norm.operands[1]]
    eps = float_attr(attrs_with_defaults(norm), "eps")
    spec = RowNorm(eps, weight.dtype, norm.type.dtype)
    if product.op == "get_rows":
        table, ids = (types[o] for o in product.operands)
        gather = gather_norm_launch(spec, table, ids, row.dtype)
        return NormFold(product, norm, gather) if gather is not None else None
    operand_types = tuple(types[o] for o in product.operands)
    resident = frozenset(
        k for k, o in enumerate(product.operands) if locations[o].space == "weights"
    )
    launches = cuda_fused.gemv_region(product, operand_types, resident, None, spec)
    if not launches:
        return None
    return NormFold(product, norm, launches[0])


def norm_folds(
    graph: Graph,
    locations: Mapping[str, Location],
    taken: Collection[str] = (),
) -> dict[str, NormFold]:
    """The folds of `graph` by product name (none unless `NORM_FOLDS`); `taken`: nodes done by
    or doing other folds, never folded here."""
    if not NORM_FOLDS:
        return {}
    types = graph.value_types()
    out: dict[str, NormFold] = {}
    for before, node in zip(graph.nodes, graph.nodes[1:]):
        if node.op != "rms_norm" or before.is_event or node.ann.backend == "cpu":
            continue
        if before.name in taken or node.name in taken or len(node.operands) != 2:
            continue
        fold = _fold(before, node, locations, types)
        if fold is not None:
            out[before.name] = fold
    return out


def norm_fold_step(
    fold: NormFold, locations: Mapping[str, Location], types: Mapping[str, TensorType]
) -> tuple[KernelStep, Kernel]:
    """The product's launch: it reads its operands and the norm's weight, and writes its
    result and the norm's."""
    product, norm = fold.product, fold.norm
    values = [*product.operands, norm.operands[1]]
    roles = {"out": locations[product.name], "nout": locations[norm.name]}
    roles.update((f"in{k}", locations[v]) for k, v in enumerate(values))
    launch = fold.launch
    args = tuple(roles[r] for r in launch.args)
    reads = tuple(_extent(locations[v], types[v]) for v in values)
    writes = tuple(_extent(locations[v], types[v]) for v in (product.name, norm.name))
    step = KernelStep(
        product.name, product.stream, launch.kernel.name, launch.grid, launch.block, 0, args,
        reads, writes,
    )  # fmt: skip
    return step, launch.kernel
