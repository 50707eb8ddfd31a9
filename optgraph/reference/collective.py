"""NumPy kernels of the collective ops, with the signature of `kernels.KERNELS`.

Reference semantics ignore devices: a replicated value is one value, so a collective is a plain
function of its operands (docs/ir.md, "Devices"):

- `all_reduce`: ((op0 + op1) + op2) + ... in operand order; f16 and bf16 operands arrive widened to
  float32, so the sum accumulates in f32 and `evaluate_node` rounds it once to the result dtype;
- `all_gather`: the operands concatenated along `axis`, in operand (group) order;
- `send`, `recv`: the operand's value.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from optgraph.ir.graph import AttrValue, Node

Attrs = Mapping[str, AttrValue]


def all_reduce(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    total = np.array(args[0], copy=True)
    for operand in args[1:]:
        total = total + operand
    return total


def all_gather(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    axis = attrs["axis"]
    assert isinstance(axis, int)
    return np.concatenate(list(args), axis=axis)


def transfer(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    return np.array(args[0], copy=True)


KERNELS: dict[str, Callable[[Node, Sequence[np.ndarray], Attrs], np.ndarray]] = {
    "all_gather": all_gather,
    "all_reduce": all_reduce,
    "recv": transfer,
    "send": transfer,
}
