"""Elementwise IR nodes as C statements over float32 scalars: what every per-element body shares.

The elementwise kernels, fused regions, reduction prologues and epilogues, the one-row products'
epilogues and row prologues all evaluate IR nodes one element at a time. This module turns such
nodes into C: `load_params` reads each operand at its broadcast offset, `emit_scalars` computes
the nodes in order, `scalar_expr` is one node as an expression of its operands:

    %t = add(%p0, %p1)  %y = relu(%t)      (p0 : f32[4,64], p1 : f32[64])
    ->  const float p0 = in0[i];  const float p1 = in1[i % 64u];
        const float v0 = (p0 + p1);  const float v1 = og_max(v0, 0.0f);

Values stay in their compute type (float32 for every float dtype); a `cast` to f16 or bf16
still rounds. `env` maps an IR value to its (C variable, dtype) and grows as statements are
emitted. Each node's expression is its op's declared `cuda` (`ir/op_elementwise.py`). Not
handled here: anything but the elementwise ops of `SCALAR_OPS` (a reduction or a product is the
anchor of its kernel, emitted by its own family).
"""

from __future__ import annotations

from collections.abc import Sequence

from optgraph.codegen.cuda_source import (
    COMPUTE,
    CodegenError,
    broadcast_offset,
    f32_literal,
    load,
)
from optgraph.ir.graph import Node, TensorType
from optgraph.ir.op_cuda import ScalarOperands
from optgraph.ir.op_elementwise import ELEMENTWISE
from optgraph.ir.ops import attrs_with_defaults

# The ops a per-element body can hold: every elementwise op of the table.
SCALAR_OPS = frozenset(ELEMENTWISE)


def scalar_expr(node: Node, args: Sequence[str], arg_dtypes: Sequence[str]) -> str:
    """One elementwise node as a C expression of its operands' compute values: its declared
    `cuda` (`ir/op_elementwise.py`), a template filled with the operands and the float
    attributes as C literals, or a function of them."""
    assert node.type is not None
    op = ELEMENTWISE.get(node.op)
    if op is None:
        raise CodegenError(f"{node.op}: not an elementwise op", node.span)
    attrs = {
        k: f32_literal(v) if isinstance(v, float) else v
        for k, v in attrs_with_defaults(node).items()
    }
    if isinstance(op.cuda, str):
        return op.cuda.format(*args, **attrs)
    return op.cuda(ScalarOperands(tuple(args), tuple(arg_dtypes), node.type.dtype, attrs))


def emit_scalars(nodes: Sequence[Node], env: dict[str, tuple[str, str]], prefix: str) -> list[str]:
    """C statements computing `nodes` in order; `env` maps value -> (C variable, dtype) and grows."""
    lines = []
    for k, n in enumerate(nodes):
        assert n.type is not None
        for o in n.operands:
            if o not in env:
                raise CodegenError(f"fused: body value '%{o}' is not available here", n.span)
        args = [env[o][0] for o in n.operands]
        dtypes = [env[o][1] for o in n.operands]
        var = f"{prefix}{k}"
        lines.append(f"const {COMPUTE[n.type.dtype]} {var} = {scalar_expr(n, args, dtypes)};")
        env[n.name] = (var, n.type.dtype)
    return lines


def load_params(
    params: Sequence[str],
    types: Sequence[TensorType],
    roles: Sequence[str],
    used: set[str],
    index: str,
    target: Sequence[int],
    env: dict[str, tuple[str, str]],
    prefix: str = "p",
) -> list[str]:
    """Statements loading each used parameter at its broadcast offset for `index` of `target`."""
    lines = []
    for k, (name, t, role) in enumerate(zip(params, types, roles)):
        if name not in used:
            continue
        var = f"{prefix}{k}"
        offset = broadcast_offset(index, t.shape, target)
        lines.append(f"const {COMPUTE[t.dtype]} {var} = {load(t.dtype, f'{role}[{offset}]')};")
        env[name] = (var, t.dtype)
    return lines


def used_values(nodes: Sequence[Node], extra: Sequence[str] = ()) -> set[str]:
    """Every value `nodes` read, and `extra`."""
    return {o for n in nodes for o in n.operands} | set(extra)


def needed_values(prologue: Sequence[Node], value: str) -> set[str]:
    """`value` and every value it is computed from inside the prologue."""
    by_name = {n.name: n for n in prologue}
    needed, stack = set(), [value]
    while stack:
        name = stack.pop()
        if name in needed:
            continue
        needed.add(name)
        if name in by_name:
            stack.extend(by_name[name].operands)
    return needed
