"""ONNX Mod -> IR `mod` (`fmod` as the attribute says: 0 takes the divisor's sign, 1 the
dividend's, as C fmod). Div of integers maps through `onnx_ops` as `div`, which truncates.

    Mod(pos, window)            -> mod
    Mod(x, y) {fmod = 1}        -> mod {fmod = true}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from optgraph.frontends.onnx_context import Converter, OnnxContext


def _mod(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    fmod = bool(attrs.get("fmod", 0))
    operands = [ctx.name(node.input[0]), ctx.name(node.input[1])]
    ctx.emit(node, "mod", operands, {"fmod": True} if fmod else None)


ARITHMETIC_CONVERTERS: dict[str, Converter] = {
    "Mod": _mod,
}
