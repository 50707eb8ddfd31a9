"""The ops added for imports, from torch.export, against PyTorch's own outputs: attention masks,
per-row kv_len and sliding windows (comparisons, not, where), clamps (clip), log_softmax, and
expand, repeat, pad, cumsum, argmax, prelu, max along a dim."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need PyTorch")

import optgraph as og
from optgraph.frontends.torch_export import from_torch
from tests.frontends.numerics import assert_matches, ops_of


def _import_and_check(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> og.Graph:
    with torch.no_grad():
        expected = module(*args)
    expected_list = list(expected) if isinstance(expected, tuple) else [expected]
    graph, weights = from_torch(module, args)
    inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, args)}
    assert_matches(graph, weights, inputs, [e.numpy() for e in expected_list])
    return graph


class KvLenMaskedScores(torch.nn.Module):
    """Per-row kv_len and a sliding window over integer positions, filled with -inf."""

    def forward(self, q, k, pos, kv_len):  # type: ignore[no-untyped-def]
        scores = q @ k.transpose(-1, -2)
        valid = pos[None, None, :] < kv_len[:, None, None]
        near = (pos[:, None] - pos[None, :]) <= 2
        far = pos[None, :] >= 1
        mask = (valid & near[None]) | torch.where(near[None], valid, False)
        scores = scores.masked_fill(~mask, float("-inf"))
        return scores.softmax(-1), far.logical_not(), pos != 3


def test_kv_len_and_window_mask_match_pytorch() -> None:
    torch.manual_seed(0)
    args = (torch.randn(2, 6, 8), torch.randn(2, 6, 8), torch.arange(6), torch.tensor([4, 6]))
    graph = _import_and_check(KvLenMaskedScores(), args)
    ops = ops_of(graph)
    assert {"less", "not", "where", "equal", "and", "or"} <= set(ops), ops
    assert "less_equal" in ops or "greater_equal" in ops  # <= and >= on integers


class Clamps(torch.nn.Module):
    def forward(self, x):  # type: ignore[no-untyped-def]
        capped = x.clamp(-0.5, 0.75) + x.clamp(min=0.1) + torch.clamp_max(x, 0.2)
        picked = torch.where(x > 0, x, 0.0)
        return capped, picked, x == x.relu(), x.gt(0.25)


def test_clamp_and_scalar_comparisons_match_pytorch() -> None:
    torch.manual_seed(1)
    graph = _import_and_check(Clamps(), (torch.randn(3, 16),))
    ops = ops_of(graph)
    assert ops.count("clip") == 3 and "where" in ops and "greater" in ops


class LogProbs(torch.nn.Module):
    def forward(self, x):  # type: ignore[no-untyped-def]
        return torch.log_softmax(x * 4.0, dim=-1), x.log_softmax(dim=0)


def test_log_softmax_matches_pytorch() -> None:
    torch.manual_seed(2)
    graph = _import_and_check(LogProbs(), (torch.randn(3, 40),))
    assert ops_of(graph).count("log_softmax") == 2


class FloatLessEqual(torch.nn.Module):
    def forward(self, x, y):  # type: ignore[no-untyped-def]
        return x <= 0.5, x >= y, y.ge(x)


def test_float_less_equal_maps_and_nan_compares_false() -> None:
    x = torch.tensor([0.0, 0.5, float("nan"), 1.0, -2.0])
    y = torch.tensor([0.0, float("nan"), 1.0, 0.5, -3.0])
    graph = _import_and_check(FloatLessEqual(), (x, y))
    assert {"less_equal", "greater_equal"} <= set(ops_of(graph)) and "not" not in ops_of(graph)


class IndexingOps(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.act = torch.nn.PReLU(3, init=0.2)

    def forward(self, x, mask, logits):  # type: ignore[no-untyped-def]
        padded = torch.nn.functional.pad(x, (1, 2, 0, 1), value=-0.5)
        positions = mask.cumsum(1) - 1
        widened = x[:, :1].expand(2, 3, 4, 4)
        return (
            self.act(padded), positions, widened + x, x.repeat(1, 1, 2, 1),
            logits.argmax(-1), logits.argmax(0, keepdim=True),
        )  # fmt: skip


def test_indexing_ops_match_pytorch() -> None:
    torch.manual_seed(3)
    args = (torch.randn(2, 3, 4, 4), torch.tensor([[1, 1, 0, 1], [0, 1, 1, 1]]), torch.randn(2, 9))
    graph = _import_and_check(IndexingOps(), args)
    ops = ops_of(graph)
    for op in ("pad", "cumsum", "expand", "tile", "argmax", "prelu"):
        assert op in ops, (op, ops)
    assert "concat" not in ops  # expand is a broadcast op now, not concatenated copies


class MaxAlongDim(torch.nn.Module):
    """torch.max(x, dim): values and indices (gpt-oss's attention with sinks takes the row
    maximum so); ties: the first index, as torch."""

    def forward(self, x, ties):  # type: ignore[no-untyped-def]
        values, indices = x.max(dim=-1, keepdim=True)
        return x - values, indices, torch.max(ties, 1).indices


def test_max_along_a_dim_matches_pytorch() -> None:
    torch.manual_seed(4)
    ties = torch.randint(0, 3, (2, 5, 6)).float()
    graph = _import_and_check(MaxAlongDim(), (torch.randn(2, 5, 6), ties))
    ops = ops_of(graph)
    assert ops.count("max") == 1 and ops.count("argmax") == 2
