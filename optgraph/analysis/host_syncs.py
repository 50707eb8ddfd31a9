"""Host<->device synchronizations of a split graph, and the fewest its placement allows.

A synchronization is a `wait` on one side of the host/device boundary for an event recorded on
the other: the host stream (the CPU nodes of `split-backends`, `backend = "cpu"`) waiting for a
GPU stream, or a GPU stream (the copy stream, usually) waiting for the host. Waits between GPU
streams are not counted: the device orders those itself.

    %ids.cpu = copy(%ids) {to = "cpu"} !{stream = 0}   record ^d2h0 !{stream = 0}
    wait ^d2h0 !{stream = 1, backend = "cpu"}          <- one: the host waits for the GPU
    record ^host0 !{stream = 1, backend = "cpu"}       wait ^host0 !{stream = 2}   <- one more

The fewest a placement allows (`min_host_device_syncs`) is the most backend changes along any
dependency path: each change on a path needs a wait of its own (the waits of one path are
ordered in time, and each orders one side after the other), and one wait per split boundary and
direction achieves it on a chain of splits. Values the runtime holds on both sides (inputs,
device weights) and host weights copied in need none.

Complexity O(V + E).
"""

from __future__ import annotations

from optgraph.ir.graph import Graph


def host_device_waits(graph: Graph) -> int:
    """The waits of `graph` that cross the host/device boundary (see the module docstring)."""
    recorded_on_host: dict[str, bool] = {}
    count = 0
    for node in graph.nodes:
        on_host = node.ann.backend == "cpu"
        if node.op == "record":
            recorded_on_host[node.name] = on_host
        elif node.op == "wait" and node.name in recorded_on_host:
            count += recorded_on_host[node.name] != on_host
    return count


def min_host_device_syncs(graph: Graph) -> int:
    """The most backend changes along a dependency path of node results (copies count where
    their operand's side differs from their destination `to`)."""
    producers = graph.producers()
    side: dict[str, str] = {}
    changes: dict[str, int] = {}
    for node in graph.nodes:
        if node.is_event:
            continue
        here = str(node.attrs.get("to", "cuda")) if node.op == "copy" else node.ann.backend
        here = here or "cuda"
        best = 0
        for operand in node.operands:
            if operand not in producers:
                continue  # inputs and weights: held where they are read, or copied in
            best = max(best, changes[operand] + (side[operand] != here))
        side[node.name], changes[node.name] = here, best
    return max(changes.values(), default=0)
