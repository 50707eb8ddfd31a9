"""HappensBefore across devices: lanes (device, stream), instances of replicated nodes, the join of
a collective and the one-way order of a send/recv pair."""

from __future__ import annotations

import optgraph as og
from optgraph.analysis.happens_before import HappensBefore

GRAPH = """graph g {
  input %x : f32[4] !{device = [0, 1]}
  %a = neg(%x) : f32[4] !{device = 0, stream = 0}
  %b = exp(%x) : f32[4] !{device = 1, stream = 0}
  %r = relu(%x) : f32[4] !{device = [0, 1], stream = 1}
  %s = all_reduce(%a, %b) {group = [0, 1]} : f32[4] !{device = [0, 1], stream = 0}
  %c = neg(%s) : f32[4] !{device = 0, stream = 0}
  %d = neg(%s) : f32[4] !{device = 1, stream = 0}
  %t = send(%c) {to = 1} : f32[4] !{device = 0, stream = 0}
  %e = neg(%x) : f32[4] !{device = 1, stream = 0}
  %u = recv(%t) {from = 0} : f32[4] !{device = 1, stream = 0}
  %f = neg(%x) : f32[4] !{device = 0, stream = 0}
  %g = neg(%u) : f32[4] !{device = 1, stream = 0}
  output %s, %g, %f, %d, %r, %e
}
"""


def index(graph: og.Graph, name: str) -> int:
    return next(i for i, n in enumerate(graph.nodes) if n.name == name)


def test_instances_and_lanes() -> None:
    graph = og.parse(GRAPH)
    hb = HappensBefore(graph)
    assert hb.lanes == [(0, 0), (0, 1), (1, 0), (1, 1)]
    r = index(graph, "r")
    assert list(hb.instances_of(r)) == [r, r + 1]  # one instance per device, in list order
    assert hb.device_of[hb.instance(r, 1)] == 1
    assert len(hb.node_of) == len(graph.nodes) + 2  # %r and %s run twice


def test_a_collective_orders_every_participant_before_every_participant_after() -> None:
    graph = og.parse(GRAPH)
    hb = HappensBefore(graph)
    a, b, c, d = (index(graph, n) for n in "abcd")
    assert hb.ordered_instances(hb.instance(a, 0), hb.instance(d, 1))  # device 0 -> device 1
    assert hb.ordered_instances(hb.instance(b, 1), hb.instance(c, 0))  # device 1 -> device 0
    s = index(graph, "s")
    # The instances of one collective are not ordered with each other.
    assert not hb.ordered_instances(hb.instance(s, 0), hb.instance(s, 1))
    assert hb.ordered(a, s) and hb.ordered(s, c) and hb.ordered(s, d)


def test_replicated_instances_on_another_stream_are_unordered() -> None:
    graph = og.parse(GRAPH)
    hb = HappensBefore(graph)
    r, s, a = index(graph, "r"), index(graph, "s"), index(graph, "a")
    assert hb.concurrent(r, s) and hb.concurrent(r, a)
    assert not hb.ordered_instances(hb.instance(r, 0), hb.instance(r, 1))


def test_send_orders_the_sender_before_the_receiver_only() -> None:
    graph = og.parse(GRAPH)
    hb = HappensBefore(graph)
    c, e, f, g, t, u = (index(graph, n) for n in "cefgtu")
    assert hb.ordered_instances(hb.instance(c, 0), hb.instance(g, 1))
    assert hb.ordered(t, u)
    # The receiver's earlier work is not known to precede the sender's later work.
    assert not hb.ordered_instances(hb.instance(e, 1), hb.instance(f, 0))
    assert hb.unordered_data_edges() == []


def test_end_joins_each_device_separately() -> None:
    graph = og.parse(GRAPH)
    hb = HappensBefore(graph)
    assert [hb.lanes[c] for c in hb.unjoined_lanes()] == [(0, 1), (1, 1)]
    assert not hb.joined_at_end()
