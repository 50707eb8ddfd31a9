"""ONNX arithmetic that is no one-to-one elementwise mapping (those the elementwise declarations
list, `ir/op_elementwise.py`): Mod -> IR `mod` (`fmod` as the attribute says: 0 takes the
divisor's sign, 1 the dividend's, as C fmod), Reciprocal, PRelu. Div of integers maps through
the declarations as `div`, which truncates.

    Mod(pos, window)            -> mod
    Mod(x, y) {fmod = 1}        -> mod {fmod = true}
    Reciprocal(x)               -> div(1, x); of a Sqrt(v): rsqrt(v) (the dynamo exporter's
                                   rsqrt, so the RMSNorm raising sees it)
    PRelu(x, slope)             -> prelu
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from optgraph.frontends.onnx_context import Converter, OnnxContext
from optgraph.reference.kernels import numpy_dtype


def _mod(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    fmod = bool(attrs.get("fmod", 0))
    operands = [ctx.name(node.input[0]), ctx.name(node.input[1])]
    ctx.emit(node, "mod", operands, {"fmod": True} if fmod else None)


def _reciprocal(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    x = ctx.type_of(node.input[0])
    if not x.dtype.startswith(("f", "bf")):
        raise ctx.error(node, f"a reciprocal of {x.dtype} values")
    name = ctx.name(node.input[0])
    root = ctx.draft.producer(name)
    if root is not None and root.op == "sqrt":  # 1 / sqrt(v): rsqrt(v), which norms raise from
        ctx.emit(node, "rsqrt", [root.operands[0]])
        return
    one = ctx.draft.constant(np.array(1.0, numpy_dtype(x.dtype)), "one")
    ctx.emit(node, "div", [one, name])


def _prelu(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    ctx.emit(node, "prelu", [ctx.name(node.input[0]), ctx.name(node.input[1])])


ARITHMETIC_CONVERTERS: dict[str, Converter] = {
    "Mod": _mod,
    "PRelu": _prelu,
    "Reciprocal": _reciprocal,
}
