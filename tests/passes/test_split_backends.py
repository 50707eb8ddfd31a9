"""split-backends: placement rules, one copy per value per destination, and the events that order
them; split programs run in the planned executor (random stream interleavings) bit-identical to
the reference, at batch 1 and batch > 1."""

from __future__ import annotations

import pytest

import optgraph as og
from optgraph.analysis.happens_before import HappensBefore
from optgraph.analysis.races import find_races
from optgraph.errors import OptGraphError, PipelineError
from optgraph.passes.manager import run_pipeline
from optgraph.passes.split_backends import host_stream
from tests.support.offload_models import assert_runs_equal_reference, llama

SCHEDULE = "assign-streams{max-streams=2},split-backends,insert-sync"
PLAN = SCHEDULE + ",analyze-lifetimes,plan-memory,check-races"
HOST = ("embed", "lm_head")


@pytest.mark.parametrize(
    "batch, seq, mode",
    [(1, 1, "decode"), (3, 1, "decode"), (2, 4, "prefill"), (1, 40, "prefill")],
)
def test_split_programs_match_reference(batch: int, seq: int, mode: str) -> None:
    g = llama(layers=2, batch=batch, seq=seq, mode=mode, host_weights=HOST)
    planned = run_pipeline(g, PLAN)
    compute = [n for n in planned.nodes if not n.is_event]
    assert any(n.ann.backend == "cpu" for n in compute)
    assert any(n.op == "copy" for n in compute)
    assert_runs_equal_reference(planned, g, interleavings=6)


def test_batch_rule_moves_host_weight_matmul_to_gpu() -> None:
    """lm_head over 1 row stays with its host weight; over 40 rows it runs on the GPU."""
    small = run_pipeline(llama(layers=1, seq=1, host_weights=HOST), "split-backends")
    large = run_pipeline(
        llama(layers=1, seq=40, mode="prefill", host_weights=HOST), "split-backends"
    )
    by_name = {n.name: n for n in small.nodes}
    assert by_name["logits"].ann.backend == "cpu"
    assert by_name["h0"].ann.backend == "cpu"  # get_rows of a host table: always gathered there
    by_name = {n.name: n for n in large.nodes}
    assert by_name["logits"].ann.backend == "cuda"
    copies = [n for n in large.nodes if n.op == "copy" and n.operands == ("lm_head",)]
    assert len(copies) == 1 and copies[0].attrs["to"] == "cuda"


def test_one_copy_per_value_per_destination() -> None:
    g = llama(layers=2, batch=2, host_weights=HOST)
    split = run_pipeline(g, SCHEDULE)
    copies = [(n.operands[0], n.attrs["to"]) for n in split.nodes if n.op == "copy"]
    assert copies and len(copies) == len(set(copies))
    backend = {n.name: n.ann.backend for n in split.nodes if not n.is_event}
    for n in split.nodes:
        if n.is_event or n.op == "copy":
            continue
        for o in n.operands:  # every node result read across backends goes through a copy
            producer = next((p for p in split.nodes if p.name == o), None)
            if producer is not None and producer.op != "copy":
                assert backend[o] == n.ann.backend, (o, n.name)


def test_every_ordering_is_an_event_edge() -> None:
    """Alone (one GPU stream), split-backends leaves no data edge unordered; the host waits only
    for device-to-host copies, the copy stream only for the host, the GPU only for copies.
    insert-sync then only joins the streams into stream 0 at the end."""
    g = llama(layers=2, host_weights=HOST)
    split = run_pipeline(g, "split-backends")
    assert HappensBefore(split).unordered_data_edges() == []
    synced = run_pipeline(split, "insert-sync")
    added = synced.nodes[len(split.nodes) :]
    assert synced.nodes[: len(split.nodes)] == split.nodes
    assert all(n.is_event for n in added)
    assert find_races(synced) == []
    host = host_stream(split)
    recorded_after = {}
    for prev, node in zip(split.nodes, split.nodes[1:]):
        if node.op == "record":
            recorded_after[node.name] = prev
    for node in split.nodes:
        if node.op != "wait":
            continue
        source = recorded_after[node.name]
        if node.stream == host:
            assert node.ann.backend == "cpu"
            assert source.op == "copy" and source.attrs["to"] == "cpu"
        elif source.ann.backend == "cpu":
            assert node.stream == host + 1  # only the copy stream waits for the host
        else:
            assert source.op == "copy" and source.attrs["to"] == "cuda"


def test_a_missing_wait_is_a_race() -> None:
    g = llama(layers=1, host_weights=HOST)
    split = run_pipeline(g, "split-backends")
    waits = [i for i, n in enumerate(split.nodes) if n.op == "wait"]
    assert waits
    for i in waits:
        broken = split.with_nodes(split.nodes[:i] + split.nodes[i + 1 :])
        assert find_races(broken), split.nodes[i].name


def test_round_trip_and_split_once() -> None:
    g = run_pipeline(llama(layers=2, batch=2, host_weights=HOST), SCHEDULE)
    assert og.parse(og.print_graph(g)) == g
    # A second split would move nodes under the events that order the first one's copies.
    with pytest.raises(PipelineError, match="invalidates the record/wait events"):
        run_pipeline(g, "split-backends")


def test_cpu_ops_option() -> None:
    g = llama(layers=1)
    split = run_pipeline(g, "split-backends{cpu-ops=rope+attention}")
    placed = {n.op: n.ann.backend for n in split.nodes if not n.is_event}
    assert placed["rope"] == "cpu" and placed["attention"] == "cpu"
    assert placed["matmul"] == "cuda"
    with pytest.raises(OptGraphError, match="did you mean 'rope'"):
        run_pipeline(g, "split-backends{cpu-ops=ropee}")


FORKED = """graph forked {
  input %x : f32[4,64]
  weight %w : f32[64,64] host
  %a = matmul(%x, %w) : f32[4,64] !{stream = 0}
  %b = exp(%x) : f32[4,64] !{stream = 1}
  %c = add(%a, %b) : f32[4,64] !{stream = 0}
  output %c
}
"""


def test_refuses_graphs_with_events() -> None:
    g = run_pipeline(og.parse(FORKED), "insert-sync")  # %b on stream 1 feeds %c on stream 0
    assert [n.op for n in g.nodes if n.is_event] == ["record", "wait"]
    with pytest.raises(OptGraphError, match="before insert-sync"):
        run_pipeline(g, "split-backends")
