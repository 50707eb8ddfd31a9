"""torch scaled_dot_product_attention with masks and is_causal, imported through torch.export,
against PyTorch's own outputs (float32 NMSE <= 1e-10, reference interpreter and compiled CPU
program): mask operands (bool and float, broadcast), top-left is_causal where Sq != Skv, and
constant position masks raised into causal / window attributes."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch", reason="the torch importer tests need PyTorch")
F = torch.nn.functional

import optgraph as og
from optgraph.frontends.torch_export import from_torch
from optgraph.ir.ops import attrs_with_defaults
from tests.frontends.numerics import assert_matches


def _import_and_check(module: torch.nn.Module, args: tuple[torch.Tensor, ...]) -> og.Graph:
    with torch.no_grad():
        expected = module(*args)
    graph, weights = from_torch(module, args)
    inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, args)}
    assert_matches(graph, weights, inputs, [expected.numpy()])
    return graph


def _attention_attrs(graph: og.Graph) -> tuple[int, dict[str, object]]:
    (node,) = [n for n in graph.nodes if n.op == "attention"]
    return len(node.operands), attrs_with_defaults(node)


class MaskedAttention(torch.nn.Module):
    def forward(self, q, k, v, mask):  # type: ignore[no-untyped-def]
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def test_bool_mask_operand_matches_pytorch() -> None:
    torch.manual_seed(0)
    mask = torch.rand(2, 1, 3, 7) < 0.7
    mask[..., 0] = True
    args = (torch.randn(2, 4, 3, 16), torch.randn(2, 2, 7, 16), torch.randn(2, 2, 7, 16), mask)
    count, attrs = _attention_attrs(_import_and_check(MaskedAttention(), args))
    assert count == 4 and attrs["masked"] and not attrs["causal"]


def test_float_mask_operand_matches_pytorch() -> None:
    torch.manual_seed(1)
    mask = torch.randn(3, 7)
    mask[1, 4:] = float("-inf")
    args = (torch.randn(1, 2, 3, 16), torch.randn(1, 2, 7, 16), torch.randn(1, 2, 7, 16), mask)
    count, attrs = _attention_attrs(_import_and_check(MaskedAttention(), args))
    assert count == 4 and attrs["masked"]


class CausalAttention(torch.nn.Module):
    def forward(self, q, k, v):  # type: ignore[no-untyped-def]
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3)


@pytest.mark.parametrize(("sq", "skv"), [(3, 7), (7, 3), (5, 5)])
def test_is_causal_aligns_top_left_like_pytorch(sq: int, skv: int) -> None:
    torch.manual_seed(2)
    args = (torch.randn(1, 2, sq, 8), torch.randn(1, 2, skv, 8), torch.randn(1, 2, skv, 8))
    _, attrs = _attention_attrs(_import_and_check(CausalAttention(), args))
    assert attrs["causal"] and attrs["scale"] == 0.3
    assert attrs["causal_align"] == ("bottom_right" if sq == skv else "top_left")


class PositionMasked(torch.nn.Module):
    """A mask built from positions inside forward (folded to a constant at import)."""

    def __init__(self, window: int, offset: int) -> None:
        super().__init__()
        self.window, self.offset = window, offset

    def forward(self, q, k, v):  # type: ignore[no-untyped-def]
        i = torch.arange(q.shape[2])[:, None] + self.offset
        j = torch.arange(k.shape[2])[None, :]
        mask = j <= i
        if self.window:
            mask = mask & (j > i - self.window)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


@pytest.mark.parametrize(
    ("window", "sq", "skv", "offset", "expected"),
    [
        (0, 6, 6, 0, {"causal": True, "window": 0, "causal_align": "bottom_right"}),
        (3, 6, 6, 0, {"causal": True, "window": 3, "causal_align": "bottom_right"}),
        (2, 6, 10, 4, {"causal": True, "window": 2, "causal_align": "bottom_right"}),
        (3, 4, 9, 0, {"causal": True, "window": 3, "causal_align": "top_left"}),
    ],
)
def test_position_masks_become_attributes(
    window: int, sq: int, skv: int, offset: int, expected: dict[str, object]
) -> None:
    torch.manual_seed(3)
    args = (torch.randn(1, 2, sq, 8), torch.randn(1, 2, skv, 8), torch.randn(1, 2, skv, 8))
    count, attrs = _attention_attrs(_import_and_check(PositionMasked(window, offset), args))
    assert count == 3 and not attrs["masked"]
    assert {key: attrs[key] for key in expected} == expected


class ConstantOddMask(torch.nn.Module):
    def forward(self, q, k, v):  # type: ignore[no-untyped-def]
        mask = (torch.arange(k.shape[2]) % 2 == 0)[None, :].expand(q.shape[2], -1)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def test_a_constant_mask_that_is_no_position_pattern_stays_an_operand() -> None:
    torch.manual_seed(4)
    args = (torch.randn(1, 2, 4, 8), torch.randn(1, 2, 6, 8), torch.randn(1, 2, 6, 8))
    count, attrs = _attention_attrs(_import_and_check(ConstantOddMask(), args))
    assert count == 4 and attrs["masked"]


class Dropout(torch.nn.Module):
    def forward(self, q, k, v):  # type: ignore[no-untyped-def]
        return F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)


def test_dropout_is_refused_with_its_reason() -> None:
    args = (torch.randn(1, 1, 2, 8),) * 3
    with pytest.raises(og.OptGraphError, match="dropout in attention is not supported"):
        from_torch(Dropout(), args)
