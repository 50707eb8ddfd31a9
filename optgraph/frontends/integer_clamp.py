"""A clamp of integers with constant bounds (IR `clip` takes floats), for both importers:

    ids.clamp(0, E - 1), ONNX Clip(ids, 0, E - 1)   ->   minimum(maximum(ids, 0), E - 1)

as transformers' MoE experts clamp their expert ids. Either bound may be absent. O(1) nodes.
"""

from __future__ import annotations

import numpy as np

from optgraph.frontends.emitter import Emitter
from optgraph.ir.graph import TensorType
from optgraph.reference.kernels import numpy_dtype


def integer_clamp(em: Emitter, x: tuple[str, TensorType], low: int | None, high: int | None) -> str:
    """x bounded below by `low` and above by `high` (at least one given); the last node is
    `em.last`'s."""
    name, xt = x
    steps = [
        (op, bound) for op, bound in (("maximum", low), ("minimum", high)) if bound is not None
    ]
    for i, (op, bound) in enumerate(steps):
        value = em.constant(np.array(bound, numpy_dtype(xt.dtype)), "bound")
        if i == len(steps) - 1:
            return em.last(op, [name, value])
        name = em.step(op, [name, value], xt)
    raise ValueError("integer_clamp needs a bound")
