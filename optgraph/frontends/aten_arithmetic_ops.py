"""ATen arithmetic that is no one-to-one elementwise mapping (those the elementwise declarations
list, `ir/op_elementwise.py`): remainders and rounding divisions -> IR `mod` and `div`
(ring-buffer cache slots, position arithmetic), prelu, softplus:

    slot = pos % window                    aten.remainder        -> mod
    torch.fmod(a, b)                       aten.fmod             -> mod {fmod = true}
    torch.div(a, b, rounding_mode="trunc") aten.div.Tensor_mode  -> div        (integers)
    a // b                                 aten.floor_divide     -> div(sub(a, mod(a, b)), b)
    F.prelu(x, w)                          aten._prelu_kernel    -> prelu, w [C] reshaped to
                                                                    [C,1,..]
    F.softplus(x, beta)                    aten.softplus         -> softplus (beta: scale before
                                                                    and after; threshold >= 20)

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


def _prelu(ctx: TorchContext, node: Any) -> None:
    x, w = ctx.type_of(node.args[0]), ctx.type_of(node.args[1])
    slope = ctx.name_of(node.args[1])
    if w.rank == 1 and w.numel > 1 and x.rank >= 2:  # one slope per channel (axis 1)
        per_channel = w.with_shape((w.numel,) + (1,) * (x.rank - 2))
        slope = ctx.step(node, "reshape", [slope], per_channel, {"shape": per_channel.shape})
    ctx.emit(node, "prelu", [ctx.name_of(node.args[0]), slope])


def _softplus(ctx: TorchContext, node: Any) -> None:
    """F.softplus(x, beta, threshold) = softplus(beta·x) / beta. PyTorch returns x itself where
    beta·x > threshold; at the default 20 that is the float32 value of softplus too."""
    beta = float(arg(node, 1, "beta", 1.0))
    threshold = float(arg(node, 2, "threshold", 20.0))
    if threshold < 20.0:
        raise unsupported(node, f"threshold={threshold} (below 20, PyTorch's x is not softplus)")
    x = ctx.name_of(node.args[0])
    if beta == 1.0:
        ctx.emit(node, "softplus", [x])
        return
    out = ctx.result_type(node)
    scaled = ctx.step(node, "scale", [x], out, {"factor": beta})
    soft = ctx.step(node, "softplus", [scaled], out)
    ctx.emit(node, "scale", [soft], {"factor": 1.0 / beta})


ARITHMETIC_CONVERTERS: dict[str, Converter] = {
    "aten._prelu_kernel.default": _prelu,
    "aten.div.Scalar_mode": _rounding_div,
    "aten.div.Tensor_mode": _rounding_div,
    "aten.floor_divide.default": _floor_div,
    "aten.fmod.Scalar": _remainder(True),
    "aten.fmod.Tensor": _remainder(True),
    "aten.prelu.default": _prelu,
    "aten.remainder.Scalar": _remainder(False),
    "aten.remainder.Tensor": _remainder(False),
    "aten.softplus.default": _softplus,
}
