"""Weight layouts: how a weight is stored against the array the model supplies.

A weight may carry `!{layout = "transposed"}` (set by the `transpose-weights` pass): the graph reads
the transpose of the array the user gives under that name. The user's arrays, checkpoints and
`random_weights` always keep the model's layout, so one set of weights fits the model and every
compiled form of it; whoever executes the graph (the reference interpreter, the planned executor,
the CUDA runtime's upload) calls `stored_array` once per weight, when the weights are bound.

    weight %q.weight : f16[4096,1024] !{layout = "transposed"}
    model_type(w)          -> f16[1024,4096]   (what the user supplies)
    stored_array(w, a)     -> a.T, contiguous  (what the graph reads)

Cost: one copy of each transposed weight, at bind time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optgraph.ir.graph import Graph, TensorType, Weight


def model_type(weight: Weight) -> TensorType:
    """The type of the array the model supplies for `weight` (its declared type, or the
    transpose of it for a `transposed` layout)."""
    if weight.ann.layout == "transposed":
        return TensorType(weight.type.dtype, tuple(reversed(weight.type.shape)))
    return weight.type


def stored_array(weight: Weight, array: Any) -> Any:
    """`array` (NumPy or CuPy, in the model's layout) as the graph reads it: C-contiguous.
    Arrays of weights without a layout are returned as they are."""
    if weight.ann.layout == "transposed":
        return array.T.copy()  # NumPy and CuPy both copy into C order
    return array


def stored_weights(graph: Graph, weights: Mapping[str, Any]) -> dict[str, Any]:
    """`weights` (the model's arrays by name) as `graph` reads them: `stored_array` of each
    weight `graph` declares; other entries are passed through."""
    declared = {w.name: w for w in graph.weights}
    return {
        name: stored_array(declared[name], array) if name in declared else array
        for name, array in weights.items()
    }


__all__ = ["model_type", "stored_array", "stored_weights"]
