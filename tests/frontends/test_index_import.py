"""aten.index.Tensor with constant indices (how transformers' attention masks read the padding
mask: `mask[batch_idx, kv_idx]` with folded aranges) -> get_rows over the flattened indexed axes,
against PyTorch, on the reference, the compiled CPU program and the CUDA kernels in the emulator;
several run-time indices and boolean ones are refused with their reason."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need PyTorch")

import optgraph as og
from optgraph.frontends.torch_export import from_torch
from tests.frontends.numerics import assert_matches, ops_of
from tests.support import cuda_emulator


class PaddingMask(torch.nn.Module):
    """What transformers' sdpa_mask does with a padding mask, and a 2-D gather with negative
    indices leaving a trailing axis whole."""

    def forward(self, attention_mask, table):  # type: ignore[no-untyped-def]
        batch = torch.arange(2)[:, None, None, None]
        kv = torch.arange(6)[None, None, None, :]
        rows = torch.tensor([[0, -1], [2, 1]])
        cols = torch.tensor([1, -2])
        return attention_mask.bool()[batch, kv], table[rows, cols], table[torch.tensor(1)]


def test_constant_index_tensors_become_get_rows_and_match_pytorch() -> None:
    args = (torch.tensor([[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 1]]), torch.randn(3, 4, 5))
    with torch.no_grad():
        expected = [e.numpy() for e in PaddingMask()(*args)]
    graph, weights = from_torch(PaddingMask(), args)
    inputs = {"attention_mask": args[0].numpy(), "table": args[1].numpy()}
    assert_matches(graph, weights, inputs, expected, tolerance=0.0)
    assert ops_of(graph).count("get_rows") == 2  # table[1] is a select: a slice
    if cuda_emulator.available():
        got = cuda_emulator.run_graph(graph, inputs, weights)
        for name, want in zip(graph.output_names(), expected):
            assert np.array_equal(got[name], want), name


class RuntimeIndex(torch.nn.Module):
    def forward(self, x, i):  # type: ignore[no-untyped-def]
        return x[i, i]  # one run-time index alone maps (test_gather_and_strided_import.py)


class BoolIndex(torch.nn.Module):
    def forward(self, x):  # type: ignore[no-untyped-def]
        return x[torch.tensor([True, False, True])]


def test_run_time_and_boolean_indices_are_refused() -> None:
    with pytest.raises(og.OptGraphError, match="an index computed at run time"):
        from_torch(RuntimeIndex(), (torch.randn(4, 3), torch.tensor([1, 2])))
    with pytest.raises(og.OptGraphError, match="'index' has a dynamic dimension 0"):
        from_torch(BoolIndex(), (torch.randn(3, 2),))  # a boolean mask selects a dynamic count
