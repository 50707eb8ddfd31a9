"""torch.export importer: whole models against PyTorch, raising, names, errors."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need PyTorch")

import numpy as np

import optgraph as og
from optgraph.frontends.torch_export import from_torch
from tests.frontends import torch_models as models
from tests.frontends.numerics import assert_matches, ops_of


def _import_and_check(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> og.Graph:
    module.eval()
    with torch.no_grad():
        expected = module(*args)
    expected_list = list(expected) if isinstance(expected, tuple) else [expected]
    graph, weights = from_torch(module, args)
    names = [i.name for i in graph.inputs]
    inputs = dict(zip(names, (a.numpy() for a in args)))
    assert_matches(graph, weights, inputs, [e.numpy() for e in expected_list])
    return graph


def test_llama_block_raises_every_fast_op_and_matches_pytorch() -> None:
    torch.manual_seed(0)
    module = models.LlamaBlock()
    args = (torch.randn(2, 5, 64), torch.arange(3, 8)[None])
    graph = _import_and_check(module, args)
    ops = ops_of(graph)
    assert ops.count("rms_norm") == 2
    assert ops.count("rope") == 2
    assert ops.count("attention") == 1
    assert "silu" in ops and "cos" not in ops and "sin" not in ops
    assert [i.name for i in graph.inputs] == ["hidden_states", "position_ids"]
    rope = next(n for n in graph.nodes if n.op == "rope")
    assert rope.attrs["theta"] == 10000.0


def test_llama_block_positions_shared_by_the_batch_are_one_row() -> None:
    torch.manual_seed(1)
    module = models.LlamaBlock(theta=500000.0)
    args = (torch.randn(1, 4, 64), torch.arange(4)[None])
    graph = _import_and_check(module, args)
    rope = next(n for n in graph.nodes if n.op == "rope")
    assert rope.attrs["theta"] == 500000.0


def test_rope_with_positions_per_batch_row_runs_through_general_ops() -> None:
    # rope takes one position row for the whole batch; per-row positions stay cos/sin/mul/add.
    torch.manual_seed(6)
    args = (torch.randn(2, 3, 64), torch.tensor([[0, 1, 2], [5, 6, 7]]))
    graph = _import_and_check(models.LlamaBlock(), args)
    ops = ops_of(graph)
    assert "rope" not in ops and "cos" in ops and "sin" in ops


def test_static_cache_index_copy_becomes_kv_cache_write() -> None:
    torch.manual_seed(7)
    args = (torch.randn(1, 1, 32), torch.randn(1, 2, 8, 16), torch.randn(1, 2, 8, 16),
            torch.tensor([5]))  # fmt: skip
    graph = _import_and_check(models.DecodeStep(), args)
    assert ops_of(graph).count("kv_cache_write") == 2
    assert [i.name for i in graph.inputs] == ["x", "k_cache", "v_cache", "cache_position"]


def test_llama_weights_keep_their_parameter_names() -> None:
    torch.manual_seed(0)
    module = models.LlamaBlock()
    graph, weights = from_torch(module, (torch.randn(1, 3, 64), torch.arange(3)[None]))
    params = dict(module.named_parameters())
    for name, param in params.items():
        assert np.array_equal(weights[name], param.detach().numpy()), name
    assert {w.name for w in graph.weights} >= set(params)
    assert og.parse(og.print_graph(graph)) == graph


def test_gpt2_block_raises_layer_norm_and_tanh_gelu() -> None:
    torch.manual_seed(2)
    graph = _import_and_check(models.GPT2Block(), (torch.randn(2, 6, 64),))
    ops = ops_of(graph)
    assert ops.count("layer_norm") == 2
    gelu = [n for n in graph.nodes if n.op == "gelu"]
    assert len(gelu) == 1 and gelu[0].attrs["approximate"] == "tanh"
    assert "tanh" not in ops


def test_cnn_with_batch_norm_pools_and_grouped_conv() -> None:
    torch.manual_seed(3)
    graph = _import_and_check(models.SmallCNN(), (torch.randn(2, 3, 16, 16),))
    ops = ops_of(graph)
    assert ops.count("conv2d") == 2 and "max_pool2d" in ops and "softmax" in ops


def test_erf_gelu_is_raised() -> None:
    torch.manual_seed(4)
    graph = _import_and_check(models.ErfGelu(), (torch.randn(4, 32),))
    gelu = [n for n in graph.nodes if n.op == "gelu"]
    assert len(gelu) == 1 and gelu[0].attrs["approximate"] == "none"


def test_a_formula_that_only_looks_like_gelu_is_not_raised() -> None:
    graph = _import_and_check(models.NotGelu(), (torch.randn(4, 8),))
    assert "gelu" not in ops_of(graph) and "erf" in ops_of(graph)


def test_unmapped_ops_are_listed_with_counts_and_nodes() -> None:
    with pytest.raises(og.OptGraphError) as info:
        from_torch(models.Unmappable(), (torch.randn(4, 8),))
    text = str(info.value)
    assert "aten.flip.default ×2: flip, flip_1" in text
    assert "aten.argsort" in text or "aten.sort" in text
    assert "torch_models.py" in text  # located at the model's source line


def test_dynamic_dimension_is_named() -> None:
    module = models.ErfGelu()
    batch = torch.export.Dim("batch", min=2, max=64)
    program = torch.export.export(module, (torch.randn(4, 32),), dynamic_shapes=({0: batch},))
    with pytest.raises(og.OptGraphError, match="dynamic dimension 0"):
        from_torch(program)


def test_exported_program_round_trips_through_a_pt2_file(tmp_path) -> None:  # type: ignore[no-untyped-def]
    torch.manual_seed(5)
    module = models.ErfGelu().eval()
    x = torch.randn(4, 32)
    path = tmp_path / "mlp.pt2"
    torch.export.save(torch.export.export(module, (x,)), str(path))
    from optgraph.frontends.torch_export import load_exported_program

    graph, weights = from_torch(load_exported_program(str(path)))
    assert_matches(graph, weights, {"x": x.numpy()}, [module(x).detach().numpy()])
