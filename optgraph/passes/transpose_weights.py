"""`transpose-weights`: store a weight that every product reads transposed as its transpose.

    before: weight %q.weight : f16[1024,4096]
            %q = matmul(%x, %q.weight) {transpose_b = true} : f16[1,1024]
    after:  weight %q.weight : f16[4096,1024] !{layout = "transposed"}
            %q = matmul(%x, %q.weight) : f16[1,1024]

PyTorch's `nn.Linear` and ONNX's `Gemm{transB=1}` keep their weights `[out, in]`, so imported
products read `x @ Wᵀ`. The fused one-row kernels and the product fusion rules take `[K, N]`
weights; storing the transpose once, when the weights are bound, lets imported models use them.
The user keeps supplying the model's arrays under the same names: executors transpose a weight
marked `layout = "transposed"` when they bind it (`optgraph/ir/weight_layout.py`), and
`random_weights` draws the model's layout, so results are bit-identical to the graph before.

A weight is rewritten only when it is 2-D, has no layout yet, and every use is operand 1 (`b`) of
a top-level `matmul` with `transpose_b = true` and `transpose_a = false`.

Does not handle: weights read any other way too (a tied embedding that `get_rows` also reads keeps
its layout and its products stay cuBLAS calls), products inside fused bodies (it runs before
`fuse`), batched (3-D) weights, inputs (their layout is the caller's), quantized weights (their
blocks run along K as stored; their products have a kernel of their own that reads `[N, K]`). Keeps every annotation
valid: no type of any value changes but the weight's own, and its byte size stays.

Complexity O(V + E): one sweep to collect uses, one to rewrite.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from optgraph.ir.graph import Graph, Node, TensorType
from optgraph.ir.ops import OPS
from optgraph.passes.base import Pass

_MATMUL_ATTRS = OPS["matmul"].attrs


def _reads_transposed(node: Node, index: int) -> bool:
    if node.op != "matmul" or index != 1 or node.operands.count(node.operands[1]) != 1:
        return False
    # Verified boolean attributes are stored as given; absent ones take the op's default.
    attrs = node.attrs
    transpose_a = attrs.get("transpose_a", _MATMUL_ATTRS["transpose_a"].default)
    transpose_b = attrs.get("transpose_b", _MATMUL_ATTRS["transpose_b"].default)
    return bool(transpose_b) and not transpose_a


def transposable_weights(graph: Graph) -> set[str]:
    """Names of the weights `transpose-weights` rewrites (see the module docstring)."""
    candidates = {
        w.name
        for w in graph.weights
        if w.type.rank == 2 and w.ann.layout is None and not w.type.is_quantized
    }
    used: set[str] = set()
    for node in graph.nodes:
        if candidates.isdisjoint(node.operands):
            continue
        for index, operand in enumerate(node.operands):
            if operand not in candidates:
                continue
            if _reads_transposed(node, index):
                used.add(operand)
            else:  # any other read, a fused node's included, keeps the layout
                candidates.discard(operand)
    return candidates & used


@dataclass(frozen=True)
class TransposeWeightsPass(Pass):
    name = "transpose-weights"
    summary = "store weights that products read transposed (nn.Linear's [out,in]) as [in,out]"

    def run(self, graph: Graph) -> Graph:
        names = transposable_weights(graph)
        if not names:
            return graph
        weights = tuple(
            replace(
                w,
                type=TensorType(w.type.dtype, (w.type.shape[1], w.type.shape[0])),
                ann=replace(w.ann, layout="transposed"),
            )
            if w.name in names
            else w
            for w in graph.weights
        )
        nodes = tuple(
            replace(node, attrs={k: v for k, v in node.attrs.items() if k != "transpose_b"})
            if node.op == "matmul" and len(node.operands) > 1 and node.operands[1] in names
            else node
            for node in graph.nodes
        )
        return replace(graph, weights=weights, nodes=nodes)


__all__ = ["TransposeWeightsPass", "transposable_weights"]
