"""A batch decode step's mask built from a position per row, raised into attention's per-row
kv_len (with a window where the mask has one), against PyTorch at positions that differ row to
row; masks that are not one row's causal pattern of its own position stay mask operands."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need PyTorch")
F = torch.nn.functional

import optgraph as og
from optgraph.frontends.torch_export import from_torch
from optgraph.ir.ops import attrs_with_defaults
from tests.frontends.numerics import assert_matches


class RowsDecodeStep(torch.nn.Module):
    """One query a row over a 16-row cache; row b attends keys j <= pos[b] (and j > pos[b] -
    window); `scale` multiplies the positions (2: not a causal pattern of pos)."""

    def __init__(self, window: int = 0, scale: int = 1) -> None:
        super().__init__()
        self.window, self.scale = window, scale

    def forward(self, q, k, v, positions):  # type: ignore[no-untyped-def]
        keys = torch.arange(k.shape[2])[None, None, None, :]
        position = (positions * self.scale).view(-1, 1, 1, 1)
        mask = keys <= position
        if self.window:
            mask = mask & (keys > position - self.window)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def _args(positions: list[int]) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(sum(positions))
    q, k, v = torch.randn(3, 4, 1, 8), torch.randn(3, 2, 16, 8), torch.randn(3, 2, 16, 8)
    return q, k, v, torch.tensor(positions)


def _attention(graph: og.Graph) -> tuple[tuple[str, ...], dict[str, object]]:
    (node,) = [n for n in graph.nodes if n.op == "attention"]
    return node.operands, attrs_with_defaults(node)


@pytest.mark.parametrize("window", [0, 5])
def test_per_row_position_mask_becomes_per_row_kv_len(window: int) -> None:
    module = RowsDecodeStep(window)
    graph, weights = from_torch(module, _args([6, 2, 11]))
    operands, attrs = _attention(graph)
    assert len(operands) == 4 and attrs["causal"] and not attrs["masked"]
    assert attrs["window"] == window
    assert graph.value_types()[operands[3]].shape == (3,)  # a kv_len a row
    for positions in ([0, 3, 15], [15, 0, 7], [9, 9, 1]):  # one import, rows anywhere
        args = _args(positions)
        with torch.no_grad():
            expected = module(*args).numpy()
        inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, args)}
        assert_matches(graph, weights, inputs, [expected])


def test_a_mask_that_is_not_causal_in_the_position_stays_a_mask() -> None:
    graph, _ = from_torch(RowsDecodeStep(scale=2), _args([3, 1, 5]))
    operands, attrs = _attention(graph)
    assert attrs["masked"] and not attrs["causal"] and len(operands) == 4
