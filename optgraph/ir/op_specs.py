"""How one op is described (`OpDef`, `AttrSpec`) and how a node is checked against its description.

The op table (`ir/ops.py`) is written in this vocabulary: per op a family (`FAMILIES`), a
category, an arity range, a type rule, a cost function and attribute specs.
`checked_attrs(node, opdef)` checks a node's attributes against the specs (unknown names with a
"did you mean", missing required ones, wrong kinds, strings outside their choices) and fills the
defaults; `check_arity` checks the operand count; both raise `VerifyError` at the node's span:

    %y = softmax(%x) {axis = "1"} : f32[2,4]
    ->  softmax: attribute 'axis' must be an int, got "1"

`normalized` and `fill_defaults` give the attributes as a kernel sees them (floats as float,
lists as tuples, defaults filled) without checking.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from optgraph.errors import VerifyError, did_you_mean
from optgraph.ir.graph import AttrValue, Node, TensorType
from optgraph.ir.op_costs import Cost
from optgraph.ir.printer import format_literal

CATEGORIES: tuple[str, ...] = (
    "elementwise",
    "reduction",
    "matmul",
    "data_movement",
    "opaque",
    "collective",
)
ATTR_KINDS: Mapping[str, str] = {
    "bool": "a bool",
    "int": "an int",
    "float": "a float",
    "str": "a string",
    "ints": "an integer list",
}

InferFn = Callable[[Node, Sequence[TensorType], Mapping[str, AttrValue]], TensorType]
CostFn = Callable[[Node, Sequence[TensorType], TensorType, Mapping[str, AttrValue]], Cost]


@dataclass(frozen=True)
class AttrSpec:
    """One attribute: its kind, default (None: none), whether it must be given, allowed strings.

    `default_from` names another attribute whose value is the default (a pool's stride = kernel).
    """

    kind: str
    default: AttrValue | None = None
    required: bool = False
    choices: tuple[str, ...] = ()
    default_from: str | None = None


# What an op is, by which module holds it in every layer (ir/op_rules_<family>.py,
# reference/<family>.py, frontends/aten_<family>_ops.py and onnx_<family>_ops.py, the headings of
# docs/ir.md's op table): one name per op everywhere. `category` is what fusion and scheduling may
# assume; the family is where to find it.
FAMILIES: tuple[str, ...] = (
    "arithmetic",
    "logic",
    "indexing",
    "reduction",
    "matmul",
    "data_movement",
    "image",
    "rope",
    "attention",
    "collective",
    "dequantize",
    "moe",
    "fused",
)


@dataclass(frozen=True)
class OpDef:
    name: str
    family: str
    category: str
    min_arity: int
    max_arity: int | None
    infer: InferFn
    cost: CostFn
    attrs: Mapping[str, AttrSpec] = field(default_factory=dict)
    is_view: bool = False
    inplace_operand: int | None = None
    # The operands that may be quantized weights (`QUANT_BLOCKS`); `infer_type` refuses a
    # quantized value anywhere else (a fused node's operands: wherever its body reads them).
    quantized_operands: tuple[int, ...] = ()


def fail(node: Node, message: str) -> VerifyError:
    return VerifyError(f"{node.op}: {message}", node.span)


def _has_kind(value: object, kind: str) -> bool:
    if isinstance(value, bool):
        return kind == "bool"
    if kind == "int":
        return isinstance(value, int)
    if kind == "float":
        return isinstance(value, (int, float))
    if kind == "str":
        return isinstance(value, str)
    if kind == "ints":
        return isinstance(value, (tuple, list)) and all(
            isinstance(v, int) and not isinstance(v, bool) for v in value
        )
    return False


def _choices_text(choices: Sequence[str]) -> str:
    quoted = [format_literal(c) for c in choices]
    if len(quoted) == 2:
        return f"{quoted[0]} or {quoted[1]}"
    return "one of " + ", ".join(quoted)


def normalized(value: AttrValue, kind: str) -> AttrValue:
    if kind == "float":
        assert isinstance(value, (int, float))
        return float(value)
    if kind == "ints":
        assert isinstance(value, (tuple, list))
        return tuple(value)
    return value


def checked_attrs(node: Node, opdef: OpDef) -> dict[str, AttrValue]:
    """The node's attributes checked against the op's specs, with defaults filled in."""
    specs = opdef.attrs
    for key in sorted(node.attrs):
        if key not in specs:
            if not specs:
                hint = f" ({node.op} takes no attributes)"
            else:
                hint = did_you_mean(key, list(specs)) or f" (expected one of: {', '.join(specs)})"
            raise fail(node, f"unknown attribute '{key}'{hint}")
    resolved: dict[str, AttrValue] = {}
    for key, spec in specs.items():
        if key not in node.attrs:
            if spec.required:
                raise fail(node, f"missing required attribute '{key}'")
            continue
        value = node.attrs[key]
        if not _has_kind(value, spec.kind):
            raise fail(
                node,
                f"attribute '{key}' must be {ATTR_KINDS[spec.kind]}, got {format_literal(value)}",
            )
        if spec.choices and value not in spec.choices:
            raise fail(
                node,
                f"attribute '{key}' must be {_choices_text(spec.choices)}, "
                f"got {format_literal(value)}",
            )
        resolved[key] = normalized(value, spec.kind)
    return fill_defaults(resolved, specs)


def fill_defaults(
    resolved: dict[str, AttrValue], specs: Mapping[str, AttrSpec]
) -> dict[str, AttrValue]:
    for key, spec in specs.items():
        if key in resolved:
            continue
        if spec.default is not None:
            resolved[key] = spec.default
        elif spec.default_from is not None and spec.default_from in resolved:
            resolved[key] = resolved[spec.default_from]
    return resolved


def check_arity(node: Node, opdef: OpDef, count: int) -> None:
    lo, hi = opdef.min_arity, opdef.max_arity
    if lo <= count and (hi is None or count <= hi):
        return
    if hi is None:
        expected = f"at least {lo}"
    elif lo == hi:
        expected = str(lo)
    else:
        expected = f"{lo} to {hi}"
    plural = "" if expected in ("1", "at least 1") else "s"
    raise fail(node, f"expected {expected} operand{plural}, got {count}")


def typed_value(value: object) -> object:
    """`value` with its Python type (elements' types for a list): `True == 1` and `1.0 == 1`,
    but a rule accepts only one of each."""
    if isinstance(value, (tuple, list)):
        return type(value), tuple((type(v), v) for v in value)
    return type(value), value


def attrs_key_of(attrs: Mapping[str, AttrValue]) -> tuple[object, ...]:
    """The attributes with their Python types (`typed_value`), in order: the key of memos of
    what only op, attributes and types decide (`ops.remembered_type`, `ops.cost`)."""
    if not attrs:
        return ()
    return tuple(
        [
            (k, typed_value(v) if isinstance(v, tuple | list) else (type(v), v))
            for k, v in attrs.items()
        ]
    )
