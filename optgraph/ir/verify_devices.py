"""Device checks of `verify`: every value read where it exists, collectives well placed.

A graph spreads over devices with the `device` annotation (docs/ir.md, "Devices"). These rules hold
for every verified graph:

- an operand exists on every device its node runs on (its device set contains the node's), except
  a collective's operand i, which lives on `group[i]`, and a recv's operand, which is a send's result
  on the sending device;
- a collective runs on exactly the devices of its group (in any order); `all_reduce` and
  `all_gather` operands are checked by the op table (one type, distinct members);
- `send` runs on one device, `to` is another one, and its result is read by exactly one `recv`
  (nothing else, not an output); that recv runs on `to` and names the sender in `from`;
- `to`, `from` and group members are devices of the graph (below `Graph.device_count()`);
- a `wait` runs only on devices its `record` records on (events order the streams of one device;
  devices are ordered by collectives).

    %y = add(%x, %x) : f32[4] !{device = 1}      (%x : f32[4] !{device = 0})
    ->  add: operand '%x' is on device 0 but the node runs on device 1 (cross devices with a
        collective or send/recv)

Complexity: O(V + E + D) where D sums the lengths of the device lists; O(V) for a graph on one
device with no collective (nothing to check).
"""

from __future__ import annotations

from operator import attrgetter

from optgraph.errors import Diagnostic, Span
from optgraph.ir.graph import Graph, Node

COLLECTIVE_OPS: frozenset[str] = frozenset({"all_reduce", "all_gather", "send", "recv"})
GROUP_OPS: frozenset[str] = frozenset({"all_reduce", "all_gather"})


def devices_text(devices: tuple[int, ...]) -> str:
    """`device 1` or `devices [0, 1]`: how messages name a device set."""
    if len(devices) == 1:
        return f"device {devices[0]}"
    return "devices [" + ", ".join(str(d) for d in devices) + "]"


def _operand_span(node: Node, index: int) -> Span | None:
    return node.operand_spans[index] if index < len(node.operand_spans) else node.span


def _int_attr(node: Node, key: str) -> int | None:
    value = node.attrs.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


class _DeviceChecker:
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.devices = graph.value_devices()
        self.count = graph.device_count()
        self.diags: list[Diagnostic] = []
        self.nodes = {n.name: n for n in graph.nodes if not n.is_event}

    def report(self, message: str, span: Span | None) -> None:
        self.diags.append(Diagnostic(message, span))

    def check_id(self, node: Node, what: str, device: int) -> None:
        if not 0 <= device < self.count:
            self.report(
                f"{node.op}: {what} {device} is not a device of the graph (devices 0 to "
                f"{self.count - 1})",
                node.span,
            )

    def check_operands(self, node: Node) -> None:
        """Plain nodes: every operand on every device the node runs on."""
        for k, operand in enumerate(node.operands):
            have = self.devices.get(operand)
            if have is None:
                continue  # undefined: reported by verify
            missing = [d for d in node.devices if d not in have]
            if missing:
                self.report(
                    f"{node.op}: operand '%{operand}' is on {devices_text(have)} but the node "
                    f"runs on {devices_text(node.devices)} (cross devices with a collective or "
                    "send/recv)",
                    _operand_span(node, k),
                )

    def check_group(self, node: Node) -> None:
        group = node.attrs.get("group")
        if not isinstance(group, tuple) or len(set(group)) != len(group):
            return  # reported by the op table
        for member in group:
            self.check_id(node, "group member", member)
        if sorted(group) != sorted(node.devices):
            self.report(
                f"{node.op}: runs on {devices_text(node.devices)} but its group is "
                f"{list(group)} (a collective runs on exactly its group's devices)",
                node.span,
            )
        for k, (operand, member) in enumerate(zip(node.operands, group)):
            have = self.devices.get(operand)
            if have is not None and member not in have:
                self.report(
                    f"{node.op}: operand {k} '%{operand}' is on {devices_text(have)}, not on "
                    f"device {member} (group[{k}])",
                    _operand_span(node, k),
                )

    def check_send(self, node: Node, readers: list[Node]) -> None:
        to = _int_attr(node, "to")
        if len(node.devices) != 1:
            self.report(
                f"send: runs on {devices_text(node.devices)}; a send runs on one device", node.span
            )
        elif to is not None and to == node.devices[0]:
            self.report(f"send: 'to' is its own device {to}", node.span)
        if to is not None:
            self.check_id(node, "'to' device", to)
        self.check_operands(node)
        others = [r for r in readers if r.op != "recv"]
        if others:
            self.report(
                f"send: '%{node.name}' is read by {others[0].op} '%{others[0].name}'; only a recv "
                "reads a send's result",
                others[0].span,
            )
        receivers = [r for r in readers if r.op == "recv"]
        if not receivers:
            self.report(
                f"send: '%{node.name}' is never received (add a recv on device {to})", node.span
            )
        elif len(receivers) > 1:
            self.report(f"send: '%{node.name}' is received twice", receivers[1].span)
        if node.name in self.graph.output_names():
            self.report(
                f"send: '%{node.name}' is an output; output the recv's result instead", node.span
            )

    def check_recv(self, node: Node) -> None:
        source = _int_attr(node, "from")
        if source is not None:
            self.check_id(node, "'from' device", source)
        if len(node.devices) != 1:
            self.report(
                f"recv: runs on {devices_text(node.devices)}; a recv runs on one device", node.span
            )
        sender = self.nodes.get(node.operands[0]) if node.operands else None
        if sender is None or sender.op != "send":
            if node.operands and node.operands[0] in self.devices:
                self.report(
                    f"recv: operand '%{node.operands[0]}' is not the result of a send",
                    _operand_span(node, 0),
                )
            return
        to = _int_attr(sender, "to")
        if to is not None and node.devices != (to,):
            self.report(
                f"recv: runs on {devices_text(node.devices)} but '%{sender.name}' is sent to "
                f"device {to}",
                node.span,
            )
        if source is not None and sender.devices != (source,):
            self.report(
                f"recv: 'from' is {source} but '%{sender.name}' is sent from "
                f"{devices_text(sender.devices)}",
                node.span,
            )

    def check_events(self) -> None:
        recorded: dict[str, tuple[int, ...]] = {}
        for node in self.graph.nodes:
            if node.op == "record":
                recorded.setdefault(node.name, node.devices)
            elif node.op == "wait" and not set(node.devices) <= set(
                recorded.get(node.name, node.devices)
            ):
                self.report(
                    f"wait on event '^{node.name}' runs on {devices_text(node.devices)} but "
                    f"the event is recorded on {devices_text(recorded[node.name])} (events "
                    "order the streams of one device; collectives order devices)",
                    node.span,
                )

    def run(self) -> list[Diagnostic]:
        readers: dict[str, list[Node]] = {}
        for node in self.graph.nodes:
            for operand in node.operands:
                readers.setdefault(operand, []).append(node)
        for node in self.graph.nodes:
            if node.is_event:
                continue
            if node.op in GROUP_OPS:
                self.check_group(node)
            elif node.op == "send":
                self.check_send(node, readers.get(node.name, []))
            elif node.op == "recv":
                self.check_recv(node)
            else:
                self.check_operands(node)
        self.check_events()
        return self.diags


def device_diagnostics(graph: Graph) -> list[Diagnostic]:
    """Every device rule `graph` breaks, in issue order (events last)."""
    if _is_one_device_graph(graph):
        return []
    return _DeviceChecker(graph).run()


def _is_one_device_graph(graph: Graph) -> bool:
    """No device named anywhere and no collective, send or recv: every value and node is on
    device 0, so no rule above can fail (the checks would find nothing). O(V)."""
    if not COLLECTIVE_OPS.isdisjoint(map(_OP, graph.nodes)):
        return False
    declarations = [i.ann for i in graph.inputs] + [w.ann for w in graph.weights]
    anns = declarations + list(map(_ANN, graph.nodes))
    distinct = dict(zip(map(id, anns), anns))  # nodes share a few annotation objects
    return all(ann.device is None for ann in distinct.values())


_OP = attrgetter("op")
_ANN = attrgetter("ann")
