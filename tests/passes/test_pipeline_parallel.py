"""pipeline-parallel: stages compute exactly what the original computes, cut where little crosses
(the textual cases are the fixtures in tests/fixtures/pipeline-parallel/).

- Every Llama-like model (tests/support/parallel_models.py), 2 and 3 stages: the reference
  interpreter of the staged graph is bit-identical to the original's (the same ops on the same
  values; send/recv move them).
- An 8-layer decoder in 2 and 4 stages: each cut falls between layers (one value, the residual
  stream, is sent) and the stages' estimated times are within a quarter of a stage of the mean.
- Every data edge stays on one device or crosses through a send/recv pair; every value is sent at
  most once to each device.
- `memory-budget`: stages hold at most the budget's weight bytes; an impossible budget is an error
  naming a node.
"""

from __future__ import annotations

import pytest

import optgraph as og
from optgraph.analysis.schedule_estimate import DEFAULT_DEVICE, node_seconds, profile_named
from optgraph.cli.report import compute_report
from optgraph.errors import OptGraphError
from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline
from tests.cli.test_examples import gen_llama
from tests.support.parallel_models import PARALLEL_MODELS, compare

DECODER = og.parse(
    gen_llama.generate_llama(layers=8, hidden=128, heads=8, kv_heads=2, ffn=256, vocab=512)
)


def _stage(graph: Graph, options: str) -> Graph:
    return run_pipeline(graph, f"pipeline-parallel{{{options}}}")


@pytest.mark.parametrize("stages", [2, 3])
@pytest.mark.parametrize("name", sorted(PARALLEL_MODELS))
def test_stages_compute_the_original_bit_for_bit(name: str, stages: int) -> None:
    graph = PARALLEL_MODELS[name]
    staged = _stage(graph, f"stages={stages}")
    assert staged.device_count() == stages
    assert og.parse(og.print_graph(staged)) == staged
    _check_transfers(staged)
    assert set(compare(graph, staged, seed=stages).values()) == {0.0}


def _check_transfers(staged: Graph) -> None:
    devices = staged.value_devices()
    sent: set[tuple[str, int]] = set()
    for node in staged.nodes:
        if node.op == "recv":
            continue
        for operand in node.operands:
            assert set(node.devices) <= set(devices[operand]), (node.name, operand)
        if node.op == "send":
            key = (node.operands[0], int(node.attrs["to"]))  # type: ignore[call-overload]
            assert key not in sent, key
            sent.add(key)


@pytest.mark.parametrize("stages", [2, 4])
def test_decoder_cuts_fall_between_layers_and_balance(stages: int) -> None:
    staged = _stage(DECODER, f"stages={stages}")
    _check_transfers(staged)
    sends = [n for n in staged.nodes if n.op == "send"]
    assert len(sends) == stages - 1
    assert all(s.operands[0].endswith(".out") for s in sends), [s.operands for s in sends]
    seconds = node_seconds(DECODER, profile_named(DEFAULT_DEVICE))
    device_of = {n.name: n.devices[0] for n in staged.nodes}
    per_stage = [0.0] * stages
    for node, s in zip(DECODER.nodes, seconds):
        per_stage[device_of[node.name]] += s
    mean = sum(per_stage) / stages
    assert max(abs(t - mean) for t in per_stage) <= mean / 4, per_stage


def test_weights_and_inputs_live_where_they_are_read() -> None:
    staged = _stage(DECODER, "stages=2")
    readers: dict[str, set[int]] = {}
    for node in staged.nodes:
        for operand in node.operands:
            readers.setdefault(operand, set()).update(node.devices)
    for value in (*staged.weights, *staged.inputs):
        assert set(value.ann.devices) == readers[value.name], value.name


def test_memory_budget_bounds_each_stage() -> None:
    total = sum(w.type.nbytes for w in DECODER.weights)
    budget = total * 6 // 10
    staged = _stage(DECODER, f"stages=2,memory-budget={budget}")
    for device in (0, 1):
        mine = sum(w.type.nbytes for w in staged.weights if device in w.ann.devices)
        assert mine <= budget
    assert set(compare(DECODER, staged).values()) == {0.0}


def test_memory_budget_too_small() -> None:
    total = sum(w.type.nbytes for w in DECODER.weights)
    with pytest.raises(OptGraphError, match="do not fit 2 stages"):
        _stage(DECODER, f"stages=2,memory-budget={total // 3}")
    with pytest.raises(OptGraphError, match="reads .* bytes of weights, over the memory budget"):
        _stage(DECODER, "stages=8,memory-budget=1KiB")


def test_refuses_a_placed_graph() -> None:
    staged = _stage(DECODER, "stages=2")
    with pytest.raises(OptGraphError, match="already placed on devices"):
        _stage(staged, "stages=2")


def test_report_gives_weight_bytes_per_device() -> None:
    staged = _stage(DECODER, "stages=2")
    per_device = tuple(
        sum(w.type.nbytes for w in staged.weights if d in w.ann.devices) for d in range(2)
    )
    report = compute_report(staged)
    assert report.devices == 2 and report.weight_bytes_per_device == per_device
    assert sum(per_device) == sum(w.type.nbytes for w in DECODER.weights)  # nothing shared
    assert compute_report(DECODER).devices is None
