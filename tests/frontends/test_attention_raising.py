"""Attention written out as products and a softmax (eager attention, the ONNX exporter's form of
`scaled_dot_product_attention`) is raised into one `attention` node, through both importers, and
the raised graph still equals PyTorch's outputs (reference interpreter and compiled CPU program);
spellings that are not attention stay as they were, still correct."""

from __future__ import annotations

import math

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch")
F = torch.nn.functional

import optgraph as og
from optgraph.frontends.onnx import from_onnx
from optgraph.frontends.torch_export import from_torch
from optgraph.ir.ops import attrs_with_defaults
from tests.frontends.numerics import assert_matches, ops_of


def _imported(
    module: torch.nn.Module, args: tuple[torch.Tensor, ...], onnx: bool = False
) -> og.Graph:
    module.eval()
    with torch.no_grad():
        expected = module(*args)
    if onnx:
        pytest.importorskip("onnxscript", reason="torch.onnx.export needs onnxscript")
        graph, weights = from_onnx(torch.onnx.export(module, args, dynamo=True).model_proto)
    else:
        graph, weights = from_torch(module, args)
    inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, args)}
    assert_matches(graph, weights, inputs, [expected.float().numpy()])
    return graph


def _attention(graph: og.Graph) -> tuple[int, dict[str, object]]:
    ops = ops_of(graph)
    assert ops.count("attention") == 1 and "softmax" not in ops, ops
    (node,) = [n for n in graph.nodes if n.op == "attention"]
    return len(node.operands), attrs_with_defaults(node)


def _qkv(seed: int, heads: int = 4, kv_heads: int = 4, sq: int = 5, skv: int = 5, d: int = 8):
    torch.manual_seed(seed)
    return (
        torch.randn(2, heads, sq, d),
        torch.randn(2, kv_heads, skv, d),
        torch.randn(2, kv_heads, skv, d),
    )


class ScaledMasked(torch.nn.Module):
    """Eager attention as transformers writes it: scores · scaling + mask, softmax, · v."""

    def forward(self, q, k, v, mask):  # type: ignore[no-untyped-def]
        scores = torch.matmul(q, k.transpose(2, 3)) * (q.shape[-1] ** -0.5) + mask
        return torch.matmul(F.softmax(scores, dim=-1), v)


@pytest.mark.parametrize("onnx", [False, True])
def test_a_float_mask_input_becomes_the_mask_operand(onnx: bool) -> None:
    q, k, v = _qkv(0)
    mask = torch.randn(2, 1, 5, 5)
    count, attrs = _attention(_imported(ScaledMasked(), (q, k, v, mask), onnx))
    assert count == 4 and attrs["masked"] and "scale" not in attrs


class ScaledOperands(torch.nn.Module):
    """The scale spread over q, kᵀ and the scores (the ONNX exporter scales q and k by √c)."""

    def forward(self, q, k, v):  # type: ignore[no-untyped-def]
        scores = torch.matmul(q * 0.5, (k * 0.25).transpose(-1, -2)) / torch.tensor(2.0)
        return torch.matmul(torch.softmax(scores, dim=-1), v)


@pytest.mark.parametrize("onnx", [False, True])
def test_scales_on_q_k_and_the_scores_multiply_into_scale(onnx: bool) -> None:
    count, attrs = _attention(_imported(ScaledOperands(), _qkv(1), onnx))
    assert count == 3 and math.isclose(attrs["scale"], 0.0625)  # type: ignore[arg-type]


class SoftcappedCausal(torch.nn.Module):
    """Gemma 2's attention: a tanh softcap, then a causal mask of the dtype's lowest value."""

    def forward(self, q, k, v):  # type: ignore[no-untyped-def]
        scores = torch.matmul(q, k.transpose(2, 3)) * 0.125
        scores = torch.tanh(scores / 30.0) * 30.0
        n = q.shape[2]
        hidden = torch.full((n, n), torch.finfo(q.dtype).min).triu(1)
        return torch.matmul(torch.softmax(scores + hidden, dim=-1), v)


@pytest.mark.parametrize("onnx", [False, True])
def test_a_softcap_and_a_lowest_value_causal_mask_become_attributes(onnx: bool) -> None:
    q, k, v = _qkv(2, d=16)
    count, attrs = _attention(_imported(SoftcappedCausal(), (q, k, v), onnx))
    assert count == 3 and attrs["causal"] and not attrs["masked"]
    assert attrs["softcap"] == 30.0 and attrs["scale"] == 0.125


class FilledWindow(torch.nn.Module):
    """A sliding window hidden by `masked_fill` with -inf, a bias added before."""

    def forward(self, q, k, v, bias):  # type: ignore[no-untyped-def]
        n = q.shape[2]
        i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
        outside = (j > i) | (j <= i - 3)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(q.shape[-1]) + bias
        return torch.matmul(scores.masked_fill(outside, float("-inf")).softmax(-1), v)


@pytest.mark.parametrize("onnx", [False, True])
def test_a_constant_select_becomes_a_window_beside_a_float_bias(onnx: bool) -> None:
    q, k, v = _qkv(3, sq=6, skv=6)
    bias = torch.randn(1, 4, 6, 6)
    count, attrs = _attention(_imported(FilledWindow(), (q, k, v, bias), onnx))
    assert count == 4 and attrs["masked"] and attrs["causal"] and attrs["window"] == 3


class SelectThenScale(torch.nn.Module):
    """CodeGen's eager attention (transformers before 5.2x): the causal select with the lowest
    float first, the scale after it, then an additive mask."""

    def forward(self, q, k, v, mask):  # type: ignore[no-untyped-def]
        n = q.shape[2]
        causal = torch.ones(n, n, dtype=torch.bool).tril()
        scores = torch.matmul(q, k.transpose(-1, -2))
        scores = torch.where(causal, scores, torch.tensor(torch.finfo(q.dtype).min))
        scores = scores / 5.5 + mask
        return torch.matmul(torch.softmax(scores, dim=-1), v)


class MaskThenScale(torch.nn.Module):
    """CodeGen's eager attention as transformers 5.17 writes it: the causal mask (the lowest
    float) added first, then the scores divided by √D."""

    def forward(self, q, k, v):  # type: ignore[no-untyped-def]
        n = q.shape[2]
        hidden = torch.full((n, n), torch.finfo(q.dtype).min).triu(1)
        scores = (torch.matmul(q, k.transpose(-1, -2)) + hidden) / torch.tensor(8.0).sqrt()
        return torch.matmul(torch.softmax(scores, dim=-1), v)


class ScaledBias(torch.nn.Module):
    """A run-time bias scaled with the scores: the kernels would add it unscaled, so no."""

    def forward(self, q, k, v, bias):  # type: ignore[no-untyped-def]
        scores = (torch.matmul(q, k.transpose(-1, -2)) + bias) / 3.0
        return torch.matmul(torch.softmax(scores, dim=-1), v)


@pytest.mark.parametrize("onnx", [False, True])
def test_a_causal_mask_scaled_with_the_scores_still_hides(onnx: bool) -> None:
    count, attrs = _attention(_imported(MaskThenScale(), _qkv(10, d=8), onnx))
    assert count == 3 and attrs["causal"] and "scale" not in attrs  # 1/√8: the default


def test_a_bias_scaled_with_the_scores_stays_written_out() -> None:
    ops = ops_of(_imported(ScaledBias(), (*_qkv(11), torch.randn(1, 4, 5, 5))))
    assert "attention" not in ops and ops.count("softmax") == 1


@pytest.mark.parametrize("onnx", [False, True])
def test_a_select_scaled_with_the_scores_still_hides(onnx: bool) -> None:
    q, k, v = _qkv(9, sq=6, skv=6)
    mask = torch.randn(2, 1, 1, 6)
    count, attrs = _attention(_imported(SelectThenScale(), (q, k, v, mask), onnx))
    assert count == 4 and attrs["causal"] and attrs["masked"]
    assert math.isclose(attrs["scale"], 1 / 5.5, rel_tol=1e-6)  # type: ignore[arg-type]


KEEP = np.random.default_rng(12).random((5, 5)) < 0.6
KEEP[:, 0] = True  # every row sees a key


class KnownPattern(torch.nn.Module):
    """A constant mask no attribute says (neither causal nor a window)."""

    def forward(self, q, k, v):  # type: ignore[no-untyped-def]
        keep = torch.tensor(KEEP)
        scores = torch.matmul(q, k.transpose(-1, -2)).masked_fill(~keep, float("-inf"))
        return torch.matmul(torch.softmax(scores * 0.5, dim=-1), v)


def test_a_known_pattern_no_attribute_says_is_one_bool_mask_of_what_is_seen() -> None:
    graph = _imported(KnownPattern(), _qkv(13))
    count, attrs = _attention(graph)
    assert count == 4 and attrs["masked"] and not attrs["causal"]
    assert "not" not in ops_of(graph)


class PaddingSelect(torch.nn.Module):
    """Keys hidden by a run-time bool (padding), through `where(pad, -inf, scores)`."""

    def forward(self, q, k, v, pad):  # type: ignore[no-untyped-def]
        scores = torch.matmul(q, k.transpose(-2, -1)) * 0.3
        scores = torch.where(pad, float("-inf"), scores)
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def test_a_run_time_condition_becomes_a_bool_mask_of_what_is_seen() -> None:
    q, k, v = _qkv(4, sq=3, skv=7)
    pad = torch.zeros(2, 1, 1, 7, dtype=torch.bool)
    pad[0, ..., 5:] = True
    graph = _imported(PaddingSelect(), (q, k, v, pad))
    count, attrs = _attention(graph)
    assert count == 4 and attrs["masked"] and ops_of(graph).count("not") == 1


class RepeatedHeadsTwoAdds(torch.nn.Module):
    """Grouped kv heads repeated to the query heads; a run-time bias and a zero mask added
    (T5's position bias and its all-visible mask)."""

    def forward(self, q, k, v, bias):  # type: ignore[no-untyped-def]
        k = k[:, :, None].expand(2, 2, 2, 5, 8).reshape(2, 4, 5, 8)
        v = v[:, :, None].expand(2, 2, 2, 5, 8).reshape(2, 4, 5, 8)
        scores = torch.matmul(q, k.transpose(2, 3)) + bias + torch.zeros(1, 1, 5, 5)
        return torch.matmul(torch.softmax(scores, dim=-1), v)


def test_repeated_kv_heads_and_two_masks_raise_to_one_attention_over_the_shared_heads() -> None:
    q, k, v = _qkv(5, kv_heads=2)
    graph = _imported(RepeatedHeadsTwoAdds(), (q, k, v, torch.randn(1, 4, 5, 5)))
    count, attrs = _attention(graph)
    assert count == 4 and attrs["scale"] == 1.0 and "expand" not in ops_of(graph)
    (node,) = [n for n in graph.nodes if n.op == "attention"]
    assert graph.value_types()[node.operands[1]].shape == (2, 2, 5, 8)


class Sdpa(torch.nn.Module):
    def forward(self, q, k, v):  # type: ignore[no-untyped-def]
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.2, enable_gqa=True)


def test_the_onnx_exporters_sdpa_is_attention_again() -> None:
    q, k, v = _qkv(6, heads=4, kv_heads=2)
    count, attrs = _attention(_imported(Sdpa(), (q, k, v), onnx=True))
    assert count == 3 and attrs["causal"] and math.isclose(attrs["scale"], 0.2, rel_tol=1e-6)  # type: ignore[arg-type]


class HalfSoftmaxInF32(torch.nn.Module):
    """transformers' eager attention in f16: the softmax in f32, cast back."""

    def forward(self, q, k, v):  # type: ignore[no-untyped-def]
        scores = torch.matmul(q, k.transpose(2, 3)) * 0.35
        probs = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        return torch.matmul(probs, v)


def test_an_f16_softmax_computed_in_f32_is_raised() -> None:
    q, k, v = (t.half() for t in _qkv(7))
    module = HalfSoftmaxInF32()
    graph, weights = from_torch(module, (q, k, v))
    count, attrs = _attention(graph)
    assert count == 3 and math.isclose(attrs["scale"], 0.35, rel_tol=1e-6)  # type: ignore[arg-type]
    with torch.no_grad():
        expected = module(q.float(), k.float(), v.float()).numpy()
    inputs = {i.name: a.numpy() for i, a in zip(graph.inputs, (q, k, v))}
    assert_matches(graph, weights, inputs, [expected], tolerance=1e-5)


class ScaledAfterMask(torch.nn.Module):
    def forward(self, q, k, v, mask):  # type: ignore[no-untyped-def]
        scores = (torch.matmul(q, k.transpose(2, 3)) + mask) * 0.5  # the mask scaled too
        return torch.matmul(torch.softmax(scores, dim=-1), v)


class SoftmaxOverQueries(torch.nn.Module):
    def forward(self, q, k, v):  # type: ignore[no-untyped-def]
        return torch.matmul(torch.softmax(torch.matmul(q, k.transpose(2, 3)), dim=-2), v)


@pytest.mark.parametrize("module", [ScaledAfterMask(), SoftmaxOverQueries()])
def test_what_is_not_attention_stays_written_out(module: torch.nn.Module) -> None:
    args = _qkv(8)
    if isinstance(module, ScaledAfterMask):
        args = (*args, torch.randn(2, 1, 5, 5))
    ops = ops_of(_imported(module, args))
    assert "attention" not in ops and ops.count("softmax") == 1
