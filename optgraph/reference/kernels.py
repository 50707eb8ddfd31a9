# NumPy's stubs type most array expressions as Any; returning them is the point of a kernel.
# mypy: disable-error-code="no-any-return"
"""NumPy kernels of the reference interpreter: one function per op, the semantics of docs/ir.md.

Each kernel has the signature `kernel(node, args, attrs) -> np.ndarray`. `attrs` is
`ops.attrs_with_defaults(node)`. The caller (`reference.evaluate_node`) has already widened f16 and
bf16 operands to float32 for every op that computes (data movement gets the operands unchanged) and
rounds the kernel's result to the node's dtype, so kernels compute in float32 (or the integer
dtype) and never round themselves.

The elementwise ops' kernels are their declared NumPy functions (`ir/op_elementwise.py`, most of
them in `reference/elementwise.py`), called as `fn(*args, **attrs)`; the indexing and collective ops' are in
`indexing` and `collective`, attention's in `attention`, moe's in `moe`, resize's in `image`.

Conventions a kernel implementation (CUDA or otherwise) must reproduce within tolerance:

- `gelu {approximate = "none"}` uses the exact erf (math.erf in float64, rounded);
- `rope` computes its angles `pos · inv_freq` (`op_rules_rope`) in float64, then rotates in float32;
- `attention` scores are `(q·kᵀ)·scale`; a query row that sees no key yields zeros (the masks,
  windows and softcap: `attention`);
- `avg_pool2d` divides by the number of in-bounds elements of each window; `max_pool2d` ignores
  padding.

Out-of-range ids (get_rows) and positions (kv_cache_write, kv_len) raise `InputError`: they are
bad run-time data, not a malformed graph.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from optgraph.errors import InputError
from optgraph.ir.graph import AttrValue, Node
from optgraph.ir.op_elementwise import ELEMENTWISE
from optgraph.ir.op_rules_rope import rope_frequencies
from optgraph.reference import elementwise
from optgraph.reference.attention import attention
from optgraph.reference.collective import KERNELS as COLLECTIVE_KERNELS
from optgraph.reference.dequantize import dequantize_kernel
from optgraph.reference.image import resize
from optgraph.reference.indexing import KERNELS as INDEXING_KERNELS
from optgraph.reference.moe import moe

Attrs = Mapping[str, AttrValue]
Kernel = Callable[[Node, Sequence[np.ndarray], Attrs], np.ndarray]

F32 = np.float32
# The IR's NumPy dtypes (defined in `reference/elementwise.py`, beside the elementwise semantics).
NUMPY_DTYPES = elementwise.NUMPY_DTYPES
numpy_dtype = elementwise.numpy_dtype
ir_dtype = elementwise.ir_dtype


def _ints(value: AttrValue | None) -> tuple[int, ...]:
    assert isinstance(value, tuple)
    return value


def _int(value: AttrValue | None) -> int:
    assert isinstance(value, int)
    return value


def _float(value: AttrValue | None) -> float:
    assert isinstance(value, (int, float))
    return float(value)


# -- elementwise -------------------------------------------------------------------------------


def declared(name: str) -> Kernel:
    """The kernel of an elementwise op: the NumPy function its declaration names
    (`ir/op_elementwise.py`, `elementwise.semantics`) called with the operands and the attributes."""
    fn = elementwise.semantics(name)
    return lambda node, args, attrs: fn(*args, **attrs)


# -- reductions and norms ----------------------------------------------------------------------


def _axes(attrs: Attrs) -> tuple[int, ...] | None:
    axes = attrs.get("axes")
    return None if axes is None else _ints(axes)


def reduce_sum(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x = args[0]
    return np.sum(x, axis=_axes(attrs), keepdims=bool(attrs["keepdims"]), dtype=x.dtype)


def reduce_mean(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    return np.asarray(
        np.mean(args[0], axis=_axes(attrs), keepdims=bool(attrs["keepdims"]), dtype=F32)
    )


def reduce_max(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    return np.asarray(np.max(args[0], axis=_axes(attrs), keepdims=bool(attrs["keepdims"])))


def softmax(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x, axis = args[0], _int(attrs["axis"])
    if x.size == 0:  # an empty axis (or an empty row count): an empty result, not a crash
        return x.copy()
    e = np.exp(x - np.max(x, axis=axis, keepdims=True))
    return e / np.sum(e, axis=axis, keepdims=True)


def log_softmax(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    """(x - m) - log(sum(exp(x - m))), m the max along the axis: finite for large |x|."""
    x, axis = args[0], _int(attrs["axis"])
    if x.size == 0:
        return x.copy()
    shifted = x - np.max(x, axis=axis, keepdims=True)
    return shifted - np.log(np.sum(np.exp(shifted), axis=axis, keepdims=True))


def rms_norm(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x, w = args
    mean_square = np.mean(x * x, axis=-1, keepdims=True, dtype=F32)
    return x / np.sqrt(mean_square + F32(_float(attrs["eps"]))) * w


def layer_norm(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    """Two passes over the row shifted by its first element: x - k0 is exact for values within a
    factor of two of each other, so rows far from zero (1000 ± 1) keep their precision; centering
    by a float32 mean instead would round the mean to the ulp of 1000."""
    x, w, b = args
    shift = x[..., :1].astype(F32) if x.shape[-1] else np.zeros((*x.shape[:-1], 1), F32)
    shifted = x.astype(F32) - shift
    centered = shifted - np.mean(shifted, axis=-1, keepdims=True, dtype=F32)
    var = np.mean(centered * centered, axis=-1, keepdims=True, dtype=F32)
    return centered / np.sqrt(var + F32(_float(attrs["eps"]))) * w + b


def matmul(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    a, b = args
    # Transposed operands are made contiguous first, so a product's rounding does not depend on
    # how an operand is stored: BLAS sums in another order for a transposed view, and
    # transpose-weights (which stores such a weight transposed) must not change results.
    if attrs["transpose_a"]:
        a = np.ascontiguousarray(np.swapaxes(a, -1, -2))
    if attrs["transpose_b"]:
        b = np.ascontiguousarray(np.swapaxes(b, -1, -2))
    if a.dtype.kind == "i":
        # NumPy's integer matmul takes no BLAS (float) path: exact products and sums that wrap
        # around in the dtype, like the CUDA kernel's (codegen/kernels/int_matmul.py).
        assert a.dtype == b.dtype, (a.dtype, b.dtype)
        return np.matmul(a, b, dtype=a.dtype)
    return np.matmul(a, b)


# -- data movement -----------------------------------------------------------------------------


def copy(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    return np.array(args[0], copy=True)


def reshape(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    return args[0].reshape(_ints(attrs["shape"]))


def transpose(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    return np.transpose(args[0], _ints(attrs["perm"]))


def slice_(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x = args[0]
    axis = _int(attrs["axis"]) % x.ndim
    index = [slice(None)] * x.ndim
    index[axis] = slice(_int(attrs["start"]), _int(attrs["end"]))
    return x[tuple(index)]


def concat(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    return np.concatenate(list(args), axis=_int(attrs["axis"]))


def get_rows(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    table, ids = args
    rows = table.reshape(-1, table.shape[-1])
    if ids.size and (ids.min() < 0 or ids.max() >= rows.shape[0]):
        bad = int(ids.min()) if ids.min() < 0 else int(ids.max())
        raise InputError(
            f"get_rows: id {bad} out of range for a table of {rows.shape[0]} rows", node.span
        )
    return rows[ids]


def _position(node: Node, value: np.ndarray, role: str, low: int, high: int) -> int:
    position = int(value.reshape(-1)[0])
    if not low <= position <= high:
        raise InputError(f"{node.op}: {role} {position} out of range [{low}, {high}]", node.span)
    return position


def kv_cache_write(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    cache, new, pos = args
    rows = new.shape[2]
    start = _position(node, pos, "pos", 0, cache.shape[2] - rows)
    out = np.array(cache, copy=True)
    out[:, :, start : start + rows] = new
    return out


# -- opaque ------------------------------------------------------------------------------------


def rope(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    """NeoX rotate-half over the first rotary_dim entries; the rest pass through."""
    x, pos = args
    freq = rope_frequencies(attrs, x.shape[-1])
    half, rotary = freq.rotary_dim // 2, freq.rotary_dim
    angles = pos.astype(np.float64)[:, None] * np.array(freq.inv_freq)[None, :]  # [S, rd/2]
    cos = (np.cos(angles) * freq.attention_factor).astype(F32)[None, :, None, :]
    sin = (np.sin(angles) * freq.attention_factor).astype(F32)[None, :, None, :]
    x1, x2 = x[..., :half], x[..., half:rotary]
    rotated = [x1 * cos - x2 * sin, x2 * cos + x1 * sin]
    return np.concatenate([*rotated, x[..., rotary:]], axis=-1)


def _windows(
    xp: np.ndarray, kernel: Sequence[int], stride: Sequence[int], out_hw: Sequence[int]
) -> list[tuple[int, int, np.ndarray]]:
    """(i, j, xp[..., i::sh, j::sw] cut to the output size) for each kernel offset."""
    (kh, kw), (sh, sw), (oh, ow) = kernel, stride, out_hw
    return [
        (i, j, xp[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw])
        for i in range(kh)
        for j in range(kw)
    ]


def _pad(x: np.ndarray, padding: Sequence[int], value: float) -> np.ndarray:
    ph, pw = padding
    return np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=value)


def _out_hw(
    x: np.ndarray, kernel: Sequence[int], stride: Sequence[int], padding: Sequence[int]
) -> tuple[int, int]:
    oh, ow = ((x.shape[2 + a] + 2 * padding[a] - kernel[a]) // stride[a] + 1 for a in (0, 1))
    return oh, ow


def conv2d(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x, w = args[:2]
    stride, padding, groups = _ints(attrs["stride"]), _ints(attrs["padding"]), _int(attrs["groups"])
    n = x.shape[0]
    o, cg, kh, kw = w.shape
    oh, ow = _out_hw(x, (kh, kw), stride, padding)
    wg = w.reshape(groups, o // groups, cg, kh, kw)
    out = np.zeros((n, groups, o // groups, oh, ow), dtype=F32)
    for i, j, patch in _windows(_pad(x, padding, 0.0), (kh, kw), stride, (oh, ow)):
        patch = patch.reshape(n, groups, cg, oh, ow)
        out += np.einsum("ngchw,goc->ngohw", patch, wg[:, :, :, i, j], dtype=F32)
    out = out.reshape(n, o, oh, ow)
    if len(args) == 3:
        out += args[2][None, :, None, None]
    return out


def _pool_geometry(
    x: np.ndarray, attrs: Attrs
) -> tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], tuple[int, int]]:
    """(kernel, stride, padding, output height and width) of a pooling op."""
    kernel, stride, padding = (_ints(attrs[k]) for k in ("kernel", "stride", "padding"))
    return kernel, stride, padding, _out_hw(x, kernel, stride, padding)


def max_pool2d(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x = args[0]
    kernel, stride, padding, out_hw = _pool_geometry(x, attrs)
    windows = _windows(_pad(x, padding, -np.inf), kernel, stride, out_hw)
    out = windows[0][2]
    for _, _, patch in windows[1:]:
        out = np.maximum(out, patch)
    return out


def avg_pool2d(node: Node, args: Sequence[np.ndarray], attrs: Attrs) -> np.ndarray:
    x = args[0]
    kernel, stride, padding, out_hw = _pool_geometry(x, attrs)
    ones = np.ones((1, 1, x.shape[2], x.shape[3]), dtype=F32)
    total = sum(p for _, _, p in _windows(_pad(x, padding, 0.0), kernel, stride, out_hw))
    count = sum(p for _, _, p in _windows(_pad(ones, padding, 0.0), kernel, stride, out_hw))
    return np.asarray(total / count, dtype=F32)


KERNELS: dict[str, Kernel] = {
    **{name: declared(op.numpy) for name, op in ELEMENTWISE.items()},
    **INDEXING_KERNELS,
    **COLLECTIVE_KERNELS,
    "attention": attention,
    "avg_pool2d": avg_pool2d,
    "concat": concat,
    "conv2d": conv2d,
    "copy": copy,
    "dequantize": dequantize_kernel,
    "get_rows": get_rows,
    "kv_cache_write": kv_cache_write,
    "layer_norm": layer_norm,
    "log_softmax": log_softmax,
    "matmul": matmul,
    "max": reduce_max,
    "max_pool2d": max_pool2d,
    "mean": reduce_mean,
    "moe": moe,
    "prefetch": copy,
    "reshape": reshape,
    "resize": resize,
    "rms_norm": rms_norm,
    "rope": rope,
    "slice": slice_,
    "softmax": softmax,
    "sum": reduce_sum,
    "transpose": transpose,
}
