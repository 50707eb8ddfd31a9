"""The several-device IR (docs/ir.md, "Devices"): the `device` annotation, the collective ops'
type rules and reference semantics, the verifier's device rules and the print/parse round trip."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from hypothesis import given

import optgraph as og
from optgraph.errors import VerifyError
from optgraph.ir.graph import Annotations, Graph
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from tests.support.random_graphs import random_dag_graphs

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "verify"


def fixture_graph(name: str) -> Graph:
    text = (FIXTURES / f"{name}.ir").read_text().split("# EXPECT:")[0]
    graph = og.parse(text)
    og.verify(graph)
    return graph


def messages(text: str) -> list[str]:
    with pytest.raises(VerifyError) as info:
        og.verify(og.parse(text))
    return [d.message for d in info.value.diagnostics]


def test_device_annotation_parses_to_a_tuple_and_prints_canonically() -> None:
    graph = og.parse(
        "graph g {\n  input %x : f32[2] !{device = [1, 0]}\n"
        "  weight %w : f32[2] !{device = [2]}\n"
        "  %y = add(%x, %x) : f32[2] !{device = 1, stream = 3}\n  output %y\n}\n"
    )
    assert graph.inputs[0].ann.device == (1, 0)
    assert graph.weights[0].ann.device == (2,)
    assert graph.nodes[0].devices == (1,) and graph.nodes[0].stream == 3
    text = og.print_graph(graph)
    assert "input %x : f32[2] !{device = [1, 0]}" in text
    assert "weight %w : f32[2] !{device = 2}" in text  # a one-device list prints as the id
    assert "!{device = 1, stream = 3}" in text  # device first
    assert og.parse(text) == graph
    assert graph.device_count() == 3
    assert graph.value_devices() == {"x": (1, 0), "w": (2,), "y": (1,)}


def test_no_annotation_means_device_zero_and_one_device() -> None:
    graph = og.parse("graph g {\n  input %x : f32[2]\n  %y = neg(%x) : f32[2]\n  output %y\n}\n")
    assert graph.nodes[0].devices == (0,) and graph.inputs[0].ann.devices == (0,)
    assert graph.device_count() == 1
    assert "device" not in og.print_graph(graph)


@pytest.mark.parametrize("name", ["devices_all_reduce", "devices_all_gather", "devices_send_recv"])
def test_fixtures_round_trip(name: str) -> None:
    graph = fixture_graph(name)
    text = og.print_graph(graph)
    assert og.parse(text) == graph
    assert og.print_graph(og.parse(text)) == text


@given(random_dag_graphs(max_nodes=8))
def test_a_graph_replicated_on_any_devices_round_trips_and_computes_the_same(graph: Graph) -> None:
    devices = (2, 0, 3)
    ann = Annotations(device=devices)
    moved = replace(
        graph,
        inputs=tuple(replace(i, ann=ann) for i in graph.inputs),
        weights=tuple(replace(w, ann=replace(w.ann, device=devices)) for w in graph.weights),
        nodes=tuple(n.with_ann(device=devices) for n in graph.nodes),
    )
    text = og.print_graph(moved)
    again = og.parse(text)
    assert again == moved and og.print_graph(again) == text
    og.verify(again)
    assert again.device_count() == 4
    inputs, weights = random_inputs(graph, 0), random_weights(graph, 0)
    want, got = run_reference(graph, inputs, weights), run_reference(again, inputs, weights)
    for name in graph.output_names():
        np.testing.assert_array_equal(got[name], want[name])


# -- reference semantics ------------------------------------------------------------------------


def test_all_reduce_sums_in_operand_order() -> None:
    graph = fixture_graph("devices_all_reduce")
    inputs, weights = random_inputs(graph, 3), random_weights(graph, 3)
    got = run_reference(graph, inputs, weights)["y"]
    a0 = np.matmul(inputs["x.d0"], weights["w.d0"])
    a1 = np.matmul(inputs["x.d1"], weights["w.d1"])
    # The same products as the reference's matmul kernel; the check is the sum and the relu.
    want = run_reference(
        og.parse(
            "graph g {\n  input %a : f32[4,64]\n  input %b : f32[4,64]\n"
            "  %s = add(%a, %b) : f32[4,64]\n  %y = relu(%s) : f32[4,64]\n  output %y\n}\n"
        ),
        {"a": a0.astype(np.float32), "b": a1.astype(np.float32)},
        {},
    )["y"]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert (got > 0).any() and (got == 0).any()


def collective_graph(op: str, dtype: str, count: int, attrs: str, result: str) -> Graph:
    group = list(range(count))
    lines = [f"  input %x{k} : {dtype}[3] !{{device = {k}}}" for k in group]
    operands = ", ".join(f"%x{k}" for k in group)
    lines.append(
        f"  %s = {op}({operands}) {{group = {group}{attrs}}} : {result} !{{device = {group}}}"
    )
    graph = og.parse("graph g {\n" + "\n".join(lines) + "\n  output %s\n}\n")
    og.verify(graph)
    return graph


def test_all_reduce_f16_accumulates_in_f32_and_rounds_once() -> None:
    graph = collective_graph("all_reduce", "f16", 3, "", "f16[3]")
    big, small = np.float16(2048), np.float16(1)
    # In f16, 2048 + 1 rounds back to 2048 twice; in f32 the two ones add to 2 first: 2050.
    inputs = {"x0": np.full(3, big), "x1": np.full(3, small), "x2": np.full(3, small)}
    got = run_reference(graph, inputs, {})["s"]
    assert got.dtype == np.float16
    np.testing.assert_array_equal(got, np.full(3, 2050, np.float16))


def test_all_reduce_bf16_and_integers() -> None:
    graph = collective_graph("all_reduce", "bf16", 2, "", "bf16[3]")
    x = np.array([1, 2, 3], ml_dtypes.bfloat16)
    got = run_reference(graph, {"x0": x, "x1": x}, {})["s"]
    np.testing.assert_array_equal(got.astype(np.float32), [2, 4, 6])
    ints = collective_graph("all_reduce", "i32", 2, "", "i32[3]")
    x32 = np.array([1, -2, 7], np.int32)
    np.testing.assert_array_equal(run_reference(ints, {"x0": x32, "x1": x32}, {})["s"], 2 * x32)


def test_all_gather_concatenates_in_group_order() -> None:
    graph = collective_graph("all_gather", "f32", 3, ", axis = 0", "f32[9]")
    inputs = {f"x{k}": np.arange(3, dtype=np.float32) + 10 * k for k in range(3)}
    got = run_reference(graph, inputs, {})["s"]
    np.testing.assert_array_equal(got, np.concatenate([inputs["x0"], inputs["x1"], inputs["x2"]]))


def test_send_recv_pipeline_equals_the_one_device_graph() -> None:
    graph = fixture_graph("devices_send_recv")
    one = og.parse(
        "graph pp1 {\n  input %x : f32[4,16]\n  weight %w0 : f32[16,16]\n"
        "  weight %w1 : f32[16,16]\n  %h = matmul(%x, %w0) : f32[4,16]\n"
        "  %a = gelu(%h) : f32[4,16]\n  %y = matmul(%a, %w1) : f32[4,16]\n  output %y\n}\n"
    )
    inputs, weights = random_inputs(graph, 5), random_weights(graph, 5)
    np.testing.assert_array_equal(
        run_reference(graph, inputs, weights)["y"], run_reference(one, inputs, weights)["y"]
    )


# -- types and verifier rules ---------------------------------------------------------------------


def two_device_graph(*lines: str, outputs: str = "%y") -> str:
    body = "".join(f"  {line}\n" for line in lines)
    return (
        "graph g {\n  input %x : f32[4] !{device = [0, 1]}\n"
        f"  input %z : f32[4] !{{device = 1}}\n{body}  output {outputs}\n}}\n"
    )


def test_collective_type_rules() -> None:
    assert messages(
        two_device_graph(
            "%y = all_gather(%x, %x) {axis = 1, group = [0, 1]} : f32[8] !{device = [0, 1]}"
        )
    ) == ["all_gather: axis 1 out of range for f32[4]"]
    assert messages(
        two_device_graph("%y = all_reduce(%x, %x) {group = [0, 1]} : f32[8] !{device = [0, 1]}")
    ) == ["all_reduce: declared type f32[8] but the operands give f32[4]"]
    assert messages(two_device_graph("%y = all_reduce(%x, %x) : f32[4] !{device = [0, 1]}")) == [
        "all_reduce: missing required attribute 'group'"
    ]
    assert messages(
        two_device_graph(
            "%b = equal(%x, %x) : bool[4] !{device = [0, 1]}",
            "%y = all_reduce(%b, %b) {group = [0, 1]} : bool[4] !{device = [0, 1]}",
        )
    ) == ["all_reduce: expected a numeric operand, got bool[4]"]
    assert (
        messages(
            two_device_graph(
                "%t = send(%x) {to = -1} : f32[4]",
                "%y = recv(%t) {from = 0} : f32[4] !{device = 1}",
            )
        )[0]
        == "send: attribute 'to' must be a device id, got -1"
    )


def test_replicated_node_needs_its_operands_on_every_device() -> None:
    assert messages(two_device_graph("%y = add(%x, %z) : f32[4] !{device = [0, 1]}")) == [
        (
            "add: operand '%z' is on device 1 but the node runs on devices [0, 1] (cross devices "
            "with a collective or send/recv)"
        )
    ]
    og.verify(og.parse(two_device_graph("%y = add(%x, %z) : f32[4] !{device = 1}")))


def test_collective_operand_lives_on_its_group_member() -> None:
    og.verify(
        og.parse(
            two_device_graph("%y = all_reduce(%x, %z) {group = [0, 1]} : f32[4] !{device = [1, 0]}")
        )
    )
    assert messages(
        two_device_graph("%y = all_reduce(%z, %x) {group = [0, 1]} : f32[4] !{device = [0, 1]}")
    ) == ["all_reduce: operand 0 '%z' is on device 1, not on device 0 (group[0])"]


def test_send_result_is_read_by_one_recv_only() -> None:
    assert messages(
        two_device_graph(
            "%t = send(%x) {to = 1} : f32[4]",
            "%y = recv(%t) {from = 0} : f32[4] !{device = 1}",
            "%q = recv(%t) {from = 0} : f32[4] !{device = 1}",
        )
    ) == ["send: '%t' is received twice"]
    assert messages(
        two_device_graph(
            "%t = send(%x) {to = 1} : f32[4]",
            "%y = recv(%t) {from = 0} : f32[4] !{device = 1}",
            outputs="%y, %t",
        )
    ) == ["send: '%t' is an output; output the recv's result instead"]
    assert (
        messages(
            two_device_graph(
                "%y = send(%x) {to = 1} : f32[4] !{device = [0, 1]}",
                "%q = recv(%y) {from = 0} : f32[4] !{device = 1}",
                outputs="%q",
            )
        )[0]
        == "send: runs on devices [0, 1]; a send runs on one device"
    )


def test_device_ids_are_bounded() -> None:
    with pytest.raises(VerifyError, match="device 1024 is above the largest device id 1023"):
        og.verify(og.parse(two_device_graph("%y = neg(%x) : f32[4] !{device = [0, 1, 1024]}")))
    assert (
        messages(
            two_device_graph("%y = all_reduce(%x, %x) {group = [0, 7]} : f32[4] !{device = [0, 1]}")
        )[0]
        == "all_reduce: group member 7 is not a device of the graph (devices 0 to 1)"
    )
