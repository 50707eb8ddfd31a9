"""ONNX Einsum -> sums, transposes, reshapes and one batched product per pair of operands (the
forms exporters write: diffusers' unpatchify `nhwpqc->nchpwq`, outer products `...n,d->...nd`,
attention's `bhqd,bhkd->bhqk`, `bchw,bkhw->bck`).

    Einsum(a, b) {equation = "bhqd,bhkd->bhqk"}
    ->  %p = matmul(%a, %b) {transpose_b = true} : [b·h, q, k] (reshaped in and out as needed)

Each operand first sums the letters no other operand and not the output has; two operands are
then contracted as one `matmul {transpose_b}`: batch letters (both and the output), the left's
and the right's own letters (the rows and the columns), the shared letters the output drops
(the inner dimension), each group flattened; more operands are contracted left to right. The
result is transposed to the output's order. `...` stands for the same number of axes in each
operand (right-aligned, broadcast where one has size 1: `expand`); implicit outputs (no `->`)
are `...` then the letters seen once, sorted. Refused, each named: a letter repeated within one
term (a diagonal or trace), a letter of the output no operand has, a shared letter summed over
sizes that differ, boolean operands.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from optgraph.frontends.onnx_context import Converter, OnnxContext
from optgraph.ir.graph import TensorType

_ELLIPSIS_LETTERS = "0123456789"  # never an equation's own letters


@dataclass(frozen=True)
class _Operand:
    """A value and its letters, one an axis."""

    name: str
    letters: str
    type: TensorType


class _Refused(Exception):
    """An equation this lowering does not take; the message says why."""


def parse(equation: str, ranks: Sequence[int]) -> tuple[list[str], str]:
    """(the operands' letters, the output's letters) with `...` spelled as digits."""
    text = equation.replace(" ", "")
    lhs, arrow, rhs = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(ranks):
        raise _Refused(f"equation '{equation}' has {len(terms)} terms for {len(ranks)} inputs")
    spans = [rank - (len(t) - 3) if "..." in t else 0 for t, rank in zip(terms, ranks)]
    width = max(spans, default=0)
    if width > len(_ELLIPSIS_LETTERS) or min(spans, default=0) < 0:
        raise _Refused(f"equation '{equation}': '...' does not fit the inputs' ranks")
    expanded = []
    for term, rank, span in zip(terms, ranks, spans):
        named = term.replace("...", _ELLIPSIS_LETTERS[width - span : width])
        if len(named) != rank or not all(c.isalpha() or c.isdigit() for c in named):
            raise _Refused(f"term '{term}' of '{equation}' does not match an input of rank {rank}")
        if len(set(named)) != len(named):
            raise _Refused(f"term '{term}' repeats a letter (diagonals and traces)")
        expanded.append(named)
    if arrow:
        out = rhs.replace("...", _ELLIPSIS_LETTERS[:width])
    else:
        seen = "".join(expanded)
        out = _ELLIPSIS_LETTERS[:width] + "".join(
            sorted(c for c in set(seen) if c.isalpha() and seen.count(c) == 1)
        )
    if len(set(out)) != len(out) or any(c not in "".join(expanded) for c in out):
        raise _Refused(f"output '{rhs}' of '{equation}' repeats a letter or has one no input has")
    return expanded, out


def _sizes(operands: Sequence[_Operand]) -> dict[str, int]:
    sizes: dict[str, int] = {}
    for op in operands:
        for letter, size in zip(op.letters, op.type.shape):
            known = sizes.get(letter, 1)
            if size != 1 and known != 1 and size != known:
                raise _Refused(f"letter '{letter}' has sizes {known} and {size}")
            sizes[letter] = max(known, size)
    return sizes


class _Lowering:
    """The nodes of one Einsum, through the context (types from the op table)."""

    def __init__(self, ctx: OnnxContext, node: Any, sizes: Mapping[str, int]) -> None:
        self.ctx, self.node, self.sizes = ctx, node, sizes

    def step(self, op: str, operand: _Operand, letters: str, attrs: dict[str, Any]) -> _Operand:
        name = self.ctx.step(self.node, op, [operand.name], attrs)
        return _Operand(name, letters, self.ctx.draft.type_of(name))

    def ordered(self, op: _Operand, letters: str) -> _Operand:
        """`op` transposed to `letters`' order (which must be its letters)."""
        if op.letters == letters:
            return op
        perm = tuple(op.letters.index(c) for c in letters)
        return self.step("transpose", op, letters, {"perm": perm})

    def reshaped(self, op: _Operand, shape: tuple[int, ...], letters: str = "") -> _Operand:
        """`op` reshaped to `shape`, its axes now `letters`."""
        if op.type.shape == shape:
            return _Operand(op.name, letters, op.type)
        return self.step("reshape", op, letters, {"shape": shape})

    def summed(self, op: _Operand, keep: str) -> _Operand:
        """`op` with the letters not in `keep` summed away."""
        axes = tuple(i for i, c in enumerate(op.letters) if c not in keep)
        if not axes:
            return op
        left = "".join(c for c in op.letters if c in keep)
        return self.step("sum", op, left, {"axes": axes, "keepdims": False})

    def broadcast(self, op: _Operand, letters: str) -> _Operand:
        """`op` with its size-1 axes among `letters` expanded to the letters' sizes."""
        shape = tuple(
            self.sizes[c] if c in letters else d for c, d in zip(op.letters, op.type.shape)
        )
        if shape == op.type.shape:
            return op
        return self.step("expand", op, op.letters, {"shape": shape})

    def contract(self, a: _Operand, b: _Operand, keep: str) -> _Operand:
        """a and b as one product: the letters in `keep` stay, the shared others are summed."""
        a = self.summed(a, keep + b.letters)
        b = self.summed(b, keep + a.letters)
        batch = "".join(c for c in a.letters if c in b.letters and c in keep)
        inner = "".join(c for c in a.letters if c in b.letters and c not in keep)
        rows = "".join(c for c in a.letters if c not in b.letters)
        cols = "".join(c for c in b.letters if c not in a.letters)
        for c in inner:
            if a.type.shape[a.letters.index(c)] != b.type.shape[b.letters.index(c)]:
                raise _Refused(f"letter '{c}' is summed over sizes that differ")
        a, b = self.broadcast(a, batch), self.broadcast(b, batch)

        def flat(letters: str) -> int:
            return math.prod(self.sizes[c] for c in letters)

        lead = (flat(batch),) if batch else ()
        left = self.reshaped(
            self.ordered(a, batch + rows + inner), (*lead, flat(rows), flat(inner))
        )
        right = self.reshaped(
            self.ordered(b, batch + cols + inner), (*lead, flat(cols), flat(inner))
        )
        name = self.ctx.step(self.node, "matmul", [left.name, right.name], {"transpose_b": True})
        product = _Operand(name, "", self.ctx.draft.type_of(name))
        letters = batch + rows + cols
        return self.reshaped(product, tuple(self.sizes[c] for c in letters), letters)


def _einsum(ctx: OnnxContext, node: Any, attrs: Mapping[str, Any]) -> None:
    equation = attrs.get("equation", b"")
    equation = equation.decode() if isinstance(equation, bytes) else str(equation)
    types = [ctx.type_of(i) for i in node.input]
    if any(t.dtype == "bool" for t in types):
        raise ctx.error(node, "Einsum of booleans is not supported")
    try:
        letters, out = parse(equation, [t.rank for t in types])
        operands = [_Operand(ctx.name(i), s, t) for i, s, t in zip(node.input, letters, types)]
        lowering = _Lowering(ctx, node, _sizes(operands))
        result = operands[0]
        for index, other in enumerate(operands[1:], start=1):
            later = "".join(op.letters for op in operands[index + 1 :]) + out
            result = lowering.contract(result, other, later)
        result = lowering.ordered(lowering.summed(result, out), out)
    except _Refused as why:
        raise ctx.error(node, str(why)) from None
    shape = tuple(lowering.sizes[c] for c in out)
    ctx.emit(node, "reshape", [result.name], {"shape": shape})


EINSUM_CONVERTERS: dict[str, Converter] = {"Einsum": _einsum}
