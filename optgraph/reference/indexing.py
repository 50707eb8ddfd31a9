# NumPy's stubs type most array expressions as Any; returning them is the point of a kernel.
# mypy: disable-error-code="no-any-return"
"""NumPy kernels of the indexing ops (expand, tile, pad, cumsum, argmax): the semantics of
docs/ir.md, with the signature of `kernels.KERNELS` (f16 and bf16 operands of cumsum and argmax
arrive widened to float32).

- `cumsum` adds in order along the axis in float32 (integers in their own dtype);
- `argmax` returns the first maximum (the first NaN when there is one), as NumPy does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from optgraph.ir.graph import AttrValue, Node

Attrs = Mapping[str, AttrValue]


def _ints(value: AttrValue | None) -> tuple[int, ...]:
    assert isinstance(value, tuple)
    return value


def _int(value: AttrValue | None) -> int:
    assert isinstance(value, int)
    return value


def expand(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    return np.broadcast_to(args[0], _ints(attrs["shape"])).copy()


def tile(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    return np.tile(args[0], _ints(attrs["repeats"]))


def pad(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x, pads = args[0], _ints(attrs["pads"])
    r = x.ndim
    value = attrs["value"]
    assert isinstance(value, (int, float))
    width = [(pads[i], pads[r + i]) for i in range(r)]
    return np.pad(x, width, mode="constant", constant_values=np.array(value).astype(x.dtype))


def cumsum(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x = args[0]
    return np.cumsum(x, axis=_int(attrs["axis"]), dtype=x.dtype)


def argmax(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x = args[0]
    out = np.argmax(x, axis=_int(attrs["axis"]), keepdims=bool(attrs["keepdims"]))
    return np.asarray(out, dtype=np.int64)


KERNELS = {
    "argmax": argmax,
    "cumsum": cumsum,
    "expand": expand,
    "pad": pad,
    "tile": tile,
}
