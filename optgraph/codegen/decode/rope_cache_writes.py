"""A key's rope and its KV-cache write as one kernel, when the cache is updated in place.

A decode layer rotates the new key (`rope`) and writes it into the key cache (`kv_cache_write`),
two dependent launches. When the write is in place (`in_place_outputs`: the caller's cache array
is the result's bytes) and nothing else reads the rotated key, one kernel does both at the rope's
place in the issue order: each rotated row goes straight to its cache row, and the write issues
nothing. The rotated key is never stored in the arena.

    %k_rot = rope(%k4, %pos)                          kernel %k_rot og_rope_kv_<hash>
    %k_t = transpose(%k_rot) {perm = [0, 2, 1, 3]} ->   out = the k_cache input (in place)
    %kc = kv_cache_write(%k_cache, %k_t, %pos)         in0 = %k4, in1 = rope pos, in2 = write pos
                                                      (%kc issues nothing)

Legal because the cache input has no reader but the write (`in_place_candidates`), so writing
its new rows earlier (at the rope, on the same stream) changes what no one reads; every reader
of the write's result follows the write, which follows the rope. The write's position must be
computed before the rope is issued (an imported model's position may be a node of its own). The write's new rows must be
the rope's result itself or a view of it at offset 0 with the same element order (a transpose
of a one-token key), so row r of the rope's x is row r of the new rows. Out-of-range positions
write no row, as the in-place write does. With the rope and the v cache write, the step's three
small kernels are independent and merge into one launch (`merge_launches`).

Not handled: a write that copies the cache (not in place), a rotated key read by anything else
(an output, another op), rope and write on different streams or backends.

Complexity: O(V + E): the graph indexed once (views by root, issue order, users), then O(1)
checks a write besides its readers.
"""

from __future__ import annotations

from collections.abc import Mapping

from optgraph.codegen.cuda_source import (
    STORAGE,
    Kernel,
    grid_1d,
    in_param,
    index_type,
    make_kernel,
    out_param,
)
from optgraph.codegen.kernels.rope import rope_lines, rope_threads
from optgraph.codegen.plan.steps import DecodeRewrite, Extent, KernelStep, Location
from optgraph.ir.graph import Graph, Node, TensorType
from optgraph.ir.layout import alias_roots, alias_views

# Fold a key's rope into its in-place cache write (one launch fewer a layer); False: two kernels.
ROPE_CACHE_WRITES = True


def rope_cache_writes(graph: Graph, in_place: Mapping[str, str]) -> dict[str, Node]:
    """{rope node name: the kv_cache_write it feeds} for every pair one kernel may compute."""
    if not ROPE_CACHE_WRITES or not in_place:
        return {}
    roots = alias_roots(graph)
    views = alias_views(graph)
    order = IssueOrder(graph)
    by_name = {n.name: n for n in graph.nodes}
    users = graph.users()
    outputs = set(graph.output_names())
    types = graph.value_types()
    pairs: dict[str, Node] = {}
    for name in in_place:
        write = by_name.get(name)
        if write is None or write.op != "kv_cache_write" or len(write.operands) != 3:
            continue
        new = write.operands[1]
        rope_name, offset = roots.get(new, (new, 0))
        rope = by_name.get(rope_name)
        if rope is None or rope.op != "rope" or offset != 0 or rope_name in pairs:
            continue
        if rope.stream != write.stream or rope.ann.backend != write.ann.backend:
            continue
        aliases = {rope_name} | {view for view, _ in views.get(rope_name, [])}
        readers = {graph.nodes[u].name for v in aliases for u in users.get(v, [])} - aliases
        if readers != {name} or aliases & outputs or not _same_rows(types, rope, write):
            continue
        if not order.ready(write.operands[2], rope):
            continue  # the write's position is computed after the rope
        pairs[rope_name] = write
    return pairs


class IssueOrder:
    """Where each node of `graph` is issued, computed once (`ready` is then O(1))."""

    def __init__(self, graph: Graph):
        self.nodes = graph.nodes
        self.index = graph.producers()
        self.given = graph.input_names() | graph.weight_names()

    def ready(self, value: str, at: Node) -> bool:
        """Whether `value` is computed before `at` is issued, on its stream (inputs and weights
        are always ready): what a kernel issued at `at`'s place may read."""
        if value in self.given:
            return True
        i = self.index.get(value)
        return i is not None and i < self.index[at.name] and self.nodes[i].stream == at.stream


def _same_rows(types: Mapping[str, TensorType], rope: Node, write: Node) -> bool:
    """Whether the rope's x rows are the write's new rows, in order, in the cache's dtype."""
    x, new, cache = types[rope.operands[0]], types[write.operands[1]], types[write.operands[0]]
    return (
        x.rank == 4
        and new.rank == 4
        and cache.rank == 4
        and x.dtype == new.dtype == cache.dtype
        and x.numel == new.numel
        and x.shape[-1] == new.shape[-1] == cache.shape[-1]
        and new.shape[:2] == cache.shape[:2]
    )


def rope_cache_kernel(
    rope: Node, write: Node, types: Mapping[str, TensorType]
) -> tuple[Kernel, tuple[int, int, int], tuple[int, int, int]]:
    """(kernel, grid, block): the rope of `rope` storing each row at its cache row of `write`.
    Parameters: out (the cache), in0 (x), in1 (the rope's positions), in2 (the write's)."""
    x = types[rope.operands[0]]
    pos = types[rope.operands[1]]
    cache, new, wpos = (types[o] for o in write.operands)
    _, _, smax, _ = cache.shape
    s = new.shape[2]
    idx = index_type(cache.numel)
    head = [
        "const long long og_pos = (long long)in2[0];",
        f"if (og_pos < 0 || og_pos > {smax - s}LL) return;",
    ]
    row_map = f"(row / {s}u) * {smax}u + ({idx})og_pos + row % {s}u"
    lines = head + rope_lines(rope, (x, pos), "out", row_map)
    decls = [
        out_param(cache.dtype),
        in_param(x.dtype, 0),
        f"const {STORAGE[pos.dtype]}* in1",
        f"const {STORAGE[wpos.dtype]}* in2",
    ]
    kernel = make_kernel("rope_kv", decls, "\n".join("  " + line for line in lines))
    grid, block = grid_1d(rope_threads(rope, (x, pos)))
    return kernel, grid, block


def rope_cache_step(
    rope: Node,
    write: Node,
    locations: Mapping[str, Location],
    types: Mapping[str, TensorType],
) -> tuple[KernelStep, Kernel]:
    """The launch of the pair at the rope's place: it reads x and both positions, and writes
    the cache (the write's result, in the input's bytes)."""
    kernel, grid, block = rope_cache_kernel(rope, write, types)
    args = (
        locations[write.name],
        locations[rope.operands[0]],
        locations[rope.operands[1]],
        locations[write.operands[2]],
    )
    values = (rope.operands[0], rope.operands[1], write.operands[2])
    reads = tuple(Extent.of(locations[v], types[v].nbytes) for v in values)
    writes = (Extent.of(locations[write.name], types[write.name].nbytes),)
    step = KernelStep(rope.name, rope.stream, kernel.name, grid, block, 0, args, reads, writes)
    return step, kernel


def rope_cache_taken(rope: str, write: Node, kernel: str) -> DecodeRewrite:
    """The pair as the lowered plan text lists it, `kernel` the rope's launch's:

    DecodeRewrite("rope_cache_writes", "k_rot", "og_rope_kv_<hash>", ("kc",),
                  "the rope stores its rows in %k_cache, in place")
    """
    note = f"the rope stores its rows in %{write.operands[0]}, in place"
    return DecodeRewrite("rope_cache_writes", rope, kernel, (write.name,), note)
