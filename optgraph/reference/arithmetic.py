# NumPy's stubs type most array expressions as Any; returning them is the point of a kernel.
# mypy: disable-error-code="no-any-return"
"""NumPy kernels of `div`, `mod`, `less_equal` and `greater_equal`: the semantics of docs/ir.md,
with the signature of `kernels.KERNELS`.

- `div` of integers truncates toward zero (C, ONNX Div); of floats it is IEEE division;
- `mod` takes the sign of the divisor (Python `%`, `torch.remainder`, ONNX Mod `fmod = 0`), or
  with `fmod = true` the sign of the dividend (C `fmod`, `torch.fmod`, ONNX Mod `fmod = 1`);
- an integer divided by zero gives 0 for both (as the CUDA kernels do; NumPy and C leave it
  undefined), and the lowest integer divided by -1 wraps (quotient itself, remainder 0);
- `less_equal` and `greater_equal` are false where an operand is NaN (unlike not(greater)).

    div(i32[-7, 7], i32[2, -2]) = [-3, -3]     mod(i32[-7, 7], i32[2, -2]) = [1, -1]
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from optgraph.ir.graph import AttrValue, Node

Attrs = Mapping[str, AttrValue]


def _safe_divisor(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(divisor with zeros and -1s replaced by 1, where it was zero)."""
    zero = b == 0
    return np.where(zero | (b == -1), np.ones_like(b), b), zero


def div(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    a, b = np.broadcast_arrays(*args)
    if not np.issubdtype(a.dtype, np.integer):
        return np.divide(a, b)
    safe, zero = _safe_divisor(b)
    quotient = np.floor_divide(a, safe)
    inexact = (np.remainder(a, safe) != 0) & ((a < 0) != (safe < 0))
    quotient = quotient + inexact.astype(a.dtype)
    negated = np.negative(a)  # the lowest integer negates to itself: it wraps, as in C
    return np.where(zero, np.zeros_like(a), np.where(b == -1, negated, quotient))


def mod(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    a, b = np.broadcast_arrays(*args)
    remainder = np.fmod if attrs.get("fmod") else np.mod
    if not np.issubdtype(a.dtype, np.integer):
        return remainder(a, b)
    safe, zero = _safe_divisor(b)
    return np.where(zero | (b == -1), np.zeros_like(a), remainder(a, safe))


def less_equal(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    return np.less_equal(args[0], args[1])


def greater_equal(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    return np.greater_equal(args[0], args[1])


KERNELS = {
    "div": div,
    "greater_equal": greater_equal,
    "less_equal": less_equal,
    "mod": mod,
}
