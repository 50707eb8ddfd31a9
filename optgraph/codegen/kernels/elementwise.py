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
The scalar statements come from `scalars`.

Vector path (`VECTOR_LOADS`): where the element count is a multiple of W = 16 bytes /
the result's element size (f16/bf16: 8, f32: 4), a thread takes W consecutive elements: the
result, the anchor and every operand of the result's shape and element size move as one 128-bit
load or store, the broadcast ones are read element by element. A run-time test of the pointers'
alignment picks it (else the one-element loop runs; a view may start anywhere):

    %y = add(%x, %r) : f16[512,4096]
    ->  if (((size_t)out | (size_t)in0 | (size_t)in1) % 16 == 0) { for (v ...) {
          uint4 og_r0 = ((const uint4*)in0)[v], og_r1 = ...; 8 x (load, add, store to og_o);
          ((uint4*)out)[v] = og_o; } } else { the one-element loop }
"""

from __future__ import annotations

from collections.abc import Sequence

from optgraph.codegen.cuda_source import (
    COMPUTE,
    STORAGE,
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
from optgraph.codegen.kernels.scalars import SCALAR_OPS, emit_scalars, load_params, used_values
from optgraph.ir.graph import DTYPE_BYTES, FLOAT_DTYPES, Node, TensorType

OPS = SCALAR_OPS
# The vector path (16 bytes a thread per operand); False: one element a thread everywhere.
VECTOR_LOADS = True


def vector_width(out_type: TensorType) -> int:
    """Elements a thread takes (1: the one-element loop only)."""
    if not VECTOR_LOADS or out_type.dtype not in FLOAT_DTYPES:
        return 1
    width = 16 // DTYPE_BYTES[out_type.dtype]
    return 1 if out_type.numel % width else width


def region_kernel(
    family: str,
    params: Sequence[str],
    types: Sequence[TensorType],
    nodes: Sequence[Node],
    result: str,
    out_type: TensorType,
    anchor: str | None = None,
) -> Kernel:
    """One thread per output element (or per `vector_width` elements) evaluating `nodes`;
    `anchor`, when given, is read from `out` (a product already written there) and the result
    overwrites it."""
    roles = [f"in{k}" for k in range(len(params))]
    used = used_values(nodes, (result,))
    scalar = _element_loop(params, types, nodes, result, out_type, anchor, roles, used)
    width = vector_width(out_type)
    if width == 1:
        body = scalar
    else:
        size = DTYPE_BYTES[out_type.dtype]
        wide = [
            k
            for k, (name, t) in enumerate(zip(params, types))
            if name in used and t.shape == out_type.shape and DTYPE_BYTES[t.dtype] == size
        ]
        pointers = " | ".join(
            f"reinterpret_cast<unsigned long long>({p})" for p in ["out", *(roles[k] for k in wide)]
        )
        vector = _vector_loop(
            params, types, nodes, result, out_type, anchor, roles, used, wide, width
        )
        body = [
            f"const bool og_aligned = (({pointers}) & 15ull) == 0ull;",
            "if (og_aligned) {",
            *("  " + s for s in vector),
            "} else {",
            *("  " + s for s in scalar),
            "}",
        ]
    decls = [out_param(out_type.dtype)] + [in_param(t.dtype, k) for k, t in enumerate(types)]
    return make_kernel(family, decls, "\n".join("  " + s for s in body))


def _element_loop(
    params: Sequence[str],
    types: Sequence[TensorType],
    nodes: Sequence[Node],
    result: str,
    out_type: TensorType,
    anchor: str | None,
    roles: Sequence[str],
    used: set[str],
) -> list[str]:
    """The grid-stride loop over single elements."""
    n = out_type.numel
    idx = index_type(n)
    env: dict[str, tuple[str, str]] = {}
    lines = [
        (
            f"for ({idx} i = ({idx})blockIdx.x * blockDim.x + threadIdx.x; i < {n}u;"
            f" i += ({idx})gridDim.x * blockDim.x) {{"
        )
    ]
    if anchor is not None:
        lines.append(f"  const {COMPUTE[out_type.dtype]} a = {load(out_type.dtype, 'out[i]')};")
        env[anchor] = ("a", out_type.dtype)
    lines += ["  " + s for s in load_params(params, types, roles, used, "i", out_type.shape, env)]
    lines += ["  " + s for s in emit_scalars(nodes, env, "v")]
    if result not in env:
        raise CodegenError(f"fused: result '%{result}' is not computed by the region")
    lines.append(f"  out[i] = {store(out_type.dtype, env[result][0])};")
    lines.append("}")
    return lines


def _vector_loop(
    params: Sequence[str],
    types: Sequence[TensorType],
    nodes: Sequence[Node],
    result: str,
    out_type: TensorType,
    anchor: str | None,
    roles: Sequence[str],
    used: set[str],
    wide: Sequence[int],
    width: int,
) -> list[str]:
    """The grid-stride loop over groups of `width` elements: 128-bit loads of the operands
    `wide` (and of the anchor), one 128-bit store."""
    n = out_type.numel
    idx = index_type(n)
    dt = out_type.dtype
    st = STORAGE[dt]
    env: dict[str, tuple[str, str]] = {}
    lines = [
        (
            f"for ({idx} og_v = ({idx})blockIdx.x * blockDim.x + threadIdx.x; og_v < {n // width}u;"
            f" og_v += ({idx})gridDim.x * blockDim.x) {{"
        )
    ]
    if anchor is not None:
        lines.append("  const uint4 og_ra = reinterpret_cast<const uint4*>(out)[og_v];")
    for k in wide:
        lines.append(f"  const uint4 og_r{k} = reinterpret_cast<const uint4*>({roles[k]})[og_v];")
    lines += ["  uint4 og_o;", f"  {st}* og_oe = reinterpret_cast<{st}*>(&og_o);"]
    lines += [f"  #pragma unroll\n  for (unsigned int og_e = 0; og_e < {width}u; ++og_e) {{"]
    body = [f"const {idx} i = og_v * {width}u + og_e;"]
    if anchor is not None:
        element = f"reinterpret_cast<const {st}*>(&og_ra)[og_e]"
        body.append(f"const {COMPUTE[dt]} a = {load(dt, element)};")
        env[anchor] = ("a", dt)
    vector_roles = [
        f"reinterpret_cast<const {STORAGE[t.dtype]}*>(&og_r{k})" if k in wide else roles[k]
        for k, t in enumerate(types)
    ]
    in_vector = {params[k] for k in wide}
    body += load_params(params, types, vector_roles, used & in_vector, "og_e", out_type.shape, env)
    body += load_params(params, types, roles, used - in_vector, "i", out_type.shape, env)
    body += emit_scalars(nodes, env, "v")
    if result not in env:
        raise CodegenError(f"fused: result '%{result}' is not computed by the region")
    body.append(f"og_oe[og_e] = {store(dt, env[result][0])};")
    lines += ["    " + s for s in body]
    lines += ["  }", "  reinterpret_cast<uint4*>(out)[og_v] = og_o;", "}"]
    return lines


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
    grid, block = grid_1d(out_type.numel // vector_width(out_type))
    return Launch(kernel, grid, block, ("out",) + tuple(f"in{k}" for k in range(len(types))))


def emit(node: Node, types: tuple[TensorType, ...], *, in_place: bool = False) -> list[Launch]:
    """The kernel of one elementwise node."""
    assert node.type is not None
    params = [f"#in{k}" for k in range(len(types))]  # cannot clash with IR names
    body = Node(node.name, node.op, tuple(params), node.attrs, node.type)
    return [region_launch(node.op, params, types, [body], node.name, node.type)]
