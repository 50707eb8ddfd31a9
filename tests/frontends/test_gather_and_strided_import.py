"""Importing what RoBERTa, Falcon, GPT-J, CodeGen, Cohere and Mixtral export (each refused
before): `torch.gather` with a run-time index, `x[ids]` with run-time ids, `torch.topk`, a cumsum
whose result is wider than its input, one constant index tensor after slices
(`qkv[..., [-2], :]`) and slices with a step (`x[..., ::2]`, and ONNX `Slice` with `steps`).
Against PyTorch and onnx's ReferenceEvaluator, on the reference, the compiled CPU program and the
CUDA kernels in the emulator; then whole models, built from transformers configs with random
weights, against transformers (`tools/transformers_sweep.py` runs 39 architectures so)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need PyTorch")

import optgraph as og
from optgraph.frontends.stepped_slices import stepped_slice_nodes
from optgraph.frontends.torch_export import from_torch
from optgraph.reference.interpreter import run_reference
from tests.frontends.numerics import assert_matches, ops_of
from tests.support import cuda_emulator


def _check(module: torch.nn.Module, args: tuple, names: list[str]) -> og.Graph:
    with torch.no_grad():
        out = module(*args)
    expected = [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]
    graph, weights = from_torch(module, args)
    inputs = {name: a.numpy() for name, a in zip(names, args)}
    assert_matches(graph, weights, inputs, expected, tolerance=0.0)
    if cuda_emulator.available():
        got = cuda_emulator.run_graph(graph, inputs, weights)
        for name, want in zip(graph.output_names(), expected):
            assert np.array_equal(got[name], want), name
    return graph


class Gathers(torch.nn.Module):
    def forward(self, x, index, rows):  # type: ignore[no-untyped-def]
        return (
            torch.gather(x, 2, index),  # the last axis
            torch.gather(x, 1, index[:, :2, :]),  # a middle axis, a smaller index
            torch.gather(x, 0, index[:1]),
            torch.gather(rows, 1, index[0, :1, :3]),  # RoBERTa's form: [1, N] at positions
        )


def test_gather_along_every_axis_matches_pytorch() -> None:
    x = torch.randn(2, 3, 5)
    index = torch.tensor(np.random.default_rng(1).integers(0, 2, (2, 3, 4)), dtype=torch.int64)
    rows = torch.arange(10, dtype=torch.int64)[None, :] * 7
    graph = _check(Gathers(), (x, index, rows), ["x", "index", "rows"])
    assert ops_of(graph).count("get_rows") == 4


class WideCumsum(torch.nn.Module):
    def forward(self, mask, h):  # type: ignore[no-untyped-def]
        positions = torch.cumsum(mask, dim=1)  # int32 -> int64, as RoBERTa's position ids
        return positions, torch.cumsum(h, dim=-1, dtype=torch.float32)  # f16 summed in f32


def test_a_cumsum_into_a_wider_dtype_casts_first_as_torch_does() -> None:
    mask = torch.tensor([[1, 1, 0, 1, 1]], dtype=torch.int32)
    h = (torch.randn(2, 6) * 8).to(torch.float16)
    graph = _check(WideCumsum(), (mask, h), ["mask", "h"])
    assert ops_of(graph).count("cast") == 2


class IndexAfterSlices(torch.nn.Module):
    def forward(self, qkv):  # type: ignore[no-untyped-def]
        return (
            qkv[..., :-2, :],
            qkv[..., [-2], :],  # Falcon's multi-query split
            qkv[:, [0, 1, 3, 2, 2]],  # three runs of consecutive positions
            qkv[:, :, torch.tensor(1)],  # a 0-d index drops the axis
        )


def test_one_index_after_slices_is_slices_and_matches_pytorch() -> None:
    graph = _check(IndexAfterSlices(), (torch.randn(2, 4, 6, 3),), ["qkv"])
    ops = ops_of(graph)
    assert "get_rows" not in ops and ops.count("concat") == 1


class RowsAtRunTime(torch.nn.Module):
    def forward(self, experts, ids, ids32):  # type: ignore[no-untyped-def]
        clamped = ids.clamp(0, 3)  # integer bounds: maximum, then minimum
        # an MoE's expert weights picked by the router
        return experts[ids], experts[ids32], clamped, ids32.clamp(max=1), ids.clamp_min(-2)


def test_an_index_computed_at_run_time_gathers_rows_negative_ones_from_the_end() -> None:
    experts = torch.randn(5, 3, 4)
    ids = torch.tensor([[4, 0], [-1, 2], [-5, 3]])
    graph = _check(
        RowsAtRunTime(), (experts, ids, ids.to(torch.int32)), ["experts", "ids", "ids32"]
    )
    ops = ops_of(graph)
    assert ops.count("get_rows") == 2 and "clip" not in ops


class TwoIndices(torch.nn.Module):
    def forward(self, x):  # type: ignore[no-untyped-def]
        return x[:, torch.tensor([0, 1]), torch.tensor([1, 0])]


class MatrixIndex(torch.nn.Module):
    def forward(self, x):  # type: ignore[no-untyped-def]
        return x[:, torch.tensor([[0, 1], [1, 0]])]


def test_what_still_does_not_map_is_refused_with_its_reason() -> None:
    with pytest.raises(og.OptGraphError, match="a slice among several index tensors"):
        from_torch(TwoIndices(), (torch.randn(2, 3, 4),))
    with pytest.raises(og.OptGraphError, match="an index tensor of more than one axis"):
        from_torch(MatrixIndex(), (torch.randn(2, 3, 4),))


class Strided(torch.nn.Module):
    def forward(self, x):  # type: ignore[no-untyped-def]
        return x[..., ::2], x[..., 1::2], x[:, 1::4], x[:, 2:9:3]


def test_slices_with_a_step_match_pytorch() -> None:
    graph = _check(Strided(), (torch.randn(3, 10),), ["x"])
    assert "pad" in ops_of(graph)  # x[:, 1::4]: positions 1, 5, 9 run past the end


@pytest.mark.parametrize(
    ("size", "picked"),
    [(10, range(0, 10, 2)), (10, range(1, 10, 4)), (10, range(2, 9, 3)), (7, range(6, 7, 5))],
)
def test_the_stepped_slice_nodes_take_exactly_the_picked_positions(
    size: int, picked: range
) -> None:
    x = np.arange(2 * size).reshape(2, size)
    value = x
    for op, attrs, shape in stepped_slice_nodes(x.shape, 1, picked):
        if op == "slice":
            axis = int(attrs["axis"])  # type: ignore[arg-type]
            value = np.take(value, range(int(attrs["start"]), int(attrs["end"])), axis=axis)  # type: ignore[arg-type]
        elif op == "pad":
            value = np.pad(value, [(0, 0), (0, attrs["pads"][3])])  # type: ignore[index]
        else:
            value = value.reshape(attrs["shape"])  # type: ignore[arg-type]
        assert value.shape == shape
    assert np.array_equal(value, x[:, picked.start : picked.stop : picked.step])


def test_onnx_slices_with_steps_match_the_reference_evaluator() -> None:
    onnx = pytest.importorskip("onnx", reason="the ONNX importer tests need onnx")
    from onnx import TensorProto, helper, numpy_helper
    from onnx.reference import ReferenceEvaluator

    from optgraph.frontends.onnx import from_onnx

    def ints(name: str, values: list[int]) -> onnx.TensorProto:
        return numpy_helper.from_array(np.array(values, np.int64), name)

    inits = [
        ints("s", [1, 0]), ints("e", [9, 100]), ints("a", [1, 2]), ints("st", [4, 3]),
        ints("s2", [0]), ints("e2", [5]), ints("a2", [0]),
    ]  # fmt: skip
    nodes = [
        helper.make_node("Slice", ["x", "s", "e", "a", "st"], ["y"]),  # two axes, both stepped
        helper.make_node("Slice", ["x", "s2", "e2", "a2"], ["z"]),  # no steps given
    ]
    graph = helper.make_graph(
        nodes,
        "strided",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [5, 10, 7])],
        [
            helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
        ],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 9
    feeds = {"x": np.random.default_rng(2).normal(size=(5, 10, 7)).astype(np.float32)}
    expected = [np.asarray(o) for o in ReferenceEvaluator(model).run(None, feeds)]
    imported, weights = from_onnx(model)
    assert_matches(imported, weights, feeds, expected, tolerance=0.0)
    assert expected[0].shape == (5, 2, 3)


class TopK(torch.nn.Module):
    def forward(self, x, counts):  # type: ignore[no-untyped-def]
        a, b = torch.topk(x, 3, dim=-1), torch.topk(x, 2, dim=1, largest=False)
        c = torch.topk(counts, 4)
        return a.values, a.indices, b.values, b.indices, c.values, c.indices


def _topk_case(seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(2, 3, 6)).astype(np.float32)
    x[0, 0, :] = [1.0, 5.0, 5.0, -np.inf, 2.0, 5.0]  # ties and -inf
    x[0, 1, :] = -np.inf  # nothing but -inf: every position ties
    x[1, 2, 1] = np.nan  # NaN counts as the largest (and, smallest first, as the last)
    counts = rng.integers(-3, 3, (2, 8)).astype(np.int32)  # integer ties
    return torch.from_numpy(x), torch.from_numpy(counts)


@pytest.mark.parametrize("seed", [0, 1])
def test_topk_takes_the_values_pytorch_takes_ties_lowest_position_first(seed: int) -> None:
    x, counts = _topk_case(seed)
    with torch.no_grad():
        expected = [t.numpy() for t in TopK()(x, counts)]
    graph, weights = from_torch(TopK(), (x, counts))
    inputs = {"x": x.numpy(), "counts": counts.numpy()}
    runs = [run_reference(graph, inputs, weights)]
    runs.append(og.compile(graph, target="cpu").run(inputs, weights))
    if cuda_emulator.available():
        runs.append(cuda_emulator.run_graph(graph, inputs, weights))
    names = graph.output_names()
    sources = [(x.numpy(), -1), (x.numpy(), 1), (counts.numpy(), -1)]
    for got in runs:
        for (source, dim), values, indices, want in zip(
            sources, names[0::2], names[1::2], expected[0::2]
        ):
            assert np.array_equal(got[values], want, equal_nan=True), values
            picked = np.take_along_axis(source, got[indices], axis=dim)
            assert np.array_equal(picked, want, equal_nan=True), indices  # they point at them
            ordered = np.sort(got[indices], axis=dim)
            assert (np.diff(ordered, axis=dim) > 0).all(), indices  # no position twice
    row = runs[0][names[1]][0, 1]  # all -inf: the lowest positions, in order
    assert row.tolist() == [0, 1, 2]
    assert runs[0][names[1]][0, 0].tolist() == [1, 2, 5]  # three 5s: lowest position first


@pytest.mark.parametrize("name", ["roberta", "falcon", "gptj", "mixtral_batched_mm"])
def test_whole_models_import_and_match_transformers(name: str) -> None:
    pytest.importorskip("transformers", reason="needs transformers")
    from tools import transformers_sweep

    module, args = transformers_sweep.wrapped(name)
    with torch.no_grad():
        expected = module(*args).numpy()
    graph, weights = from_torch(module, args)
    inputs = {decl.name: a.numpy() for decl, a in zip(graph.inputs, args)}
    assert_matches(graph, weights, inputs, [expected])
