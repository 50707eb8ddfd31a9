"""`lower(graph)`: a planned graph into the `Program` of `codegen/plan/arena_program.py`.

    before: %a = exp(%x) : f32[64] !{stream = 1, offset = 0, size = 256}  ...
    after:  streams[1] = [launch %a (node 0), record ^e0]; buffers["a"] = arena @0, 256 bytes

Several devices: one step per device of a node (`Step.device`), buffers list their devices, and
each device's arena is the top of its buffers (`Program.device_arena_bytes`).

Does not handle: kernels (codegen's CUDA sources are separate); graphs that are not planned (run
plan-memory first). Complexity O(V).
"""

from __future__ import annotations

from optgraph.codegen.plan.arena_program import Buffer, Program, Step
from optgraph.errors import OptGraphError
from optgraph.ir.graph import DTYPE_BYTES, Graph, TensorType
from optgraph.ir.layout import alias_roots


def row_major_strides(t: TensorType) -> tuple[int, ...]:
    """Byte strides of the array holding `t` (a quantized type's: of its blocks' bytes, over
    `array_shape`)."""
    strides: list[int] = []
    step = 1 if t.is_quantized else DTYPE_BYTES[t.dtype]
    for dim in reversed(t.array_shape):
        strides.append(step)
        step *= dim
    return tuple(reversed(strides))


def lower(graph: Graph) -> Program:
    """The program of a planned graph; an `OptGraphError` when a buffer has no arena offset."""
    roots = alias_roots(graph)
    buffers: dict[str, Buffer] = {}
    for i in graph.inputs:
        buffers[i.name] = Buffer(
            i.name,
            "input",
            i.type.dtype,
            i.type.shape,
            row_major_strides(i.type),
            0,
            i.type.nbytes,
            devices=i.ann.devices,
        )
    for w in graph.weights:
        buffers[w.name] = Buffer(
            w.name,
            "weight",
            w.type.dtype,
            w.type.shape,
            row_major_strides(w.type),
            0,
            w.type.nbytes,
            devices=w.ann.devices,
        )
    streams: dict[int, list[Step]] = {}
    for index, node in enumerate(graph.nodes):
        lane = streams.setdefault(node.stream, [])
        if node.is_event:
            lane.extend(Step(node.op, node.name, index, d) for d in node.devices)
            continue
        assert node.type is not None
        strides = row_major_strides(node.type)
        dtype, shape = node.type.dtype, node.type.shape
        if node.name in roots:
            root, offset = roots[node.name]
            buffers[node.name] = Buffer(
                node.name,
                "alias",
                dtype,
                shape,
                strides,
                offset,
                node.type.nbytes,
                root,
                node.devices,
            )
            if node.op == "send":  # a transfer, though its result owns no bytes
                lane.extend(Step("launch", node.name, index, d) for d in node.devices)
            continue
        if node.ann.offset is None or node.ann.size is None:
            raise OptGraphError(
                f"cannot lower '%{node.name}': it has no arena offset (run plan-memory first)",
                node.span,
            )
        if node.ann.size < node.type.nbytes:
            raise OptGraphError(
                f"'%{node.name}' needs {node.type.nbytes} bytes but plan-memory reserved "
                f"{node.ann.size}",
                node.span,
            )
        buffers[node.name] = Buffer(
            node.name,
            "arena",
            dtype,
            shape,
            strides,
            node.ann.offset,
            node.ann.size,
            None,
            node.devices,
        )
        lane.extend(Step("launch", node.name, index, d) for d in node.devices)
    arena = max((b.offset + b.size for b in buffers.values() if b.kind == "arena"), default=0)
    per_device = [0] * graph.device_count()
    for b in buffers.values():
        if b.kind == "arena":
            for d in b.devices:
                per_device[d] = max(per_device[d], b.offset + b.size)
    return Program(
        graph=graph,
        arena_bytes=arena,
        buffers=buffers,
        streams={s: tuple(steps) for s, steps in sorted(streams.items()) if steps},
        inputs=tuple(i.name for i in graph.inputs),
        weights=tuple(w.name for w in graph.weights),
        outputs=graph.output_names(),
        device_arena_bytes=tuple(per_device) if len(per_device) > 1 else (),
    )
