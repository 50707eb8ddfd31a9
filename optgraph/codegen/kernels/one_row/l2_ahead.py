"""One-row products that bring their weights into L2 while the decode attention before them runs.

A decode attention is bound by latency, not by bandwidth: its blocks read a few MB of KV cache,
then wait on chains of dependent arithmetic (dot products, a block maximum, the chunks' merge),
so memory is nearly idle for the microseconds it runs. Under PDL the product that reads its
result (the o-projection) is resident meanwhile and loads its first batch of weight rows into
registers before its wait (`product_kernel.EARLY_WEIGHTS`). With this rule its blocks also bring
the rest of their splits' rows into L2 then (`weight_rows_to_l2`: bulk prefetches of the
contiguous rows, shared among the split's blocks, at most `L2_AHEAD_BYTES` over the
kernel), which stream in during the attention:

    %a = attention(%q, %kc, %vc, %len) : f16[1,32,1,128]      (one query row: decode)
    %a2 = reshape(%a)                                          (a view)
    %o = fused(%a2, %wo, %h) body(...) { matmul, add }        (%wo a weight)
    ->  %o's kernel, before its PDL wait: its first batch of %wo's rows into registers, then
        `cp.async.bulk.prefetch.L2` of its part of the split's later rows

The rule: a product node (a matmul, or a fused region, whose kernel decides whether it is a
one-row product) on the GPU that reads, directly or through views, the result of an attention
with at most `decode_wide_layout.MAX_SQ` query rows on the same stream. A prefetch
is a hint: the loads after the wait read whatever memory holds, so the rule affects time only.

Measured on an H100 (docs/results/2026-11-24-h100-l2-ahead.md): the realistic decode step is
faster with the o-projection's whole slice ahead; fewer rows ahead gain less; the same prefetch
in the products after the norm kernels (whose blocks start only at the norm's wait, so the
prefetches compete with their own loads) is slower, and so is every other way tried there of
filling memory around the norms. The attention itself gets slower (its second pass waits behind
the prefetches), by less than the o-projection gains. The launch-bound step is unchanged: its
products' first batch holds every row.
Issuing the same prefetches from the attention's own blocks (earlier, at their wait, every
multiprocessor at once) was slower: the attention's loads then wait behind them
(docs/results/2026-11-24-h100-attention-tail-final-status.md). The product's blocks start
prefetching only as they become resident, which paces the traffic.

Complexity: O(V) over the graph's nodes.
"""

from __future__ import annotations

from collections.abc import Mapping

from optgraph.codegen.kernels.attention import decode_wide_layout
from optgraph.codegen.kernels.attention.head_rows import attention_shape
from optgraph.codegen.kernels.one_row.geometry import BATCH, THREADS, VECTOR_BYTES, Geometry
from optgraph.ir.graph import Graph, TensorType

# Products reading a decode attention's result prefetch their weights into L2 before their PDL
# wait; False: none does.
L2_AHEAD = True
# Bytes, over the whole kernel, of such a product's weight rows after its first batch that it
# brings into L2, in bulk prefetches of at most L2_AHEAD_CHUNK bytes; 0: none.
L2_AHEAD_BYTES = 32 << 20
L2_AHEAD_CHUNK = 64 << 10

PRODUCTS = frozenset({"matmul", "fused"})


def l2_ahead_products(
    graph: Graph, roots: Mapping[str, tuple[str, int]], types: Mapping[str, TensorType]
) -> frozenset[str]:
    """The product nodes that bring their weights into L2 during the decode attention before
    them (the rule of the module docstring); `roots`: `ir.layout.alias_roots(graph)`, `types`:
    the graph's value types."""
    if not L2_AHEAD:
        return frozenset()
    decode: dict[str, int] = {}  # decode attention -> its stream
    found: set[str] = set()
    for node in graph.nodes:
        if node.ann.backend == "cpu":
            continue
        if node.op == "attention" and len(node.operands) >= 3:
            shape = attention_shape(node, tuple(types[o] for o in node.operands))
            if shape.sq <= decode_wide_layout.MAX_SQ:
                decode[node.name] = node.stream
        elif node.op in PRODUCTS:
            sources = (roots.get(o, (o, 0))[0] for o in node.operands)
            if any(decode.get(s, -1) == node.stream for s in sources):
                found.add(node.name)
    return frozenset(found)


def weight_rows_to_l2(g: Geometry, b_role: str) -> list[str]:
    """Statements bringing the weight rows of the block's split after its first batch into L2,
    at most `L2_AHEAD_BYTES` over the kernel (the first rows of each split first). The rows of
    a split are contiguous (all columns): the split's `tiles` blocks share them, each a
    contiguous part, in bulk prefetches of up to `L2_AHEAD_CHUNK` bytes (one prefetch per row
    segment of the block's own tile, 256 bytes each, was slower: docs/results/
    2026-11-24-h100-l2-ahead.md). None where no row is left."""
    size = VECTOR_BYTES // g.vec
    first = BATCH * g.lanes  # the rows of `first_batch` (one weight)
    rows = min(g.rows - first, L2_AHEAD_BYTES // (g.splits * g.n * size))
    if rows <= 0:
        return []
    row = g.n * size
    chunk = L2_AHEAD_CHUNK
    return [
        "{  // the split's rows after the first batch into L2, shared among its tiles' blocks",
        f"  const unsigned long long lo = (unsigned long long)(k0 + {first}u) * {row}ull;",
        f"  const unsigned long long hi = (unsigned long long)min(k1, k0 + {first + rows}u) * {row}ull;",
        "  if (lo < hi) {",
        f"    const unsigned long long part = ((hi - lo) / {g.tiles}ull + 15ull) & ~15ull;",
        "    const unsigned long long a = lo + (unsigned long long)tile * part;",
        "    const unsigned long long b = min(hi, a + part);",
        (
            f"    for (unsigned long long at = a + (unsigned long long)threadIdx.x * {chunk}ull;"
            f" at < b; at += {THREADS * chunk}ull)"
        ),
        (
            f"      og_prefetch_l2_bulk(reinterpret_cast<const char*>({b_role}) + at,"
            f" (unsigned int)min((unsigned long long){chunk}, b - at));"
        ),
        "  }",
        "}",
    ]
