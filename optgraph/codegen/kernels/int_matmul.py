"""Integer matmul (i32, i64) as one simple kernel: cuBLAS has no exact integer GEMM.

A thread per output element loops over K and accumulates in the unsigned type of the dtype's
width, so products and sums wrap around in the dtype (two's complement) exactly as the reference
(NumPy's integer matmul) does; signed overflow would be undefined behaviour in C. Batch dims
broadcast like the float path's; `transpose_a`/`transpose_b` only change the element offsets.

    %y = matmul(%a, %b) : i32[2,4]   (a : i32[2,3], b : i32[3,4])
    ->  acc = 0; for k < 3: acc += (unsigned)a[m*3 + k] * (unsigned)b[k*4 + n]; out[i] = (int)acc
"""

from __future__ import annotations

from collections.abc import Sequence

from optgraph.codegen.cuda_source import (
    STORAGE,
    Launch,
    broadcast_offset,
    grid_1d,
    index_type,
    make_kernel,
)
from optgraph.ir.graph import Node, TensorType
from optgraph.ir.ops import attrs_with_defaults

UNSIGNED = {"i32": "unsigned int", "i64": "unsigned long long"}


def int_matmul_launch(node: Node, types: Sequence[TensorType], roles: Sequence[str]) -> Launch:
    """The launch computing `node` (an integer matmul) from a and b in `roles` into "out"."""
    assert node.type is not None
    a, b = types[0], types[1]
    attrs = attrs_with_defaults(node)
    ta, tb = bool(attrs["transpose_a"]), bool(attrs["transpose_b"])
    m, n = node.type.shape[-2], node.type.shape[-1]
    k = a.shape[-2] if ta else a.shape[-1]
    batch = node.type.shape[:-2]
    idx = index_type(max(node.type.numel, a.numel, b.numel) + 1)
    t, acc = STORAGE[a.dtype], UNSIGNED[a.dtype]
    a_base = broadcast_offset("bi", a.shape[:-2], batch)
    b_base = broadcast_offset("bi", b.shape[:-2], batch)
    a_at = f"kk * {m}u + r" if ta else f"r * {k}u + kk"
    b_at = f"c * {k}u + kk" if tb else f"kk * {n}u + c"
    loop = (
        f"for ({idx} i = ({idx})blockIdx.x * blockDim.x + threadIdx.x; i < {node.type.numel}u;"
        f" i += ({idx})gridDim.x * blockDim.x) {{"
    )
    body = [
        loop,
        f"  {idx} c = i % {n}u, r = (i / {n}u) % {m}u, bi = i / {m * n}u;",
        "  (void)bi;",
        f"  const {t}* pa = a + ({a_base}) * {m * k}u;",
        f"  const {t}* pb = b + ({b_base}) * {k * n}u;",
        f"  {acc} total = 0u;",
        f"  for ({idx} kk = 0; kk < {k}u; ++kk) {{",
        f"    total += ({acc})pa[{a_at}] * ({acc})pb[{b_at}];",
        "  }",
        f"  out[i] = ({t})total;",
        "}",
    ]
    params = [f"{t}* out", f"const {t}* a", f"const {t}* b"]
    kernel = make_kernel("int_matmul", params, "\n".join("  " + line for line in body))
    grid, block = grid_1d(node.type.numel)
    return Launch(kernel, grid, block, ("out", roles[0], roles[1]))
