"""matmul as cuBLAS calls (`cublasGemmStridedBatchedEx`, float32 accumulation for every dtype).

cuBLAS is column-major; a row-major `C[M,N] = A[M,K] · B[K,N]` is the column-major product
`Cᵀ[N,M] = Bᵀ · Aᵀ`, so cuBLAS's first matrix is our `b` and its second our `a`, and a row-major
matrix read column-major is already transposed: no transpose flag is needed for plain operands,
and `transpose_a`/`transpose_b` become `T` on the matching side.

    %y = matmul(%x, %w) : f32[4,256]   (x : f32[4,64], w : f32[64,256])
    ->  Gemm(transa=N, transb=N, m=256, n=4, k=64, a=in1 (lda 256), b=in0 (ldb 64), c=out (ldc 256))

Batch dimensions broadcast. When `b` has no batch (a shared weight) and `a` is not transposed, the
batch folds into M (one plain GEMM). Otherwise each operand's batch stride is its matrix size or 0
(broadcast); where that does not hold over all batch dims, the leading dims are looped over with
one strided-batched call each.

Integer products (i32, i64) do not go to cuBLAS: `int_matmul` emits one exact kernel.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

from optgraph.codegen.cuda_source import Launch
from optgraph.codegen.kernels.int_matmul import int_matmul_launch
from optgraph.ir.graph import DTYPE_BYTES, INT_DTYPES, Node, TensorType
from optgraph.ir.ops import attrs_with_defaults

OPS = frozenset({"matmul"})
OP_N, OP_T = 0, 1


@dataclass(frozen=True)
class Gemm:
    """One `cublasGemmStridedBatchedEx` call in cuBLAS's terms; buffers are roles + byte offsets,
    strides are in elements (C's in elements of `out_dtype`)."""

    dtype: str
    transa: int
    transb: int
    m: int
    n: int
    k: int
    a: str
    lda: int
    stride_a: int
    b: str
    ldb: int
    stride_b: int
    c: str
    ldc: int
    stride_c: int
    batch: int
    a_offset: int = 0
    b_offset: int = 0
    c_offset: int = 0
    c_dtype: str = ""  # C's dtype where it differs from A's and B's ("": the same)

    @property
    def out_dtype(self) -> str:
        return self.c_dtype or self.dtype


def emit(
    node: Node, types: tuple[TensorType, ...], *, in_place: bool = False
) -> list[Gemm | Launch]:
    """The cuBLAS calls of a plain matmul (`cuda_dispatch` gives one-row products to
    `product_kernel` first)."""
    return emit_roles(node, types, ("in0", "in1"))


def _batch_strides(shape: Sequence[int], batch: Sequence[int], matrix: int) -> list[int]:
    """Element stride of an operand along each output batch dim (0 where it broadcasts)."""
    own = list(shape[:-2])
    own = [1] * (len(batch) - len(own)) + own
    strides = [0] * len(batch)
    step = matrix
    for d in range(len(batch) - 1, -1, -1):
        strides[d] = 0 if own[d] == 1 and batch[d] != 1 else step
        step *= own[d]
    return strides


def _uniform_from(strides: Sequence[int], batch: Sequence[int], matrix: int) -> int:
    """The first dim from which the operand's batch is one stride (all full or all broadcast)."""
    start = len(batch)
    for s in range(len(batch), -1, -1):
        tail = [(st, b) for st, b in zip(strides[s:], batch[s:]) if b != 1]
        full = all(st != 0 for st, _ in tail)
        none = all(st == 0 for st, _ in tail)
        if not (full or none):
            break
        if full and tail:
            expect, ok = matrix, True
            for st, b in reversed(tail):
                ok = ok and st == expect
                expect *= b
            if not ok:
                break
        start = s
    return start


def emit_roles(
    node: Node, types: Sequence[TensorType], roles: Sequence[str]
) -> list[Gemm | Launch]:
    """The cuBLAS calls of `node` (our kernel for integers), reading a and b from `roles` and
    writing "out"."""
    assert node.type is not None
    a, b = types[0], types[1]
    if a.dtype in INT_DTYPES:
        return [int_matmul_launch(node, types, roles)]
    attrs = attrs_with_defaults(node)
    ta, tb = bool(attrs["transpose_a"]), bool(attrs["transpose_b"])
    m, n = node.type.shape[-2], node.type.shape[-1]
    k = a.shape[-2] if ta else a.shape[-1]
    batch = node.type.shape[:-2]
    size = DTYPE_BYTES[a.dtype]
    dtype = a.dtype
    b_batch = math.prod(b.shape[:-2])
    if not ta and b_batch == 1 and a.rank > 2:
        # Shared b: [..., M, K] @ [K, N] is one [batch·M, K] @ [K, N] product.
        m, batch = m * math.prod(batch), ()
        if math.prod(a.shape[:-2]) != math.prod(node.type.shape[:-2]):
            m, batch = node.type.shape[-2], node.type.shape[:-2]  # a broadcasts: keep the batch
    lda = k if tb else n  # cuBLAS A = our b
    ldb = m if ta else k  # cuBLAS B = our a
    if batch == () or all(d == 1 for d in batch):
        count = math.prod(batch) if batch else 1
        return [
            Gemm(
                dtype,
                int(tb),
                int(ta),
                n,
                m,
                k,
                roles[1],
                lda,
                0,
                roles[0],
                ldb,
                0,
                "out",
                n,
                m * n,
                count,
            )
        ]
    sa = _batch_strides(a.shape, batch, m * k)
    sb = _batch_strides(b.shape, batch, k * n)
    sc = _batch_strides(node.type.shape, batch, m * n)
    split = max(_uniform_from(sa, batch, m * k), _uniform_from(sb, batch, k * n))
    inner = batch[split:]
    count = math.prod(inner)
    step_a = next((s for s, d in zip(reversed(sa[split:]), reversed(inner)) if d != 1), 0)
    step_b = next((s for s, d in zip(reversed(sb[split:]), reversed(inner)) if d != 1), 0)
    calls: list[Gemm | Launch] = []
    for outer in itertools.product(*(range(d) for d in batch[:split])):
        off_a = sum(i * s for i, s in zip(outer, sa))
        off_b = sum(i * s for i, s in zip(outer, sb))
        off_c = sum(i * s for i, s in zip(outer, sc))
        calls.append(
            Gemm(
                dtype,
                int(tb),
                int(ta),
                n,
                m,
                k,
                roles[1],
                lda,
                step_b,
                roles[0],
                ldb,
                step_a,
                "out",
                n,
                m * n,
                count,
                off_b * size,
                off_a * size,
                off_c * size,
            )
        )
    return calls
