"""Whether a candidate region makes one kernel, decided once per shape of region (for `fuse`).

`fuse` asks of every union of two groups whether `fusion_rules.plan_region` makes one kernel of
it, within the row limits of a product prologue. The answer depends on the region's *shape*
alone: each node's op, attributes, result and operand types, and which operand reads which
region node (names only wire the nodes). A model's repeated layers ask about the same shapes
once a layer, so `RegionShapes` plans each shape once and looks the others up:

    shapes = RegionShapes(nodes, types, prologue_max_k=2048, elementwise_prologue_max_k=2048)
    shapes.is_one_kernel([3, 4])    # %n = rms_norm(%h, %g), %q = matmul(%n, %wq): planned
    shapes.is_one_kernel([30, 31])  # the next layer's: a lookup

Complexity: O(n + e) per question for a region of n nodes and e operands (its key), plus
`plan_region`'s O(n + e) once per shape; O(1) amortized per node for its signature.
"""

from __future__ import annotations

from collections.abc import Sequence

from optgraph.analysis.fusion_rules import NORM_OPS, PRODUCT, plan_region
from optgraph.ir.graph import Node, TensorType
from optgraph.ir.ops import attrs_key


class RegionShapes:
    """One-kernel answers by region shape, for regions of `nodes` (a list the caller may
    append to) whose values have `types`. Types are compared by identity: the caller keeps
    every type object alive while it asks, and two equal type objects only cost a second plan."""

    def __init__(
        self,
        nodes: Sequence[Node],
        types: dict[str, TensorType],
        prologue_max_k: int,
        elementwise_prologue_max_k: int,
    ) -> None:
        self.nodes = nodes
        self.types = types
        self.prologue_max_k = prologue_max_k
        self.elementwise_prologue_max_k = elementwise_prologue_max_k
        self._signatures: dict[int, int] = {}  # node index -> its signature's number
        self._signature_ids: dict[tuple[object, ...], int] = {}
        self._answers: dict[tuple[int, ...], bool] = {}  # by `_key`

    def is_one_kernel(self, union: Sequence[int]) -> bool:
        """`plan_region` makes one kernel of the nodes `union` (indices in issue order), and a
        product's prologue, if any, reads a row within its limit (`prologue_max_k` with a norm,
        `elementwise_prologue_max_k` without)."""
        key = self._key(union)
        found = self._answers.get(key)
        if found is None:
            found = self._answers[key] = self._plans_one_kernel([self.nodes[j] for j in union])
        return found

    def _plans_one_kernel(self, region: list[Node]) -> bool:
        plan, _ = plan_region(region, self.types)
        if plan is None:
            return False
        if plan.kind == PRODUCT and plan.prologue and plan.anchor is not None:
            by_name = {n.name: n for n in region}
            limit = self.elementwise_prologue_max_k
            if any(by_name[p].op in NORM_OPS for p in plan.prologue):
                limit = self.prologue_max_k
            if self.types[by_name[plan.anchor].operands[0]].shape[-1] > limit:
                return False
        return True

    def _key(self, union: Sequence[int]) -> tuple[int, ...]:
        """What `_plans_one_kernel` reads of the nodes `union`: each node's signature, then, per
        operand, the position in `union` of the node defining it (-1: from outside). A signature
        fixes the node's operand count, so the flat tuple reads back one way."""
        nodes, signatures = self.nodes, self._signatures
        position = {nodes[j].name: k for k, j in enumerate(union)}
        key: list[int] = []
        for j in union:
            signature = signatures.get(j)
            if signature is None:
                signature = signatures[j] = self._signature(nodes[j])
            key.append(signature)
            key.extend([position.get(o, -1) for o in nodes[j].operands])
        return tuple(key)

    def _signature(self, node: Node) -> int:
        """A number for what `plan_region` reads of a node besides its name and wiring: op,
        attributes, result and operand types."""
        types = self.types
        signature = (
            node.op,
            attrs_key(node),  # each attribute with its type (`typed_value`), kept on the node
            id(node.type),
            *[id(types[o]) for o in node.operands],
        )
        return self._signature_ids.setdefault(signature, len(self._signature_ids))
