"""One communicator's collectives on a device must run one at a time: ordered on that device.

The runtime gives each group of devices one NCCL communicator (`send`/`recv`: the world's), and
NCCL runs one communicator's calls one after another: two of them whose kernels overlap on a
device may hang. So on every device, each collective of a communicator must be ordered before
the next one by that device's own order: the same stream, or events recorded and waited on that
device. A collective on another device does not order them here: both kernels can be resident
on this device while the other device has not joined yet.

    %s = all_reduce(%a, %b) {group = [0, 1]} !{device = [0, 1], stream = 1}
    %u = all_reduce(%c, %d) {group = [0, 1]} !{device = [0, 1]}            (stream 0, no event)
    -> error: all_reduce '%s' and all_reduce '%u' use one NCCL communicator (group [0, 1]) but
       nothing orders them on device 0 (streams 1 and 0) ...

Each device's order is happens-before over the device's own nodes (`HappensBefore` of the graph
cut to that device: a collective joins nothing there, a recv's send is elsewhere). Consecutive
collectives of a communicator, in issue order, are checked: if each precedes the next, all are
ordered.

Complexity: O(I_d·k_d) per device d for its happens-before (I_d instances, k_d lanes), O(C) for
its C collectives.
"""

from __future__ import annotations

from dataclasses import replace

from optgraph.analysis.happens_before import GROUP_COLLECTIVES, HappensBefore
from optgraph.errors import Diagnostic
from optgraph.ir.graph import Graph, Node

POINT_TO_POINT = frozenset({"send", "recv"})


def communicator(node: Node, world: int) -> tuple[int, ...] | None:
    """The devices of the communicator `node` runs on (None: not a collective)."""
    if node.op in GROUP_COLLECTIVES:
        group = node.attr("group")
        return tuple(group) if isinstance(group, (list, tuple)) else None
    if node.op in POINT_TO_POINT:
        return tuple(range(world))
    return None


def find_unordered_collectives(graph: Graph) -> list[Diagnostic]:
    """One located error per pair of consecutive collectives of one communicator that nothing
    orders on a device they share (see the module docstring)."""
    world = graph.device_count()
    if not any(communicator(n, world) is not None for n in graph.nodes):
        return []
    diagnostics = []
    for device in range(world):
        indices = [i for i, n in enumerate(graph.nodes) if device in n.devices]
        local = replace(
            graph, nodes=tuple(graph.nodes[i].with_ann(device=(device,)) for i in indices)
        )
        order = HappensBefore(local)
        last: dict[tuple[int, ...], int] = {}  # communicator -> position in `indices`
        for k, i in enumerate(indices):
            node = graph.nodes[i]
            key = communicator(node, world)
            if key is None:
                continue
            before = last.get(key)
            last[key] = k
            if before is None or order.ordered(before, k):
                continue
            earlier = graph.nodes[indices[before]]
            diagnostics.append(
                Diagnostic(
                    f"{earlier.op} '%{earlier.name}' and {node.op} '%{node.name}' use one NCCL "
                    f"communicator (devices {list(key)}) but nothing orders them on device "
                    f"{device} (streams {earlier.stream} and {node.stream}): NCCL runs a "
                    "communicator's calls one at a time, and two that overlap may hang; issue "
                    "them on one stream, or record an event after the first and wait for it "
                    "before the second on that device",
                    node.span,
                )
            )
    return diagnostics
