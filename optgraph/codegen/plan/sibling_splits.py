"""Split counts of one-row products that share a launch: one wave, about equal bytes a block.

The q, k and v products of a decode layer read the same row and merge into one launch
(`merge_launches`). Alone, each takes about a block a multiprocessor (`geometry.splits`:
S = ⌈132 / tiles⌉): merged, the realistic step's three give 160 + 132 + 132 = 424 blocks, more
than the 264 that are resident at once (two a multiprocessor), so the narrow k and v finish in a
second wave. This rule gives such products fewer splits of K, so that every block streams about
the same bytes and the launch is one wave:

    q [4096, 4096], k and v [4096, 1024] f16, one row, merged
    alone:  q 32 tiles x 5 splits, k and v 4 tiles x 33 splits   (424 blocks; 210 / 64 KiB each)
    ->      q 32 tiles x 5 splits, k and v 4 tiles x 8 splits    (224 blocks; 210 / 256 KiB)

The rule: a group is two or more consecutive product nodes of one stream (nodes that issue
nothing between them are skipped) that read the same row (through views) and one weight each
from the device's weight buffer, none reading another's result, at most
`merge_launches.MAX_MEMBERS` of them: the launches `merge_launches` puts together. Where their
blocks alone would exceed `MIN_BLOCKS × SMS`, each block gets about B bytes: the group's weight
bytes over `MIN_BLOCKS × SMS`, or the bytes of the group's largest blocks alone where more (the
launch cannot end before those, and smaller blocks elsewhere only add partial sums). A product
of `tiles` tiles and W bytes gets ⌊W / (tiles · B)⌋ splits, at least 1 and never more than
alone, then as many as that or fewer that cut K into equal whole batches of rows where they can
(`geometry.splits`). Used only where launches are merged; the q/k/v folds
(`qkv_folds`) and plain products (`cuda_dispatch`) take the same counts, so folding them does
not change their sums' order.

Measured on an H100 (docs/results/2026-11-24-h100-l2-ahead.md): the realistic decode step is
faster with k and v at 8 splits (equal whole batches) than at 33 (alone), 9, 10, 11 or 13.

Complexity: O(V) over the graph's nodes (and the fused bodies' nodes).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from optgraph.analysis.fusion_rules import one_row_product, product_operands
from optgraph.codegen.kernels.one_row.geometry import MIN_BLOCKS, SMS, VECTOR, layout
from optgraph.codegen.plan.merge_launches import MAX_MEMBERS
from optgraph.ir.graph import Graph, Node, TensorType, Weight

# Products merged into one launch take split counts for one wave; False: each its own.
SIBLING_SPLITS = True


@dataclass(frozen=True)
class _Member:
    node: str
    row: str  # the row's buffer (alias root)
    tiles: int
    splits: int  # alone
    nbytes: int  # the weight's


def sibling_splits(
    graph: Graph,
    roots: Mapping[str, tuple[str, int]],
    types: Mapping[str, TensorType],
    resident: Mapping[str, int],
) -> dict[str, int]:
    """{product node: its most splits} where fewer than the product's own (the rule of the
    module docstring; `geometry.splits` may take fewer, for equal whole batches);
    `roots`: `ir.layout.alias_roots(graph)`; `resident`: the weights in the device's weight
    buffer."""
    if not SIBLING_SPLITS or not any(_split_alone(w, resident) for w in graph.weights):
        return {}  # no product has splits to give up (a small model's single-pass products)
    by_stream: dict[int, list[Node]] = {}
    for node in graph.nodes:
        if node.is_event or node.name in roots or node.ann.backend == "cpu":
            continue
        by_stream.setdefault(node.stream, []).append(node)
    found: dict[str, int] = {}
    for nodes in by_stream.values():
        group: list[_Member] = []
        for node in nodes:
            member = _member(node, types, roots, resident)
            if member is None or not _joins(group, member, node, roots):
                found.update(_splits(group))
                group = []
            if member is not None:
                group.append(member)
        found.update(_splits(group))
    return found


def _split_alone(weight: Weight, resident: Mapping[str, int]) -> bool:
    """Whether a one-row product of `weight` alone takes more than one split of K."""
    t = weight.type
    if weight.name not in resident or t.rank != 2 or t.dtype not in VECTOR:
        return False
    return layout(t.shape[0], t.shape[1], VECTOR[t.dtype])[2] > 1


def _joins(
    group: Sequence[_Member], member: _Member, node: Node, roots: Mapping[str, tuple[str, int]]
) -> bool:
    """Whether `member` (of `node`) extends `group`: the same row, no member's result read, at
    most `merge_launches.MAX_MEMBERS` members (one launch)."""
    if not group:
        return True
    if len(group) >= MAX_MEMBERS:
        return False
    taken = {m.node for m in group}
    reads = {roots.get(o, (o, 0))[0] for o in node.operands}
    return member.row == group[0].row and not reads & taken


def _member(
    node: Node,
    types: Mapping[str, TensorType],
    roots: Mapping[str, tuple[str, int]],
    resident: Mapping[str, int],
) -> _Member | None:
    """`node` as a group member: a one-row product (`fusion_rules.one_row_product`: no
    transposes, one row, a 2-D weight) of a resident weight, with its layout alone; None
    otherwise."""
    found = product_operands(node, types)
    if found is None or found[1] not in resident:
        return None
    row, weight, anchor = found
    shape = one_row_product(anchor, types[row], types[weight])
    if shape is None:
        return None
    k, n = shape
    b = types[weight]
    _, tiles, splits, _ = layout(k, n, VECTOR[b.dtype])
    return _Member(node.name, roots.get(row, (row, 0))[0], tiles, splits, b.nbytes)


def _splits(group: Sequence[_Member]) -> dict[str, int]:
    """The members' most splits for one wave (those below their own counts)."""
    budget = MIN_BLOCKS * SMS
    if len(group) < 2 or sum(m.tiles * m.splits for m in group) <= budget:
        return {}
    # no block needs fewer bytes than the largest blocks, which keep their own split counts
    largest = max(m.nbytes / (m.tiles * m.splits) for m in group)
    per_block = max(sum(m.nbytes for m in group) / budget, largest)
    out: dict[str, int] = {}
    for m in group:
        s = max(1, min(m.splits, int(m.nbytes / (m.tiles * per_block) + 1e-9)))
        if s != m.splits:
            out[m.node] = s
    return out
