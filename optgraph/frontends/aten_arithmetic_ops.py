"""ATen remainders and rounding divisions -> IR `mod` and `div` (ring-buffer cache slots,
position arithmetic):

    slot = pos % window                    aten.remainder        -> mod
    torch.fmod(a, b)                       aten.fmod             -> mod {fmod = true}
    torch.div(a, b, rounding_mode="trunc") aten.div.Tensor_mode  -> div        (integers)
    a // b                                 aten.floor_divide     -> div(sub(a, mod(a, b)), b)

Floor division of integers is exact that way: `a - a mod b` is a multiple of b with the
divisor's sign taken care of, so the truncating `div` rounds nothing. Rounding divisions of
floats are refused (the IR has no trunc/floor). Operands take the result's dtype, as PyTorch
promotes them.
"""

from __future__ import annotations

from typing import Any

from optgraph.frontends.torch_values import Converter, TorchContext, arg, unsupported
from optgraph.ir.graph import FLOAT_DTYPES


def _operands(ctx: TorchContext, node: Any) -> list[str]:
    out = ctx.result_type(node)
    return [ctx.operand(node.args[0], out), ctx.operand(node.args[1], out)]


def _remainder(fmod: bool) -> Converter:
    def convert(ctx: TorchContext, node: Any) -> None:
        ctx.emit(node, "mod", _operands(ctx, node), {"fmod": True} if fmod else None)

    return convert


def _floor_divide(ctx: TorchContext, node: Any, operands: list[str]) -> None:
    out = ctx.result_type(node)
    a, b = operands
    remainder = ctx.step(node, "mod", [a, b], out)
    exact = ctx.step(node, "sub", [a, remainder], out)
    ctx.emit(node, "div", [exact, b])


def _rounding_div(ctx: TorchContext, node: Any) -> None:
    mode = arg(node, 2, "rounding_mode")
    out = ctx.result_type(node)
    if mode is None:
        ctx.emit(node, "div", _operands(ctx, node))
        return
    if out.dtype in FLOAT_DTYPES:
        raise unsupported(node, f"rounding_mode={mode!r} on {out.dtype} (no trunc/floor op)")
    if mode == "trunc":
        ctx.emit(node, "div", _operands(ctx, node))
    else:
        _floor_divide(ctx, node, _operands(ctx, node))


def _floor_div(ctx: TorchContext, node: Any) -> None:
    out = ctx.result_type(node)
    if out.dtype in FLOAT_DTYPES:
        raise unsupported(node, f"floor division on {out.dtype} (no floor op)")
    _floor_divide(ctx, node, _operands(ctx, node))


ARITHMETIC_CONVERTERS: dict[str, Converter] = {
    "aten.div.Scalar_mode": _rounding_div,
    "aten.div.Tensor_mode": _rounding_div,
    "aten.floor_divide.default": _floor_div,
    "aten.fmod.Scalar": _remainder(True),
    "aten.fmod.Tensor": _remainder(True),
    "aten.remainder.Scalar": _remainder(False),
    "aten.remainder.Tensor": _remainder(False),
}
