"""The elementwise ops, each declared once: everything every layer needs to know about one.

`ELEMENTWISE` is one literal dictionary sorted by name. An `ElementwiseOp` says:

- `family`: "arithmetic" or "logic" (`op_specs.FAMILIES`: the module that holds the op in any
  layer that splits by family);
- `arity` and `rule`, the shape and dtype rule (`op_rules`, `op_rules_logic`), and `attrs`;
- `flops` per result element, which the cost model reads (`op_costs.per_element`);
- `numpy`, the name of its reference semantics: `np.<name>` (one of NumPy's functions) or a
  function of `reference/elementwise.py`, called as `fn(*operands, **attributes)` on float32 (or
  integer, or bool) arrays; the reference interpreter widens and rounds around it. A name, not
  the function, so that the op table imports no NumPy (`optgraph passes` starts quickly);
- `cuda`, its C expression over the operands' compute values: a template (`{0}`, `{1}`, `{2}` the
  operands, `{name}` a float attribute as a C float literal) or a function of a
  `ScalarOperands` (`op_cuda`); `codegen/kernels/scalars.py` renders it into every kernel;
- `aten` and `onnx`: the ATen overloads and ONNX op types that map onto it one to one, operands
  in order and no attributes (the importers' generic unary and binary converters build those
  entries from here; a mapping that converts attributes or operands is a converter in the
  family's `frontends/aten_<family>_ops.py` or `onnx_<family>_ops.py`).

The op table (`ops.OPS`), the reference kernels (`reference/kernels.py`), the CUDA emitter
(`codegen/kernels/scalars.py`), the cost model and the importers read this table; adding an
elementwise op is one entry here (docs/adding-an-op.md). An entry, before and after:

    (absent)            %y = softplus(%x) : f32[4]   ->  softplus: unknown op 'softplus'
    "softplus": ElementwiseOp("arithmetic", 1, rules.unary_float, 8, "softplus",
                              "(og_max({0}, 0.0f) + log1pf(expf(-fabsf({0}))))", onnx=...)
                        %y = softplus(%x) : f32[4]   ->  verifies, runs, fuses, lowers to CUDA
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from optgraph.ir import op_cuda as cuda
from optgraph.ir import op_rules as rules
from optgraph.ir import op_rules_logic as logic
from optgraph.ir.graph import DTYPES
from optgraph.ir.op_costs import per_element
from optgraph.ir.op_cuda import CudaFn
from optgraph.ir.op_specs import AttrSpec, InferFn, OpDef


@dataclass(frozen=True)
class ElementwiseOp:
    """One elementwise op (see the module docstring)."""

    family: str
    arity: int
    rule: InferFn
    flops: int
    numpy: str
    cuda: str | CudaFn
    attrs: Mapping[str, AttrSpec] = field(default_factory=dict)
    aten: tuple[str, ...] = ()
    onnx: tuple[str, ...] = ()

    def opdef(self, name: str) -> OpDef:
        """Its entry in the op table: operand 0's buffer may hold the result."""
        cost = per_element(self.flops)
        return OpDef(
            name, self.family, "elementwise", self.arity, self.arity, self.rule, cost, self.attrs,
            inplace_operand=0,
        )  # fmt: skip


def _math(
    name: str, flops: int, numpy: str, cuda_text: str, torch: bool = True, onnx: bool = True
) -> ElementwiseOp:
    """A unary float function `name` (aten.<name>.default, ONNX <Name> when the flags say so)."""
    return ElementwiseOp(
        "arithmetic", 1, rules.unary_float, flops, numpy, cuda_text,
        aten=(f"aten.{name}.default",) if torch else (),
        onnx=(name.capitalize(),) if onnx else (),
    )  # fmt: skip


def _compare(numpy: str, cuda_text: str) -> ElementwiseOp:
    return ElementwiseOp("logic", 2, logic.compare, 1, numpy, cuda_text)


def _logical(arity: int, numpy: str, cuda_text: str) -> ElementwiseOp:
    rule = logic.logical_not if arity == 1 else logic.logical_binary
    return ElementwiseOp("logic", arity, rule, 1, numpy, cuda_text)


def _binary(
    numpy: str, cuda_text: str | CudaFn, aten: str = "", onnx: str = "", flops: int = 1
) -> ElementwiseOp:
    """A binary numeric op of the arithmetic family, mapped from `aten` and `onnx` when given."""
    return ElementwiseOp(
        "arithmetic", 2, rules.binary_numeric, flops, numpy, cuda_text,
        aten=(aten,) if aten else (), onnx=(onnx,) if onnx else (),
    )  # fmt: skip


_FLOAT = AttrSpec("float")

ELEMENTWISE: dict[str, ElementwiseOp] = {
    "abs": ElementwiseOp(
        "arithmetic", 1, rules.unary_numeric, 1, "np.abs", cuda.abs_,
        aten=("aten.abs.default",), onnx=("Abs",),
    ),
    "add": _binary("np.add", "({0} + {1})", "aten.add.Tensor", "Add"),
    "and": _logical(2, "np.logical_and", "({0} && {1})"),
    "cast": ElementwiseOp(
        "arithmetic", 1, rules.cast, 1, "cast", cuda.cast,
        {"dtype": AttrSpec("str", "f16", choices=DTYPES)},
    ),
    "clip": ElementwiseOp(
        "logic", 1, logic.clip, 2, "clip", cuda.clip, {"max": _FLOAT, "min": _FLOAT}
    ),
    "cos": _math("cos", 6, "np.cos", "cosf({0})"),
    "div": _binary("div", cuda.div, onnx="Div"),
    "equal": _compare("np.equal", "({0} == {1})"),
    "erf": _math("erf", 6, "erf", "erff({0})"),
    "exp": _math("exp", 4, "np.exp", "expf({0})"),
    "gelu": ElementwiseOp(
        "arithmetic", 1, rules.unary_float, 10, "gelu", cuda.gelu,
        {"approximate": AttrSpec("str", "tanh", choices=("tanh", "none"))},
    ),
    "greater": _compare("np.greater", "({0} > {1})"),
    "greater_equal": _compare("np.greater_equal", "({0} >= {1})"),
    "less": _compare("np.less", "({0} < {1})"),
    "less_equal": _compare("np.less_equal", "({0} <= {1})"),
    "log": _math("log", 4, "np.log", "logf({0})"),
    "maximum": _binary("np.maximum", "og_max({0}, {1})", "aten.maximum.default"),
    "minimum": _binary("np.minimum", "og_min({0}, {1})", "aten.minimum.default"),
    "mod": ElementwiseOp(
        "arithmetic", 2, rules.binary_numeric, 2, "mod", cuda.mod,
        {"fmod": AttrSpec("bool", False)},
    ),
    "mul": _binary("np.multiply", "({0} * {1})", "aten.mul.Tensor", "Mul"),
    "neg": ElementwiseOp(
        "arithmetic", 1, rules.unary_numeric, 1, "np.negative", "(-{0})",
        aten=("aten.neg.default",), onnx=("Neg",),
    ),
    "not": _logical(1, "np.logical_not", "(!{0})"),
    "or": _logical(2, "np.logical_or", "({0} || {1})"),
    "pow": ElementwiseOp(
        "arithmetic", 2, rules.binary_float, 8, "np.power", "powf({0}, {1})", onnx=("Pow",)
    ),
    "prelu": ElementwiseOp(
        "arithmetic", 2, rules.prelu, 2, "prelu", "({0} >= 0.0f ? {0} : {1} * {0})"
    ),
    "relu": ElementwiseOp(
        "arithmetic", 1, rules.unary_numeric, 1, "relu", cuda.relu,
        aten=("aten.relu.default",), onnx=("Relu",),
    ),
    "rsqrt": _math("rsqrt", 2, "rsqrt", "(1.0f / sqrtf({0}))", onnx=False),
    "scale": ElementwiseOp(
        "arithmetic", 1, rules.unary_float, 1, "scale", "({0} * {factor})",
        {"factor": AttrSpec("float", 1.0)},
    ),
    "sigmoid": _math("sigmoid", 5, "sigmoid", "og_sigmoid({0})"),
    "silu": _math("silu", 6, "silu", "({0} * og_sigmoid({0}))", onnx=False),
    "sin": _math("sin", 6, "np.sin", "sinf({0})"),
    "softplus": ElementwiseOp(
        "arithmetic", 1, rules.unary_float, 8, "softplus",
        "(og_max({0}, 0.0f) + log1pf(expf(-fabsf({0}))))", onnx=("Softplus",),
    ),
    "sqrt": _math("sqrt", 2, "np.sqrt", "sqrtf({0})"),
    "sub": _binary("np.subtract", "({0} - {1})", "aten.sub.Tensor", "Sub"),
    "tanh": _math("tanh", 6, "np.tanh", "tanhf({0})"),
    "where": ElementwiseOp("logic", 3, logic.where, 1, "where", "({0} ? {1} : {2})"),
}  # fmt: skip
