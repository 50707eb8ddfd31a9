"""verify(graph, previous=...) on a graph that differs from a verified one only in node
annotations (what analyze-lifetimes and plan-memory produce) checks only those annotations, and
still finds every problem a full verify finds there; any other change gets the full verify."""

from __future__ import annotations

from dataclasses import dataclass, replace

import pytest

import optgraph as og
from optgraph.errors import VerifyError
from optgraph.ir import verify as verify_module
from optgraph.ir.graph import Graph, TensorType
from optgraph.ir.verify import _verify
from optgraph.passes.base import Pass
from optgraph.passes.manager import run_pipeline

TEXT = """graph g {
  input %x : f32[4]
  %a = exp(%x) : f32[4]
  %b = neg(%a) : f32[4]
  %y = add(%a, %b) : f32[4]
  output %y
}
"""


def verified() -> Graph:
    graph = og.parse(TEXT)
    og.verify(graph)
    return graph


def with_node(graph: Graph, index: int, **annotations: object) -> Graph:
    nodes = list(graph.nodes)
    nodes[index] = nodes[index].with_ann(**annotations)  # type: ignore[arg-type]
    return graph.with_nodes(nodes)


def messages(graph: Graph) -> list[str]:
    with pytest.raises(VerifyError) as info:
        og.verify(graph, previous=verified())
    return [d.message for d in info.value.diagnostics]


def full_messages(graph: Graph) -> list[str]:
    with pytest.raises(VerifyError) as info:
        _verify(graph)
    return [d.message for d in info.value.diagnostics]


@pytest.mark.parametrize(
    "annotations",
    [{"layout": "transposed"}, {"stream": 5000}, {"offset": 1 << 63}, {"visible": (1 << 63,)}],
)
def test_a_bad_annotation_after_a_verified_graph_is_reported_as_in_full(
    annotations: dict[str, object],
) -> None:
    broken = with_node(verified(), 1, **annotations)
    assert messages(broken) == full_messages(broken)
    assert messages(broken)


def test_good_annotations_verify() -> None:
    previous = verified()
    og.verify(with_node(previous, 1, offset=0, size=16, live=(1, 2), stream=0), previous)


def test_a_changed_type_gets_the_full_verify() -> None:
    graph = verified()
    nodes = list(graph.nodes)
    nodes[1] = replace(nodes[1].with_ann(offset=0), type=TensorType("f32", (3,)))
    changed = graph.with_nodes(nodes)
    assert "neg: declared type f32[3] but the operands give f32[4]" in messages(changed)
    assert messages(changed) == full_messages(changed)


def test_only_annotations_changed_skips_the_full_verify(monkeypatch: pytest.MonkeyPatch) -> None:
    previous = verified()
    graph = with_node(previous, 2, offset=0, size=16)
    calls: list[Graph] = []
    monkeypatch.setattr(verify_module, "_verify", calls.append)
    og.verify(graph, previous)
    assert calls == []
    og.verify(with_node(previous, 2, offset=0, size=32))  # no previous graph: in full
    assert len(calls) == 1


def test_a_changed_device_gets_the_device_rules() -> None:
    broken = with_node(verified(), 1, device=(1,))
    assert any("is on device 0 but the node runs on device 1" in m for m in messages(broken))


def test_reordered_nodes_get_the_full_verify() -> None:
    graph = verified()
    nodes = list(graph.nodes)
    nodes[0], nodes[1] = nodes[1], nodes[0]
    assert any("used before it is defined" in m for m in messages(graph.with_nodes(nodes)))


@dataclass(frozen=True)
class StreamTooLargePass(Pass):
    """A broken pass that only annotates: every node on a stream id beyond the limit."""

    name = "stream-too-large"
    summary = "broken on purpose"

    def run(self, graph: Graph) -> Graph:
        return graph.with_nodes(n.with_ann(stream=4096) for n in graph.nodes)


def test_the_pipeline_still_catches_a_broken_annotating_pass() -> None:
    with pytest.raises(AssertionError, match="stream-too-large produced an invalid graph"):
        run_pipeline(og.parse(TEXT), [StreamTooLargePass()])
