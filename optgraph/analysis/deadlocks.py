"""Deadlocks across devices: collectives that wait for each other through the issue order.

A collective blocks each participating lane (device, stream) until every participant has reached
it: an `all_reduce`/`all_gather` on each device of its group, and a `send` until its `recv` is
posted (NCCL blocks a large send so; a small one may finish early, but a plan must not rely on
it). The lanes run their steps in issue order, and a `wait` blocks until its `record` ran. So the
program can run to the end iff the graph whose vertices are node instances, with every
collective's instances (a send with its recv) merged into one vertex, and whose edges are lane
order and record -> wait, has no cycle. `find_deadlocks` reports one cycle per strongly connected
group, naming its collectives:

    %t = send(%x) {to = 1} !{device = 0}    %s = all_reduce(...) {group = [0, 1]}
    %r = recv(%t) {from = 0} !{device = 1}
    -> deadlock: send '%t' (device 0 -> 1) and all_reduce '%s' wait for each other: each is
       issued on a lane of the other's devices before it

Complexity: O(I + E) for I instances (Kahn's algorithm over the merged vertices).
"""

from __future__ import annotations

from optgraph.analysis.happens_before import GROUP_COLLECTIVES
from optgraph.errors import Diagnostic
from optgraph.ir.graph import Graph, Node


def _describe(node: Node) -> str:
    if node.op == "send":
        return f"send '%{node.name}' (device {node.devices[0]} -> {node.attrs.get('to')})"
    return f"{node.op} '%{node.name}'"


def _merged_vertices(graph: Graph) -> tuple[list[int], dict[tuple[int, int], int]]:
    """A vertex per instance, the instances of one rendezvous sharing theirs; the owner node of
    each vertex (the send of a pair)."""
    vertex: dict[tuple[int, int], int] = {}
    owner: list[int] = []
    sends: dict[str, int] = {}
    for i, node in enumerate(graph.nodes):
        if node.op in GROUP_COLLECTIVES:
            v = len(owner)
            owner.append(i)
            vertex.update(((i, d), v) for d in node.devices)
            continue
        if node.op == "recv" and node.operands and node.operands[0] in sends:
            vertex[(i, node.devices[0])] = sends[node.operands[0]]
            continue
        for d in node.devices:
            vertex[(i, d)] = len(owner)
            owner.append(i)
        if node.op == "send":
            sends[node.name] = vertex[(i, node.devices[0])]
    return owner, vertex


def find_deadlocks(graph: Graph) -> list[Diagnostic]:
    """One located error per group of collectives that wait for each other (see above)."""
    owner, vertex = _merged_vertices(graph)
    succ: list[set[int]] = [set() for _ in owner]
    last_on: dict[tuple[int, int], int] = {}
    records: dict[tuple[str, int], int] = {}
    for i, node in enumerate(graph.nodes):
        for d in node.devices:
            v = vertex[(i, d)]
            lane = (d, node.stream)
            if lane in last_on and last_on[lane] != v:
                succ[last_on[lane]].add(v)
            last_on[lane] = v
            if node.op == "record":
                records[(node.name, d)] = v
            elif node.op == "wait" and (node.name, d) in records:
                succ[records[(node.name, d)]].add(v)
    indegree = [0] * len(owner)
    for targets in succ:
        for t in targets:
            indegree[t] += 1
    ready = [v for v, k in enumerate(indegree) if k == 0]
    while ready:
        v = ready.pop()
        for t in succ[v]:
            indegree[t] -= 1
            if indegree[t] == 0:
                ready.append(t)
    stuck = sorted({owner[v] for v, k in enumerate(indegree) if k > 0})
    nodes = graph.nodes
    blocking = [i for i in stuck if nodes[i].op in GROUP_COLLECTIVES or nodes[i].op == "send"]
    if not blocking:
        return []
    names = " and ".join(_describe(nodes[i]) for i in blocking)
    message = (
        f"deadlock: {names} wait for each other: each is issued on a lane of the other's "
        "devices before it"
    )
    return [Diagnostic(message, nodes[blocking[0]].span)]
