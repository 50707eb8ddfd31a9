"""A decode step's mask built from its position input, raised into attention's kv_len (with a
window where the mask has one), against PyTorch; masks that depend on more than the position
stay mask operands."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need PyTorch")
F = torch.nn.functional

import optgraph as og
from optgraph.frontends.torch_export import from_torch
from optgraph.ir.ops import attrs_with_defaults
from tests.frontends.numerics import assert_matches


class DecodeStep(torch.nn.Module):
    """One query over a 16-row static cache; keys j <= pos (and j > pos - window) attended."""

    def __init__(self, window: int = 0, pad_input: bool = False) -> None:
        super().__init__()
        self.window, self.pad_input = window, pad_input

    def forward(self, q, k, v, cache_position, pad=None):  # type: ignore[no-untyped-def]
        keys = torch.arange(k.shape[2])[None, None, None, :]
        position = (torch.arange(q.shape[2]) + cache_position)[None, None, :, None]
        mask = keys <= position
        if self.window:
            mask = mask & (keys > position - self.window)
        if pad is not None:
            mask = mask & pad[:, None, None, :]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def _args(position: int) -> tuple[torch.Tensor, ...]:
    torch.manual_seed(position)
    q, k, v = torch.randn(2, 4, 1, 8), torch.randn(2, 2, 16, 8), torch.randn(2, 2, 16, 8)
    return q, k, v, torch.tensor([position])


def _attention(graph: og.Graph) -> tuple[int, dict[str, object]]:
    (node,) = [n for n in graph.nodes if n.op == "attention"]
    return len(node.operands), attrs_with_defaults(node)


@pytest.mark.parametrize("window", [0, 5])
def test_position_mask_becomes_kv_len(window: int) -> None:
    module = DecodeStep(window)
    graph, weights = from_torch(module, _args(6))
    count, attrs = _attention(graph)
    assert count == 4 and attrs["causal"] and not attrs["masked"] and attrs["window"] == window
    kv_len = next(n for n in graph.nodes if n.op == "attention").operands[3]
    assert graph.value_types()[kv_len].shape == (1,)
    for position in (0, 3, 6, 15):  # one import, run at every position
        args = _args(position)
        with torch.no_grad():
            expected = module(*args).numpy()
        inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, args)}
        assert_matches(graph, weights, inputs, [expected])


def test_a_mask_that_also_reads_padding_stays_an_operand() -> None:
    module = DecodeStep(pad_input=True)
    pad = torch.ones(2, 16, dtype=torch.bool)
    pad[1, :3] = False
    args = (*_args(6), pad)
    graph, weights = from_torch(module, args)
    count, attrs = _attention(graph)
    assert count == 4 and attrs["masked"] and not attrs["causal"]
    with torch.no_grad():
        expected = module(*args).numpy()
    assert_matches(
        graph, weights, {i.name: a.numpy() for i, a in zip(graph.inputs, args)}, [expected]
    )
