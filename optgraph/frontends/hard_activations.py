"""HardSigmoid and HardSwish (MobileNetV3's activations), both importers (`emitter.Emitter`):

    hard_sigmoid(x) = clip(alpha · x + beta, 0, 1)      torch: alpha = 1/6, beta = 1/2;
                                                        ONNX HardSigmoid: its attributes
    hard_swish(x)   = x · hard_sigmoid(x)               torch and ONNX HardSwish: 1/6, 1/2

    ->  %s = scale(%x) {factor = 0.1666...}; %t = add(%s, %half); %h = clip(%t) {max = 1.0,
        min = 0.0}; (hard_swish) %y = mul(%x, %h)

Elementwise ops `fuse` joins into one kernel. PyTorch writes `min(max(x + 3, 0), 6) / 6`: the
same function, rounded differently (within an ulp or two of float32).
"""

from __future__ import annotations

import numpy as np

from optgraph.frontends.emitter import Emitter
from optgraph.ir.graph import AttrValue, TensorType
from optgraph.reference.kernels import numpy_dtype

SIXTH = 1.0 / 6.0


def hard_sigmoid(
    em: Emitter, x: tuple[str, TensorType], alpha: float = SIXTH, beta: float = 0.5, *,
    swish: bool = False,
) -> str:  # fmt: skip
    """The nodes of hard_sigmoid(x) (or, with `swish`, x · hard_sigmoid(x)); the last is the
    op's own result."""
    name, t = x
    scaled = em.step("scale", [name], t, {"factor": float(alpha)})
    shift = em.constant(np.array(beta, dtype=numpy_dtype(t.dtype)), "beta")
    shifted = em.step("add", [scaled, shift], t)
    bounds: dict[str, AttrValue] = {"min": 0.0, "max": 1.0}
    if not swish:
        return em.last("clip", [shifted], bounds)
    gate = em.step("clip", [shifted], t, bounds)
    return em.last("mul", [name, gate])
