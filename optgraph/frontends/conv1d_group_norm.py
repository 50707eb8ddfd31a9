"""A 1-D convolution and a group norm in IR ops, for both importers (audio front ends: Whisper's
and wav2vec2's).

    conv1d(x [N, C, L], w [O, C/g, K])   ->  reshape x to [N, C, 1, L], w to [O, C/g, 1, K];
                                             conv2d {stride (1, s), padding (0, p), groups};
                                             reshape to [N, O, L']
    group_norm(x [N, C, ..], G)          ->  reshape to [N, G, C/G · ..]; layer_norm of each
    (ONNX InstanceNormalization: G = C)      group (unit scale, no shift); reshape back; then the
                                             per-channel scale and shift ([C] as [C, 1, ..])

Each importer passes its `emitter.Emitter`. O(1) nodes.
"""

from __future__ import annotations

import numpy as np

from optgraph.frontends.emitter import Emitter
from optgraph.ir.graph import AttrValue, TensorType
from optgraph.reference.kernels import numpy_dtype


def conv1d(
    em: Emitter,
    x: tuple[str, TensorType],
    w: tuple[str, TensorType],
    bias: str | None,
    conv: tuple[int, int, int],
) -> str:
    """x convolved with w (+ bias), `conv` = (stride, padding, groups); x [N, C, L] and w
    [O, C/g, K] (the callers check the ranks)."""
    (x_name, xt), (w_name, wt) = x, w
    stride, padding, groups = conv
    x4 = xt.with_shape((xt.shape[0], xt.shape[1], 1, xt.shape[2]))
    w4 = wt.with_shape((wt.shape[0], wt.shape[1], 1, wt.shape[2]))
    operands = [
        em.step("reshape", [x_name], x4, {"shape": x4.shape}),
        em.step("reshape", [w_name], w4, {"shape": w4.shape}),
    ]
    if bias is not None:
        operands.append(bias)
    length = (xt.shape[2] + 2 * padding - wt.shape[2]) // stride + 1
    y4 = xt.with_shape((xt.shape[0], wt.shape[0], 1, length))
    attrs: dict[str, AttrValue] = {
        "stride": (1, stride),
        "padding": (0, padding),
        "groups": groups,
    }
    y = em.step("conv2d", operands, y4, attrs)
    return em.last("reshape", [y], {"shape": (y4.shape[0], y4.shape[1], length)})


def group_norm(
    em: Emitter,
    x: tuple[str, TensorType],
    groups: int,
    eps: float,
    affine: tuple[str | None, str | None],
) -> str:
    """x normalized over each group of C/G channels (and every other axis but the batch), then
    `affine` = (scale, shift), each a [C] value or None; the caller checks that G divides C."""
    name, xt = x
    flat = xt.with_shape((xt.shape[0], groups, xt.numel // (xt.shape[0] * groups)))
    dtype = numpy_dtype(xt.dtype)
    unit = em.constant(np.ones(flat.shape[-1], dtype), "ones")
    zero = em.constant(np.zeros(flat.shape[-1], dtype), "zeros")
    name = em.step("reshape", [name], flat, {"shape": flat.shape})
    name = em.step("layer_norm", [name, unit, zero], flat, {"eps": eps})
    steps = [(op, value) for op, value in zip(("mul", "add"), affine) if value is not None]
    if not steps:
        return em.last("reshape", [name], {"shape": xt.shape})
    name = em.step("reshape", [name], xt, {"shape": xt.shape})
    channel = xt.with_shape((xt.shape[1],) + (1,) * (xt.rank - 2))
    for i, (op, value) in enumerate(steps):
        per = em.step("reshape", [value], channel, {"shape": channel.shape})
        if i == len(steps) - 1:
            return em.last(op, [name, per])
        name = em.step(op, [name, per], xt)
    raise AssertionError("unreachable: `steps` is not empty")
