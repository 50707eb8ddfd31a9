"""Integer arithmetic on the inputs alone moved to the front of an imported graph.

torch.export places each node where the model computed it: a static-cache decode step computes
a cache write's position (`cache_position + arange(1)`) right before the write, after the k and v
products. The code generator folds a cache write into the product's store loop only when its
position is computed before the product is issued (`codegen/decode/qkv_folds.py`), so the imported step
would need two launches a layer more than the same step written by hand. Such nodes depend on
nothing computed by the model's float work; issuing them first changes no value.

    %k = matmul(%h, %wk)                          %pos1 = add(%arange, %cache_position)
    %pos1 = add(%arange, %cache_position)   ->    %k = matmul(%h, %wk)
    %kc = kv_cache_write(%cache, %k4, %pos1)      %kc = kv_cache_write(%cache, %k4, %pos1)

Moved: nodes with an integer or bool result of at most `SMALL` elements whose operands are
inputs, constants, weights or nodes moved already (IR ops are functions of their operands:
moving one changes no value); the moved nodes keep their order, and so do the others.
Cost: O(V + E).
"""

from __future__ import annotations

from optgraph.frontends.draft import Draft
from optgraph.ir.graph import INT_DTYPES, Node
from optgraph.ir.ops import get_op

SMALL = 64  # elements: position arithmetic, not index tensors of a real computation


def _small_integer(node: Node) -> bool:
    t = node.type
    if t is None or get_op(node.op) is None or t.numel > SMALL:
        return False  # an op the IR lacks may still be raised away: left where it is
    return t.dtype in INT_DTYPES or t.dtype == "bool"


def positions_first(draft: Draft) -> None:
    """Reorder `draft.nodes` in place (see the module docstring)."""
    computed = {n.name for n in draft.nodes}
    first: list[Node] = []
    moved: set[str] = set()
    rest: list[Node] = []
    for node in draft.nodes:
        if _small_integer(node) and all(o not in computed or o in moved for o in node.operands):
            first.append(node)
            moved.add(node.name)
        else:
            rest.append(node)
    draft.nodes = first + rest


__all__ = ["positions_first"]
