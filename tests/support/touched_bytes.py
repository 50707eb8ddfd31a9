"""The bytes of its root buffer a node's read of an operand touches, by brute force: for the race
oracles of tests/passes/test_races.py and test_race_faults.py.

A materialized `slice` copies only its rows of the operand (a strided set of bytes when it cuts
an inner axis); every other read touches all of the operand's bytes, which for an aliasing view
of part of its root are only the view's. The rows are found by enumerating the elements with
NumPy, independently of `optgraph.ir.layout.ByteSet`'s arithmetic.

    read_bytes(slice(%a : f32[2,4] {axis=1, start=2, end=4}), "a", ...)
    -> frozenset({8, ..., 15, 24, ..., 31})
"""

from __future__ import annotations

import numpy as np

from optgraph.ir.graph import DTYPE_BYTES, Node, TensorType


def read_bytes(
    node: Node, operand: str, types: dict[str, TensorType], roots: dict[str, tuple[str, int]]
) -> frozenset[int] | None:
    """The bytes of the root of `operand` that `node` reads through it; None: every byte of the
    root (a plain read of the root itself or of a view of all of it)."""
    root, at = roots.get(operand, (operand, 0))
    t = types[operand]
    own = frozenset(range(at, at + t.nbytes))
    whole = operand not in roots or (at == 0 and t.nbytes >= types[root].nbytes)
    if node.op == "slice" and node.name not in roots and t.dtype in DTYPE_BYTES:
        size = DTYPE_BYTES[t.dtype]
        axis = int(node.attrs["axis"])  # type: ignore[call-overload]
        axis = axis + t.rank if axis < 0 else axis
        cut = [slice(None)] * t.rank
        cut[axis] = slice(int(node.attrs["start"]), int(node.attrs["end"]))  # type: ignore[call-overload]
        elements = np.arange(t.numel).reshape(t.shape)[tuple(cut)].ravel()
        rows = frozenset(at + int(e) * size + b for e in elements for b in range(size))
        if rows != own:
            return rows
    return None if whole else own
