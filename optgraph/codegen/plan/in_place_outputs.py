"""Outputs computed in place in an input's buffer: a KV cache updated where the caller keeps it.

A decode step reads `%k_cache` (an input) and yields `%k_cache_new = kv_cache_write(%k_cache, %k,
%pos)` (an output). When the caller binds that output to the very array it passes as the input
(`program.run({"k_cache": c, ...}, out={"k_cache_new": c})`, what a decoder loop does), the
program need not copy the whole cache into its arena and back out: the kernel writes the new
rows into the caller's array, and the output needs no copy.

    %k_cache_new = kv_cache_write(%k_cache, %k, %pos)        out["k_cache_new"] is in["k_cache"]
    before: kernel copies the cache input -> arena and writes the rows; memcpy arena -> out
    after:  kernel writes the rows into the input's buffer; nothing to copy

`in_place_candidates(graph)` lists where this is legal, as {output: input}: the output is the
result of a GPU `kv_cache_write` whose cache operand is the input itself (not a view of it), the
input has no other reader (every other reader would see the new rows too early, or late), and
neither the output nor the input is paired twice. `lower_cuda(graph, in_place=...)` places each
chosen output at its input's location. `unwritten_inputs(graph, in_place)` are the inputs no
kernel of a step writes (every input but those updated in place): a kernel may read them before
its PDL wait. Complexity O(V + E).
"""

from __future__ import annotations

from collections.abc import Mapping

from optgraph.ir.graph import Graph


def unwritten_inputs(graph: Graph, in_place: Mapping[str, str]) -> frozenset[str]:
    """The graph's inputs that no kernel of the step writes: all but the in-place pairs' inputs
    (inputs are never placed in the arena; earlier steps wrote them before this one started)."""
    return frozenset(graph.input_names()) - frozenset(in_place.values())


def in_place_candidates(graph: Graph) -> dict[str, str]:
    """{output: input} pairs whose output may be computed in the input's buffer (see above)."""
    inputs = graph.input_names()
    users = graph.users()
    outputs = graph.output_names()
    pairs: dict[str, str] = {}
    taken: set[str] = set()
    for node in graph.nodes:
        if node.op != "kv_cache_write" or node.ann.backend == "cpu" or not node.operands:
            continue
        cache = node.operands[0]
        if cache not in inputs or cache in taken or outputs.count(node.name) != 1:
            continue
        readers = set(users.get(cache, []))
        if len(readers) != 1 or cache in node.operands[1:] or cache in outputs:
            continue
        pairs[node.name] = cache
        taken.add(cache)
    return pairs


def check_in_place(graph: Graph, in_place: dict[str, str]) -> None:
    """Raise ValueError unless every pair of `in_place` is among `in_place_candidates(graph)`."""
    legal = in_place_candidates(graph)
    for output, source in in_place.items():
        if legal.get(output) != source:
            raise ValueError(
                f"output '%{output}' cannot be computed in place in input '%{source}' (only a "
                "kv_cache_write of an input that nothing else reads can)"
            )
