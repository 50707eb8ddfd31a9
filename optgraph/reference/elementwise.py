# NumPy's stubs type most array expressions as Any; returning them is the point of a function.
# mypy: disable-error-code="no-any-return"
"""The NumPy semantics of the elementwise ops that take more than one NumPy call, and the IR's
NumPy dtypes.

The elementwise table (`ir/op_elementwise.py`) names one function per op (`semantics`: a
function here, or `np.<name>` one of NumPy's), called as `fn(*operands, **attributes)` with the attributes the kernels see (`ops.attrs_with_defaults`). The
reference interpreter has already widened f16 and bf16 operands to float32 and rounds the result
to the node's dtype, so these compute in float32 (or the integer dtype) and never round:

    gelu(x, approximate="none")   ->  0.5·x·(1 + erf(x/√2)), erf exact to float64
    div(i32[-7, 7], i32[2, -2])   ->  [-3, -3]      (truncates toward zero, as C and ONNX Div)
    mod(i32[-7, 7], i32[2, -2])   ->  [1, -1]       (the divisor's sign; fmod=True the dividend's)

- an integer divided by zero gives 0 for `div` and `mod` (as the CUDA kernels do; NumPy and C
  leave it undefined), and the lowest integer divided by -1 wraps (quotient itself, remainder 0);
- `sigmoid` and `softplus` are written so that large |x| does not overflow.

The op table names them rather than holding them, so `ir` (and everything that only reads the
op table, such as `optgraph passes`) imports neither NumPy nor ml_dtypes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping

import ml_dtypes
import numpy as np

from optgraph.ir.graph import QUANT_BLOCKS

NUMPY_DTYPES: Mapping[str, np.dtype] = {
    "f32": np.dtype(np.float32),
    "f16": np.dtype(np.float16),
    "bf16": np.dtype(ml_dtypes.bfloat16),
    "i32": np.dtype(np.int32),
    "i64": np.dtype(np.int64),
    "bool": np.dtype(np.bool_),
}
_IR_DTYPES: Mapping[np.dtype, str] = {v: k for k, v in NUMPY_DTYPES.items()}
_BYTES = np.dtype(np.uint8)
F32 = np.float32


def numpy_dtype(dtype: str) -> np.dtype:
    """The NumPy dtype of an IR dtype name (`bf16` is `ml_dtypes.bfloat16`; a quantized dtype's
    arrays hold its blocks' bytes, `uint8`)."""
    found = NUMPY_DTYPES.get(dtype)
    return _BYTES if found is None and dtype in QUANT_BLOCKS else NUMPY_DTYPES[dtype]


def ir_dtype(dtype: np.dtype) -> str | None:
    """The IR dtype name of a NumPy dtype, None when the IR has no such dtype."""
    return _IR_DTYPES.get(np.dtype(dtype))


# -- arithmetic --------------------------------------------------------------------------------


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-x), without overflow for large |x|."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1 / (1 + e), e / (1 + e)).astype(x.dtype)


def silu(x: np.ndarray) -> np.ndarray:
    return x * sigmoid(x)


def softplus(x: np.ndarray) -> np.ndarray:
    """log(1 + e^x) as max(x, 0) + log1p(e^-|x|): no overflow for large x, exact for small e^x."""
    return np.maximum(x, x.dtype.type(0)) + np.log1p(np.exp(-np.abs(x)))


_ERF = np.frompyfunc(math.erf, 1, 1)


def erf(x: np.ndarray) -> np.ndarray:
    """The error function, exact to float64 (math.erf), in x's dtype."""
    return np.asarray(_ERF(x.astype(np.float64)), dtype=np.float64).astype(x.dtype)


def gelu(x: np.ndarray, approximate: str) -> np.ndarray:
    if approximate == "none":
        return F32(0.5) * x * (F32(1) + erf(x / F32(math.sqrt(2.0))))
    inner = F32(math.sqrt(2.0 / math.pi)) * (x + F32(0.044715) * x * x * x)
    return F32(0.5) * x * (F32(1) + np.tanh(inner))


def relu(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, x.dtype.type(0))


def rsqrt(x: np.ndarray) -> np.ndarray:
    return 1 / np.sqrt(x)


def cast(x: np.ndarray, dtype: str) -> np.ndarray:
    return x.astype(numpy_dtype(dtype))


def scale(x: np.ndarray, factor: float) -> np.ndarray:
    return x * F32(factor)


def prelu(x: np.ndarray, slope: np.ndarray) -> np.ndarray:
    return np.where(x >= 0, x, slope * x)


def _safe_divisor(b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(divisor with zeros and -1s replaced by 1, where it was zero)."""
    zero = b == 0
    return np.where(zero | (b == -1), np.ones_like(b), b), zero


def div(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    if not np.issubdtype(a.dtype, np.integer):
        return np.divide(a, b)
    safe, zero = _safe_divisor(b)
    quotient = np.floor_divide(a, safe)
    inexact = (np.remainder(a, safe) != 0) & ((a < 0) != (safe < 0))
    quotient = quotient + inexact.astype(a.dtype)
    negated = np.negative(a)  # the lowest integer negates to itself: it wraps, as in C
    return np.where(zero, np.zeros_like(a), np.where(b == -1, negated, quotient))


def mod(a: np.ndarray, b: np.ndarray, fmod: bool) -> np.ndarray:
    a, b = np.broadcast_arrays(a, b)
    remainder = np.fmod if fmod else np.mod
    if not np.issubdtype(a.dtype, np.integer):
        return remainder(a, b)
    safe, zero = _safe_divisor(b)
    return np.where(zero | (b == -1), np.zeros_like(a), remainder(a, safe))


# -- logic -------------------------------------------------------------------------------------


def clip(x: np.ndarray, min: float | None = None, max: float | None = None) -> np.ndarray:
    """Bounded by the given bounds; NaN stays NaN (np.maximum and np.minimum keep it)."""
    if min is not None:
        x = np.maximum(x, np.float32(min))
    if max is not None:
        x = np.minimum(x, np.float32(max))
    return x


def where(cond: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return np.where(cond, a, b)


def semantics(name: str) -> Callable[..., np.ndarray]:
    """The function an elementwise declaration names: `np.<name>` is NumPy's, any other name this
    module's (`semantics("np.exp") is np.exp`, `semantics("softplus") is softplus`)."""
    if name.startswith("np."):
        return getattr(np, name.removeprefix("np."))
    function = globals().get(name)
    if not callable(function):
        raise KeyError(f"no NumPy semantics named '{name}' in optgraph.reference.elementwise")
    return function
