"""The CUDA C of the elementwise ops whose expression depends on a dtype or an attribute, and the
C vocabulary every elementwise declaration is written in.

An elementwise op's CUDA (`ElementwiseOp.cuda` in `op_elementwise`) is one C expression over its
operands' compute values (float32 for every float dtype; integers and bool in their own type):
a template, `{0}`, `{1}`, `{2}` the operands and `{name}` a float attribute as an exact C float
literal, or, where the text depends on the dtypes or on the attributes, a function here that
takes a `ScalarOperands` and returns the text:

    "expf({0})"            %y = exp(%x)                    ->  expf(p0)
    "({0} * {factor})"     %y = scale(%x) {factor = 2.0}   ->  (p0 * 2.000000000e+00f)
    div                    %y = div(%a, %b) : i32[4]       ->  og_idiv(p0, p1)

The `og_*` helpers (`og_max`, `og_sigmoid`, `og_idiv`, the f16/bf16 conversions) are defined in
`codegen/cuda_prelude.py`; `codegen/kernels/scalars.py` renders the expressions into kernels.
Here, not in codegen, because the op table's declarations name them and `ir` must not import
the layers above it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from optgraph.ir.graph import FLOAT_DTYPES, AttrValue

# The C type of each IR dtype's compute value (f16 and bf16 compute in float).
COMPUTE: dict[str, str] = {
    "f32": "float",
    "f16": "float",
    "bf16": "float",
    "i32": "int",
    "i64": "long long",
    "bool": "bool",
}


def f32_literal(value: float) -> str:
    """A C float literal that is exactly `value` rounded to float32 (inf and nan spelled out)."""
    import numpy as np  # here, not at the top: reading the op table needs no NumPy

    v = np.float32(value)
    if np.isnan(v):
        return "__int_as_float(0x7fc00000)"
    if np.isinf(v):
        return "__int_as_float(0x7f800000)" if v > 0 else "__int_as_float(0xff800000)"
    return f"{float(v):.9e}f"


@dataclass(frozen=True)
class ScalarOperands:
    """What one node's C expression is written over: its operands' C compute values and IR
    dtypes, its result dtype, and its attributes with defaults (floats as C float literals)."""

    args: Sequence[str]
    arg_dtypes: Sequence[str]
    dtype: str
    attrs: Mapping[str, AttrValue]


CudaFn = Callable[[ScalarOperands], str]

_SQRT_2_OVER_PI = 0.7978845608028654
_INV_SQRT_2 = 0.7071067811865476


def _zero(dtype: str) -> str:
    return {"i64": "0LL", "i32": "0"}.get(dtype, "0.0f")


def div(s: ScalarOperands) -> str:
    a, b = s.args[0], s.args[1]
    return f"({a} / {b})" if s.dtype in FLOAT_DTYPES else f"og_idiv({a}, {b})"


def mod(s: ScalarOperands) -> str:
    return f"og_{'rem' if s.attrs['fmod'] else 'mod'}({s.args[0]}, {s.args[1]})"


def abs_(s: ScalarOperands) -> str:
    a = s.args[0]
    return f"fabsf({a})" if s.dtype in FLOAT_DTYPES else f"({a} < 0 ? -{a} : {a})"


def relu(s: ScalarOperands) -> str:
    return f"og_max({s.args[0]}, {_zero(s.dtype)})"


def clip(s: ScalarOperands) -> str:
    """og_max/og_min keep a NaN operand NaN, as NumPy's clip does."""
    a = s.args[0]
    if "min" in s.attrs:
        a = f"og_max({a}, {s.attrs['min']})"
    if "max" in s.attrs:
        a = f"og_min({a}, {s.attrs['max']})"
    return a


def gelu(s: ScalarOperands) -> str:
    a = s.args[0]
    if s.attrs["approximate"] == "none":
        return f"(0.5f * {a} * (1.0f + erff({a} * {f32_literal(_INV_SQRT_2)})))"
    cubic = f"{f32_literal(0.044715)} * {a} * {a} * {a}"
    inner = f"{f32_literal(_SQRT_2_OVER_PI)} * ({a} + {cubic})"
    return f"(0.5f * {a} * (1.0f + tanhf({inner})))"


def convert(from_dtype: str, to_dtype: str, expr: str) -> str:
    """A compute value of `from_dtype` as a compute value of `to_dtype` (NumPy astype rules)."""
    if COMPUTE[from_dtype] == COMPUTE[to_dtype]:
        return expr
    if to_dtype == "bool":
        return f"(({expr}) != 0)"
    return f"(({COMPUTE[to_dtype]})({expr}))"


def cast(s: ScalarOperands) -> str:
    """Converted, then rounded to f16 or bf16 when that is the result dtype."""
    value = convert(s.arg_dtypes[0], s.dtype, s.args[0])
    if s.dtype == "f16":
        return f"og_f16_to_f32(og_f32_to_f16({value}))"
    if s.dtype == "bf16":
        return f"og_bf16_to_f32(og_f32_to_bf16({value}))"
    return value
