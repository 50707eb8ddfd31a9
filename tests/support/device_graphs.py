"""Hypothesis strategy for random, verified graphs spread over several devices.

    from tests.support.device_graphs import random_device_graphs

    @given(random_device_graphs())
    def test_something(graph): ...

A random single-device DAG (`random_dag_graphs`) is laid out on 2 or 3 devices the way parallel
plans do it: inputs replicated on every device; each weight replicated or one copy per device
(`%w.d1` on device 1); each node either replicated (when all its operands are) or one copy per
device (`%h.d1`). Each output of the DAG is then combined across devices by a collective over a
random group (any order, sometimes a subset of the devices): an `all_reduce` (then a replicated
`neg`), an `all_gather` along axis 0, or a `send`/`recv` to another device. Copies of different
devices are interleaved in issue order. Streams are not assigned (assign-streams does that).
The graph is verified before it is returned.
"""

from __future__ import annotations

from collections.abc import Callable

from hypothesis import strategies as st

from optgraph.ir.graph import Annotations, Graph, Input, Node, Output, TensorType, Weight
from optgraph.ir.verify import verify
from tests.support.random_graphs import random_dag_graphs

Draw = Callable[[st.SearchStrategy], object]


class _Layout:
    def __init__(self, draw: Draw, base: Graph, devices: tuple[int, ...]):
        self.draw = draw
        self.base = base
        self.devices = devices
        self.replicated: set[str] = {i.name for i in base.inputs}
        self.types = base.value_types()
        self.nodes: list[Node] = []
        self.weights: list[Weight] = []

    def name_on(self, value: str, device: int) -> str:
        return value if value in self.replicated else f"{value}.d{device}"

    def lay_weights(self) -> None:
        for w in self.base.weights:
            if self.draw(st.booleans()):
                self.replicated.add(w.name)
                self.weights.append(replace_ann(w, self.devices))
            else:
                for d in self.devices:
                    self.weights.append(
                        Weight(f"{w.name}.d{d}", w.type, w.placement, Annotations(device=(d,)))
                    )

    def lay_nodes(self) -> None:
        pending: list[list[Node]] = []  # per-device copies not yet issued
        for node in self.base.nodes:
            if node.is_event:
                continue
            plain = node.with_ann(stream=None)
            if all(o in self.replicated for o in node.operands) and self.draw(st.booleans()):
                self.flush(pending)
                self.replicated.add(node.name)
                self.nodes.append(plain.with_ann(device=self.devices))
                continue
            copies = [
                Node(
                    f"{node.name}.d{d}",
                    node.op,
                    tuple(self.name_on(o, d) for o in node.operands),
                    node.attrs,
                    node.type,
                    Annotations(device=(d,)),
                    node.body,
                )
                for d in self.devices
            ]
            pending.append(copies)
            if self.draw(st.booleans()):
                self.flush(pending)
        self.flush(pending)

    def flush(self, pending: list[list[Node]]) -> None:
        """Issue the pending copies, interleaving devices but keeping each device's order."""
        queues = [[copies[k] for copies in pending] for k in range(len(self.devices))]
        while any(queues):
            live = [q for q in queues if q]
            self.nodes.append(live[self.draw(st.integers(0, len(live) - 1))].pop(0))  # type: ignore[index]
        pending.clear()

    def combine(self, value: str, k: int) -> str:
        """A collective over a random group reading the copies of `value`; returns the result."""
        t = self.types[value]
        size = self.draw(st.integers(2, len(self.devices)))
        group = tuple(self.draw(st.permutations(self.devices)))[:size]  # type: ignore[arg-type]
        kind = self.draw(st.sampled_from(("all_reduce", "all_gather", "send")))
        operands = tuple(self.name_on(value, d) for d in group)
        if kind == "send":
            sent, result = f"out{k}.t", f"out{k}"
            self.nodes.append(
                Node(sent, "send", operands[:1], {"to": group[1]}, t, Annotations(device=group[:1]))
            )
            ann = Annotations(device=group[1:2])
            self.nodes.append(Node(result, "recv", (sent,), {"from": group[0]}, t, ann))
            return result
        ann = Annotations(device=group)
        if kind == "all_gather" and t.rank >= 1:
            shape = (t.shape[0] * size, *t.shape[1:])
            gathered = TensorType(t.dtype, shape)
            attrs = {"axis": 0, "group": group}
            self.nodes.append(Node(f"out{k}", "all_gather", operands, attrs, gathered, ann))
            return f"out{k}"
        self.nodes.append(Node(f"out{k}.s", "all_reduce", operands, {"group": group}, t, ann))
        self.nodes.append(Node(f"out{k}", "neg", (f"out{k}.s",), {}, t, ann))
        return f"out{k}"


def replace_ann(w: Weight, devices: tuple[int, ...]) -> Weight:
    return Weight(w.name, w.type, w.placement, Annotations(device=devices))


@st.composite
def random_device_graphs(draw: Draw, max_nodes: int = 8, max_devices: int = 3) -> Graph:
    """A verified random graph over 2..max_devices devices (see the module docstring)."""
    base: Graph = draw(random_dag_graphs(max_nodes=max_nodes))  # type: ignore[assignment]
    count = draw(st.integers(2, max_devices))
    devices = tuple(range(count))
    layout = _Layout(draw, base, devices)
    layout.lay_weights()
    layout.lay_nodes()
    outputs = [layout.combine(o, k) for k, o in enumerate(base.output_names())]
    inputs = tuple(Input(i.name, i.type, ann=Annotations(device=devices)) for i in base.inputs)
    graph = Graph(
        base.name, inputs, tuple(layout.weights), tuple(layout.nodes),
        tuple(Output(o) for o in outputs),
    )  # fmt: skip
    verify(graph)
    return graph
