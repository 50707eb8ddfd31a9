"""DOT export and the estimated schedule: colours per stream, dashed event edges, a legend,
rendering through Graphviz (or a plain message saying how to install it), the critical path,
the speedup over one stream and the Chrome trace."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import optgraph as og
from optgraph.analysis.schedule_estimate import chrome_trace, estimate_schedule, node_seconds
from optgraph.errors import InputError
from optgraph.ir import dot
from optgraph.ir.dot import stream_color, to_dot, write_picture
from optgraph.passes.manager import run_pipeline

DIAMOND = """graph d {
  input %x : f32[256,1024]
  %a = exp(%x) : f32[256,1024]
  %a.2 = neg(%a) : f32[256,1024]
  %a.3 = relu(%a.2) : f32[256,1024]
  %b = tanh(%x) : f32[256,1024]
  %b.2 = abs(%b) : f32[256,1024]
  %b.3 = silu(%b.2) : f32[256,1024]
  %y = add(%a.3, %b.3) : f32[256,1024]
  output %y
}"""


def _scheduled(pipeline: str = "assign-streams{min-branch-us=0},insert-sync") -> og.Graph:
    return run_pipeline(og.parse(DIAMOND), pipeline)


def test_dot_colours_streams_and_dashes_events() -> None:
    graph = _scheduled()
    text = to_dot(graph)
    assert text.startswith('digraph "d" {') and text.rstrip().endswith("}")
    for node in graph.nodes:
        if not node.is_event:
            line = next(x for x in text.splitlines() if x.strip().startswith(f'"{node.name}" ['))
            assert stream_color(node.stream) in line and node.op in line and str(node.type) in line
    waits = sum(1 for n in graph.nodes if n.op == "wait")
    assert waits == 1 and text.count("style=dashed") == waits
    branch_end = next(n.name for n in graph.nodes if n.name.endswith(".3") and n.stream == 1)
    assert f'"{branch_end}" -> "y" [style=dashed' in text
    assert '"legend:0"' in text and '"legend:1"' in text and '"legend:2"' not in text


def test_final_join_edge_goes_to_the_outputs() -> None:
    graph = run_pipeline(
        og.parse(DIAMOND.replace("output %y", "output %y, %b.3")),
        "assign-streams{min-branch-us=0},insert-sync",
    )
    text = to_dot(graph)
    assert all(n.stream == 0 for n in graph.nodes if n.name == "y")
    assert text.count("style=dashed") == sum(1 for n in graph.nodes if n.op == "wait")


def test_write_dot_text(tmp_path: Path) -> None:
    path = write_picture(_scheduled(), tmp_path / "d.dot")
    assert path.read_text().startswith("digraph")


def test_unknown_picture_format(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"use a \.dot, \.svg or \.png"):
        write_picture(_scheduled(), tmp_path / "d.jpg")


def test_missing_graphviz_says_how_to_install(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setattr(dot.shutil, "which", lambda name: None)
    with pytest.raises(InputError) as info:
        write_picture(_scheduled(), tmp_path / "d.svg")
    message = str(info.value)
    assert "Graphviz 'dot' program" in message and "apt-get install graphviz" in message
    assert "-o " + str(tmp_path / "d") + ".dot" in message
    assert not (tmp_path / "d.svg").exists()


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz 'dot' is not installed")
@pytest.mark.parametrize("suffix", ["svg", "png"])
def test_render(tmp_path: Path, suffix: str) -> None:
    data = write_picture(_scheduled(), tmp_path / f"d.{suffix}").read_bytes()
    assert data.startswith(b"\x89PNG") if suffix == "png" else b"<svg" in data


def test_estimate_one_stream_is_serial_and_two_overlap() -> None:
    single = _scheduled("assign-streams{policy=single}")
    one = estimate_schedule(single)
    assert one.critical_path_s == pytest.approx(one.serial_s) and one.speedup == pytest.approx(1.0)
    two = estimate_schedule(_scheduled())
    seconds = node_seconds(single, og_profile())
    # the chains overlap: the critical path is one branch, the join's wait latency, the add
    latency = og_profile().launch_overhead
    assert two.critical_path_s == pytest.approx(sum(seconds[:3]) + latency + seconds[-1])
    assert 1.3 < two.speedup < 2.0


def og_profile():  # the default device of the estimate
    from optgraph.analysis.schedule_estimate import profile_named

    return profile_named("h100")


EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize("name", ["diamond", "llama_decode", "gpt2_block", "moe_block"])
def test_estimate_on_one_stream_is_the_list_schedule(
    name: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One stream, no events: the running sums are the list schedule's starts and ends."""
    from optgraph.analysis import schedule_estimate

    graph = run_pipeline(og.parse_file(EXAMPLES / f"{name}.ir"), "assign-streams{policy=single}")
    sums = estimate_schedule(graph)
    monkeypatch.setattr(schedule_estimate, "_STREAM", lambda node: 1)  # every node "elsewhere"
    listed = estimate_schedule(graph)
    assert (sums.start, sums.end, sums.serial_s) == (listed.start, listed.end, listed.serial_s)


def test_estimate_respects_data_edges_without_events() -> None:
    graph = _scheduled("assign-streams{min-branch-us=0}")  # no insert-sync
    est = estimate_schedule(graph)
    index = {n.name: i for i, n in enumerate(graph.nodes)}
    assert est.start[index["y"]] >= est.end[index["b.3"]]
    assert est.start[index["y"]] >= est.end[index["a.3"]]


def test_chrome_trace_has_one_track_per_stream() -> None:
    graph = _scheduled()
    trace = chrome_trace(graph, estimate_schedule(graph))
    json.dumps(trace)  # serializable
    events = trace["traceEvents"]
    tracks = {e["args"]["name"] for e in events if e.get("name") == "thread_name"}
    assert tracks == {"stream 0", "stream 1"}
    slices = [e for e in events if e["ph"] == "X"]
    assert len(slices) == 7 and all(e["dur"] > 0 for e in slices)
    assert {e["tid"] for e in slices} == {0, 1}
    flows = [e for e in events if e["ph"] in ("s", "f")]
    assert [e["ph"] for e in flows] == ["s", "f"]
