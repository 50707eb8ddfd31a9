"""Elementwise kernels with NumPy broadcasting: one node, or a region of elementwise nodes.

One thread per output element (a grid-stride loop). Each operand is read at its broadcast offset,
computed from constants baked into the text:

    %y = add(%x, %b) : f32[4,64]   (%b : f32[64])
    ->  const float p0 = in0[i];  const float p1 = in1[i % 64u];  out[i] = (float)(p0 + p1);

`region_kernel` evaluates a whole body of elementwise nodes per output element: one node
(`emit`), an `elementwise` fused region, or the epilogue of a product region, which reads the
product back from `out` and overwrites it (`cuda_dispatch` chooses which). Inside a region
values stay in float32 (a `cast` to f16/bf16 still rounds), which is the documented fusion
tolerance: results may differ from the unfused graph by the f16/bf16 rounding of intermediates.
The scalar statements come from `cuda_scalars`.
"""

from __future__ import annotations

from collections.abc import Sequence

from optgraph.codegen.cuda_scalars import SCALAR_OPS, emit_scalars, load_params, used_values
from optgraph.codegen.cuda_source import (
    COMPUTE,
    CodegenError,
    Kernel,
    Launch,
    grid_1d,
    in_param,
    index_type,
    load,
    make_kernel,
    out_param,
    store,
)
from optgraph.ir.graph import Node, TensorType

OPS = SCALAR_OPS


def region_kernel(
    family: str,
    params: Sequence[str],
    types: Sequence[TensorType],
    nodes: Sequence[Node],
    result: str,
    out_type: TensorType,
    anchor: str | None = None,
) -> Kernel:
    """One thread per output element evaluating `nodes`; `anchor`, when given, is read from `out`
    (a product already written there) and the result overwrites it."""
    n = out_type.numel
    idx = index_type(n)
    env: dict[str, tuple[str, str]] = {}
    roles = [f"in{k}" for k in range(len(params))]
    lines = [
        (
            f"for ({idx} i = ({idx})blockIdx.x * blockDim.x + threadIdx.x; i < {n}u;"
            f" i += ({idx})gridDim.x * blockDim.x) {{"
        )
    ]
    if anchor is not None:
        lines.append(f"  const {COMPUTE[out_type.dtype]} a = {load(out_type.dtype, 'out[i]')};")
        env[anchor] = ("a", out_type.dtype)
    used = used_values(nodes, (result,))
    lines += ["  " + s for s in load_params(params, types, roles, used, "i", out_type.shape, env)]
    lines += ["  " + s for s in emit_scalars(nodes, env, "v")]
    if result not in env:
        raise CodegenError(f"fused: result '%{result}' is not computed by the region")
    lines.append(f"  out[i] = {store(out_type.dtype, env[result][0])};")
    lines.append("}")
    decls = [out_param(out_type.dtype)] + [in_param(t.dtype, k) for k, t in enumerate(types)]
    return make_kernel(family, decls, "\n".join("  " + s for s in lines))


def region_launch(
    family: str,
    params: Sequence[str],
    types: Sequence[TensorType],
    nodes: Sequence[Node],
    result: str,
    out_type: TensorType,
    anchor: str | None = None,
) -> Launch:
    """The launch of `region_kernel` over every output element (operands in0, in1, ...)."""
    kernel = region_kernel(family, params, types, nodes, result, out_type, anchor)
    grid, block = grid_1d(out_type.numel)
    return Launch(kernel, grid, block, ("out",) + tuple(f"in{k}" for k in range(len(types))))


def emit(node: Node, types: tuple[TensorType, ...], *, in_place: bool = False) -> list[Launch]:
    """The kernel of one elementwise node."""
    assert node.type is not None
    params = [f"#in{k}" for k in range(len(types))]  # cannot clash with IR names
    body = Node(node.name, node.op, tuple(params), node.attrs, node.type)
    return [region_launch(node.op, params, types, [body], node.name, node.type)]
