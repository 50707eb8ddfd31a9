"""Which op family emits a node: the one place that knows every family.

`node_code(node, operand_types)` turns one verified node into the work the CUDA runtime issues for
it: a tuple of `Launch` (one of our kernels), `Gemm` (a cuBLAS call, `matmul`) and
`DeviceCopy` (a memcpy), whose buffers are named by *role*: `"out"` for the node's result and
`"in0"`, `"in1"`, ... for its operands. `lower_cuda` binds roles to arena offsets.

    %y = softmax(%x) : f32[4,64]                       ->  reductions: one row kernel
    %y = matmul(%x, %w) : f16[1,4096]                  ->  product_kernel: the one-row product kernel
    %y = matmul(%x, %w) : f16[8,4096]                  ->  matmul: cuBLAS
    %y = fused(...) { matmul, add }  (8 rows)          ->  cuBLAS, then a elementwise epilogue
    %y = matmul(%x, %wq) : f16[1,4096]  (%wq : q4_k)   ->  quantized: its one-row product kernel
    %y = moe(%x, %logits, %g, %u, %d) {k = 2}         ->  moe: route, gate_up, down (scratch)

Families (`elementwise`, `data_movement`, `indexing`, `reductions`, `rope`,
`variants`,
`conv`, `matmul`, `quantized`, `moe`) each name their ops in `OPS` and emit them with
`emit(node, types, in_place=...)`; they import the shared vocabulary below them (`cuda_source`,
`scalars`, `geometry`, `head_rows`), never this module or each other (`moe` calls `quantized`'s
block decoders, `quantized` `matmul`'s cuBLAS roles). A node
reading a quantized weight (`dequantize`, `get_rows` of a quantized table, `matmul` by one)
goes to `quantized` before any other family. A
`fused` node is planned with `fusion_rules.plan_body` and emitted by kind here: an elementwise
region is one `elementwise` kernel, a reduction region one `reductions` row kernel, a
siblings region one `sibling_kernel` kernel, a product region the one-row kernel of
`product_kernel` where it qualifies, else its matmul (cuBLAS) or conv2d into the result buffer and
one epilogue kernel that reads the product back in place.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from optgraph.analysis.fusion_rules import ELEMENTWISE, PRODUCT, REDUCTION, SIBLINGS, plan_body
from optgraph.codegen.cuda_source import CodegenError, DeviceCopy, Launch
from optgraph.codegen.kernels import (
    conv,
    data_movement,
    elementwise,
    indexing,
    matmul,
    moe,
    quantized,
    reductions,
    resize,
    rope,
)
from optgraph.codegen.kernels.attention import variants
from optgraph.codegen.kernels.matmul import Gemm
from optgraph.codegen.kernels.one_row import product_kernel, sibling_kernel
from optgraph.ir.graph import Node, TensorType

Work = Launch | DeviceCopy | Gemm

# Looked up in this order; matmul and fused nodes are chosen by shape first (`node_code`).
FAMILIES = (
    elementwise,
    data_movement,
    indexing,
    reductions,
    rope,
    variants,
    conv,
    resize,
    matmul,
    quantized,
    moe,
)


def node_code(
    node: Node,
    operand_types: Sequence[TensorType],
    *,
    in_place: bool = False,
    resident: frozenset[int] = frozenset(),
    l2_ahead: bool = False,
    most_splits: int | None = None,
    rope_pairs: bool = False,
) -> tuple[Work, ...]:
    """What to issue for `node`, given its operands' types.

    `in_place` says the planner gave the result its operand 0's bytes (kv_cache_write then only
    writes the new rows). `resident`: the operands (by index) that are weights in the device's
    weight buffer, which no kernel writes (a one-row product loads them before its PDL wait).
    `l2_ahead`: a one-row product also brings the rest of its weights into L2 then
    (`codegen/kernels/one_row/l2_ahead.py` says which). `most_splits`: a one-row product's splits of K at most
    (it shares its launch: `codegen/plan/sibling_splits.py`). `rope_pairs`: a rope reads a one-row
    product's result, which then takes the layout a rope fold needs (`qkv_folds`).
    Views that alias their operand are not passed here (they cost nothing); views that do not
    are materialized with a copy kernel.
    """
    assert node.type is not None, node
    if node.type.numel == 0:
        return ()
    types = tuple(operand_types)
    if node.op == "fused":
        return tuple(fused_code(node, types, resident, l2_ahead, most_splits, rope_pairs))
    if quantized.reads_quantized(node, types):
        return tuple(quantized.emit(node, types, in_place=in_place))
    if node.op == "matmul":
        one_kernel = product_kernel.one_row_matmul(
            node, types, resident, None, l2_ahead, most_splits, rope_pairs
        )
        if one_kernel is not None:
            return tuple(one_kernel)
    for family in FAMILIES:
        if node.op in family.OPS:
            return tuple(family.emit(node, types, in_place=in_place))
    raise CodegenError(f"{node.op}: no CUDA code generator for this op", node.span)


def scratch_bytes(node: Node, operand_types: Sequence[TensorType]) -> int:
    """Bytes of scratch the work of `node` needs besides its result (role "scratch"; 0: none)."""
    if node.op == "attention" and node.type is not None and node.type.numel:
        return variants.scratch_bytes(node, tuple(operand_types))
    if node.op == "moe" and node.type is not None and node.type.numel:
        return moe.scratch_bytes(node, tuple(operand_types))
    if node.op == "conv2d":
        return conv.scratch_bytes(node, operand_types)
    anchor = _conv_anchor(node, operand_types)
    if anchor is not None:  # a fused product of a convolution: its im2col columns
        return conv.scratch_bytes(*anchor)
    if node.type is not None and node.type.numel:
        return quantized.scratch_bytes(node, tuple(operand_types))
    return 0


def _conv_anchor(
    node: Node, operand_types: Sequence[TensorType]
) -> tuple[Node, tuple[TensorType, ...]] | None:
    """The conv2d of a fused product region and its operand types (its operands are the
    region's parameters: a product takes no prologue), else None."""
    if node.op != "fused" or node.body is None:
        return None
    convs = [n for n in node.body.nodes if n.op == "conv2d"]
    param_types = dict(zip(node.body.params, operand_types))
    if len(convs) != 1 or any(o not in param_types for o in convs[0].operands):
        return None
    return convs[0], tuple(param_types[o] for o in convs[0].operands)


def fused_code(
    node: Node,
    types: tuple[TensorType, ...],
    resident: frozenset[int] = frozenset(),
    l2_ahead: bool = False,
    most_splits: int | None = None,
    rope_pairs: bool = False,
) -> list[Work]:
    """The work of a fused region, by the kind of its plan (see the module docstring);
    `resident`, `l2_ahead`, `most_splits`, `rope_pairs`: see `node_code`."""
    assert node.type is not None and node.body is not None
    body = node.body
    try:
        plan = plan_body(body, types)
    except ValueError as err:
        raise CodegenError(f"fused: {err}", node.span) from None
    if plan.kind == ELEMENTWISE:
        return [
            elementwise.region_launch(
                "fused", body.params, types, body.nodes, body.result, node.type
            )
        ]
    if plan.kind == SIBLINGS:
        return [sibling_kernel.siblings_launch(node, types, plan, resident)]
    by_name = {n.name: n for n in body.nodes}
    assert plan.anchor is not None
    anchor = by_name[plan.anchor]
    roles = dict(zip(body.params, (f"in{k}" for k in range(len(types)))))
    if plan.kind == REDUCTION:
        return [reductions.fused_row_launch(node, types, plan, roles)]
    assert plan.kind == PRODUCT
    one_kernel = product_kernel.one_row_region(
        node, types, resident, None, l2_ahead, most_splits, rope_pairs
    )
    if one_kernel is not None:
        return list(one_kernel)
    work = _product_anchor(node, anchor, types, roles)
    epilogue = [by_name[n] for n in plan.epilogue]
    if epilogue:
        work.append(
            elementwise.region_launch(
                "epilogue", body.params, types, epilogue, body.result, node.type, anchor.name
            )
        )
    return work


def _product_anchor(
    node: Node, anchor: Node, types: Sequence[TensorType], roles: Mapping[str, str]
) -> list[Work]:
    """The matmul or conv2d of a product region, written to the region's result buffer."""
    assert node.body is not None
    param_types = dict(zip(node.body.params, types))
    for o in anchor.operands:
        if o not in roles:
            raise CodegenError("fused: a matrix product takes no prologue", node.span)
    anchor_types = tuple(param_types[o] for o in anchor.operands)
    anchor_roles = tuple(roles[o] for o in anchor.operands)
    if anchor.op == "matmul":
        return list(matmul.emit_roles(anchor, anchor_types, anchor_roles))
    return list(conv.emit_roles(anchor, anchor_types, anchor_roles))
