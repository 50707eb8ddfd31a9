"""Decode attention that reads its KV cache before the PDL wait, all but the rows just written.

Every kernel waits for the kernel before it (`griddepcontrol.wait`, `cuda_source.PDL_ENTRY`)
before it touches memory, so a decode attention starts reading K and V only once the q/k/v
product that wrote this step's row has finished. Yet of the cache an in-place
`kv_cache_write` updates (`in_place_outputs`), the step writes only the new rows
[pos, pos + S): every other row was last written by an earlier step (an earlier CUDA graph
launch or call, complete before this one started on the stream). Those rows may be loaded
before the wait, during the preceding kernel; after the wait, a thread reloads the slots that
hold one of the new rows:

    %kc = kv_cache_write(%k_cache, %k_t, %pos)   %vc = kv_cache_write(%v_cache, %v_t, %pos)
    %o = attention(%q, %kc, %vc, %len)           (%kc, %vc in place in %k_cache, %v_cache)
    ->  attention kernel: pos (a graph input) and pass 0's K/V loads; wait; reload the slots of
        keys pos <= j < pos + S; then q, kv_len and the rest as before
        (`decode_wide`)

Legality (`early_cache_reads`): K and V are the results of in-place kv_cache_writes (not views
of them) with one and the same one-element position operand, and the attention lowers to the
wide decode kernel. Nothing else writes those caches within the step: the in-place pair makes
the write the cache input's only reader, and inputs are never placed in the arena.

Complexity: O(V) over the graph's nodes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from optgraph.codegen.cuda_source import Launch
from optgraph.codegen.kernels.attention import decode_wide, decode_wide_layout, variants
from optgraph.codegen.kernels.attention.head_rows import attention_shape
from optgraph.codegen.plan.in_place_outputs import unwritten_inputs
from optgraph.codegen.plan.steps import DecodeRewrite, Extent, KernelStep, Location
from optgraph.ir.graph import Graph, Node, TensorType

# Decode attention loads the cache rows no kernel of the step writes before its PDL wait; False:
# every load after the wait.
EARLY_CACHE_READS = True


@dataclass(frozen=True)
class WrittenRows:
    """The rows [pos, pos + rows) of the attention's K and V caches the step writes: `pos` the
    position operand (one integer of `pos_dtype`); `pos_is_input`: a graph input, which no
    kernel of the step writes, so it is read before the wait too."""

    pos: str
    pos_dtype: str
    rows: int
    pos_is_input: bool
    writes: tuple[str, ...] = ()  # the K and V cache writes

    def taken(self, attention: str, kernel: str) -> DecodeRewrite:
        """The attention's early reads as the lowered plan text lists them:

        DecodeRewrite("early_cache_reads", "o", "og_attention_decode_wide_<hash>", ("kc", "vc"),
                      "loads the rows of %kc, %vc but [%pos, %pos + 1) before the PDL wait",
                      absorbs=False)
        """
        caches = ", ".join(f"%{w}" for w in self.writes)
        rows = f"[%{self.pos}, %{self.pos} + {self.rows})"
        note = f"loads the rows of {caches} but {rows} before the PDL wait"
        return DecodeRewrite("early_cache_reads", attention, kernel, self.writes, note, False)


def early_cache_reads(
    graph: Graph, in_place: Mapping[str, str], types: Mapping[str, TensorType]
) -> dict[str, WrittenRows]:
    """{attention node: the rows its caches get this step} for each attention that may read
    the rest of its K and V before the PDL wait (see the module docstring); `types`: the
    graph's value types."""
    if not EARLY_CACHE_READS or not in_place:
        return {}
    unwritten = unwritten_inputs(graph, in_place)
    producers = {n.name: n for n in graph.nodes}
    found: dict[str, WrittenRows] = {}
    for node in graph.nodes:
        if node.op != "attention" or len(node.operands) < 3 or node.ann.backend == "cpu":
            continue
        writes = [producers.get(o) for o in node.operands[1:3]]
        if not all(w is not None and _in_place_write(w, in_place) for w in writes):
            continue
        k_write, v_write = writes
        assert k_write is not None and v_write is not None
        pos = k_write.operands[2]
        if v_write.operands[2] != pos or types[pos].numel != 1:
            continue
        rows = types[k_write.operands[1]].shape[-2]
        if types[v_write.operands[1]].shape[-2] != rows:
            continue
        operand_types = tuple(types[o] for o in node.operands)
        if not _wide(node, operand_types):
            continue
        names = (k_write.name, v_write.name)
        found[node.name] = WrittenRows(pos, types[pos].dtype, rows, pos in unwritten, names)
    return found


def _in_place_write(node: Node, in_place: Mapping[str, str]) -> bool:
    return node.op == "kv_cache_write" and len(node.operands) == 3 and node.name in in_place


def _wide(node: Node, types: tuple[TensorType, ...]) -> bool:
    """The attention lowers to the wide decode kernel (the one that takes early reads)."""
    shape = attention_shape(node, types)
    return variants.WIDE_DECODE and decode_wide_layout.fits(shape)


def early_attention_step(
    node: Node,
    written: WrittenRows,
    locations: Mapping[str, Location],
    types: Mapping[str, TensorType],
) -> tuple[KernelStep, Launch]:
    """The attention's launch with early cache reads, and its step: the position is one more
    parameter (role in{operands}), read as well as the operands."""
    operand_types = tuple(types[o] for o in node.operands)
    shape = attention_shape(node, operand_types)
    extra = f"in{len(node.operands)}"
    launch = decode_wide.decode_attention_wide(
        shape, node.name, (extra, written.pos_dtype, written.rows, written.pos_is_input)
    )
    values = {f"in{k}": o for k, o in enumerate(node.operands)} | {extra: written.pos}
    roles = {role: locations[value] for role, value in values.items()}
    roles["out"] = locations[node.name]
    assert node.type is not None
    step = KernelStep(
        node.name,
        node.stream,
        launch.kernel.name,
        launch.grid,
        launch.block,
        launch.shared_mem,
        tuple(roles[r] for r in launch.args),
        tuple(Extent.of(roles[r], types[v].nbytes) for r, v in values.items()),
        (Extent.of(roles["out"], node.type.nbytes),),
    )
    return step, launch
