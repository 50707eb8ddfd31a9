"""`analysis/communicator_order.py`: one communicator's collectives ordered on each device."""

from __future__ import annotations

import pytest

import optgraph as og
from optgraph.analysis.communicator_order import find_unordered_collectives
from optgraph.errors import VerifyError
from optgraph.passes.manager import run_pipeline
from tests.support.placed_graphs import COLLECTIVES, FOUR_DEVICES, TP_PP

TWO_REDUCES = """graph two {{
  input %a : f32[8]
  input %b : f32[8] !{{device = 1}}
  %x = exp(%a) : f32[8] !{{stream = 1}}
  %y = exp(%b) : f32[8] !{{device = 1, stream = 1}}
  %s = all_reduce(%x, %y) {{group = [0, 1]}} : f32[8] !{{device = [0, 1], stream = 1}}
{between}
  %u = all_reduce(%a, %b) {{group = [{second}]}} : f32[8] !{{device = [0, 1]}}
  %v = add(%s, %u) : f32[8] !{{device = [0, 1]}}
  output %v
}}
"""


def two_reduces(between: str = "", second: str = "0, 1") -> og.Graph:
    return og.parse(TWO_REDUCES.format(between=between, second=second))


def test_two_collectives_of_one_group_on_two_unordered_streams_are_reported() -> None:
    (first, second) = find_unordered_collectives(two_reduces())
    assert "all_reduce '%s' and all_reduce '%u' use one NCCL communicator" in first.message
    assert "on device 0 (streams 1 and 0)" in first.message
    assert "on device 1" in second.message


def test_an_event_on_the_device_orders_them() -> None:
    on_zero = "  record ^e !{stream = 1}\n  wait ^e\n"
    both = "  record ^e !{device = [0, 1], stream = 1}\n  wait ^e !{device = [0, 1]}\n"
    (only_one,) = find_unordered_collectives(two_reduces(on_zero))
    assert "on device 1" in only_one.message  # device 0 is ordered, device 1 is not
    assert find_unordered_collectives(two_reduces(both)) == []


def test_one_stream_or_another_communicator_is_fine() -> None:
    assert find_unordered_collectives(two_reduces(second="1, 0")) == []  # another communicator
    for text in (COLLECTIVES, TP_PP, FOUR_DEVICES):
        assert find_unordered_collectives(og.parse(text)) == []
    assert (
        find_unordered_collectives(
            og.parse("graph g {\n  input %a : f32[2]\n  %b = exp(%a) : f32[2]\n  output %b\n}\n")
        )
        == []
    )


def test_check_races_reports_them_with_a_location() -> None:
    with pytest.raises(VerifyError) as caught:
        run_pipeline(two_reduces(), "check-races")
    assert "use one NCCL communicator" in str(caught.value)
    assert caught.value.diagnostics[0].span is not None


def test_send_and_an_all_reduce_of_the_world_share_its_communicator() -> None:
    text = """graph p2p {
  input %a : f32[8]
  input %b : f32[8] !{device = 1}
  %t = send(%a) {to = 1} : f32[8] !{stream = 1}
  %r = recv(%t) {from = 0} : f32[8] !{device = 1, stream = 1}
  %s = all_reduce(%a, %b) {group = [0, 1]} : f32[8] !{device = [0, 1]}
  output %r, %s
}
"""
    found = find_unordered_collectives(og.parse(text))
    assert [d.message.split(" use ")[0] for d in found] == [
        "send '%t' and all_reduce '%s'",
        "recv '%r' and all_reduce '%s'",
    ]


def test_the_split_llamas_of_the_default_pipeline_pass() -> None:
    import sys
    from pathlib import Path

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    from gen_llama import generate_llama

    source = og.parse(generate_llama(layers=2, hidden=64, heads=4, kv_heads=2, ffn=128))
    for split in ("tensor-parallel{ways=2}", "pipeline-parallel{stages=2}",
                  "tensor-parallel{ways=2},assign-streams{max-streams=4}"):  # fmt: skip
        graph = og.compile(source, f"{split},default", "cpu").graph
        assert find_unordered_collectives(graph) == []
