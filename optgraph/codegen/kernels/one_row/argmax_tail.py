"""The argmax of a one-row product's result done by the product's last block (its tail).

A decode step ends with `next = cast(argmax(logits))`: a one-block kernel after the logits
product, for one row of a few thousand values. The product's blocks each store a tile of the
row; with this tail each block then arrives at a per-kernel counter (a release/acquire atomic,
as `lane_reduce`'s split-K arrival), and the block that arrives last reads the whole row
back from L2 (`__ldcg`: what the other blocks stored), finds its first maximum as the argmax
kernel does (`indexing.argmax_lines`: NaN first, ties to the lower index), stores the index
in the argmax's (or its cast's) dtype and resets the counter for the next launch:

    %logits = fused(%h, %g, %w)   %i = argmax(%logits)   %t = cast(%i) {dtype = "i32"}
    ->  one launch: every block stores its columns of %logits, the last one stores
        %t[0] = (int)argmax(%logits[0, :])

`with_argmax_tail` appends the tail to the body of the product's kernel (`product_kernel.one_row_region`
or `one_row_matmul`): that body ends with the stores, which every block completing a tile reaches
(with split-K, the tile's last block; the others have returned), so `tiles` blocks arrive. The
index is stored after the last block has read every element it needs, so its bytes may be any
the memory planner gave the cast (even the row's own: `argmax_folds` says when the plan allows
the store at the product's place).
"""

from __future__ import annotations

import hashlib

from optgraph.codegen.cuda_source import STORAGE, Kernel, Launch, kernel_template
from optgraph.codegen.kernels.indexing import argmax_lines
from optgraph.ir.graph import TensorType

ARG_PARAM = "out_arg"  # the kernel parameter the index is stored through


def argmax_param(index_dtype: str) -> str:
    """The C parameter declaration of the index's destination."""
    return f"{STORAGE[index_dtype]}* {ARG_PARAM}"


def argmax_tail(
    n: int, tiles: int, salt: str, row_dtype: str, index_dtype: str
) -> tuple[list[str], str]:
    """(statements after the product's stores, file-scope declaration of the counter): the
    argmax of the stored result `out[0 .. n)` (of `row_dtype`) by the last of `tiles` blocks to
    arrive, stored as `index_dtype` at `out_arg[0]`."""
    digest = hashlib.sha1(f"argmax|{salt}|{n},{tiles},{row_dtype}".encode()).hexdigest()[:12]
    cnt = f"og_cnt_{digest}"
    decl = f"__device__ unsigned int {cnt}[1];\n"
    store_arg = f"{ARG_PARAM}[0] = ({STORAGE[index_dtype]})arg;"
    find = argmax_lines(row_dtype, "unsigned int", n, "__ldcg(&out[k])", store_arg)
    lines = [
        "__syncthreads();",
        "{",
        "  __shared__ bool og_arg_last;",
        f"  if (threadIdx.x == 0) og_arg_last = og_arrive(&{cnt}[0]) == {tiles - 1}u;",
        "  __syncthreads();",
        "  if (!og_arg_last) return;",
        "  __shared__ float og_best[32];",
        "  __shared__ long long og_arg[32];",
        "  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;",
        *find,
        f"  if (threadIdx.x == 0) {cnt}[0] = 0u;",
        "}",
    ]
    return lines, decl


def with_argmax_tail(launch: Launch, salt: str, row: TensorType, index_dtype: str) -> Launch | None:
    """`launch` (a one-row product's, storing `row` at `out`) whose kernel also stores the
    argmax of the whole result as `index_dtype` through the last role, `ARG_PARAM`; None where
    the kernel has no parts to extend."""
    kernel = launch.kernel
    if kernel.params is None or kernel.body is None or ARG_PARAM in launch.args:
        return None
    tiles = launch.grid[0]  # the product's grid: (tiles, splits of K, 1)
    tail, counter = argmax_tail(row.numel, tiles, salt, row.dtype, index_dtype)
    params = (*kernel.params, argmax_param(index_dtype))
    body = kernel.body + "\n" + "\n".join("  " + line for line in tail)
    decls = (*kernel.decls, counter)
    template = kernel_template(params, body, kernel.bounds, kernel.early, kernel.self_wait)
    digest = hashlib.sha1(("".join(decls) + template).encode()).hexdigest()[:12]
    name = f"{kernel.name.rsplit('_', 1)[0]}_{digest}"
    made = Kernel.assemble(name, params, body, decls, kernel.bounds, kernel.early, kernel.self_wait)
    return Launch(made, launch.grid, launch.block, (*launch.args, ARG_PARAM), launch.shared_mem)
