"""Reference semantics of attention's sinks (a logit per query head: a key of that score and
value zero in every row's softmax): against the formula written out in float64 (the sinks
concatenated to the scores, a softmax, that column dropped), and against transformers' gpt-oss
attention (`eager_attention_forward` of a `GptOssAttention` with random sinks), causal and with
its sliding window."""

from __future__ import annotations

import math

import numpy as np
import pytest

from optgraph.reference.interpreter import nmse
from tests.reference.test_reference_ops import ev, randn

torch = pytest.importorskip("torch")


def _concatenated(q, k, v, sinks, visible, scale):  # type: ignore[no-untyped-def]
    """softmax([scores, sink])[:-1] · v in float64; `visible` [Sq, Skv] bool."""
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, 1).astype(float), np.repeat(v, group, 1).astype(float)
    scores = np.einsum("bhid,bhjd->bhij", q.astype(float), k) * scale
    scores = np.where(visible, scores, -np.inf)
    column = np.broadcast_to(sinks.astype(float)[None, :, None, None], (*scores.shape[:3], 1))
    logits = np.concatenate([scores, column], axis=-1)
    logits = logits - logits.max(axis=-1, keepdims=True)
    probs = np.exp(logits) / np.exp(logits).sum(axis=-1, keepdims=True)
    return np.einsum("bhij,bhjd->bhid", probs[..., :-1], v)


def _check(expected: np.ndarray, got: np.ndarray, bound: float = 1e-10) -> None:
    err = nmse(np.asarray(got, np.float64), expected)
    assert err <= bound, f"nmse {err:.3e}"


def test_sinks_match_the_concatenated_softmax() -> None:
    q, k, v = randn(2, 4, 5, 8), randn(2, 2, 5, 8), randn(2, 2, 5, 8)
    sinks = 2 * randn(4)
    causal = np.tril(np.ones((5, 5), bool))
    got = ev("attention", q, k, v, sinks, sinks=True, causal=True)
    _check(_concatenated(q, k, v, sinks, causal, 1 / math.sqrt(8)), got)
    without = ev("attention", q, k, v, causal=True)
    assert nmse(np.asarray(without, np.float64), np.asarray(got, np.float64)) > 1e-3


def test_sinks_with_kv_len_window_and_mask() -> None:
    """Operand order q, k, v, kv_len, sinks, mask; a decode row at the end of 6 of 9 keys."""
    q, k, v = randn(1, 2, 1, 8), randn(1, 1, 9, 8), randn(1, 1, 9, 8)
    sinks, kv_len = randn(2), np.array([6], np.int32)
    mask = np.ones((1, 1, 1, 9), bool)
    mask[..., 4] = False
    got = ev("attention", q, k, v, kv_len, sinks, mask, sinks=True, masked=True, causal=True,
             window=4, scale=0.3)  # fmt: skip
    visible = np.zeros((1, 9), bool)
    visible[0, 2:6] = True  # window of 4 ending at position 5
    visible[0, 4] = False
    _check(_concatenated(q, k, v, sinks, visible, 0.3), got)


def test_rows_with_sinks_alone() -> None:
    """A row that sees no key yields zeros; a sink of -inf changes nothing; a sink far above
    every score leaves almost nothing of the values."""
    q, k, v = randn(1, 2, 2, 4), randn(1, 2, 3, 4), randn(1, 2, 3, 4)
    mask = np.array([[False] * 3, [True, True, False]])
    sinks = np.array([0.5, -1.0], np.float32)
    out = ev("attention", q, k, v, sinks, mask, sinks=True, masked=True)
    assert np.all(out[0, :, 0] == 0) and np.all(np.isfinite(out))
    gone = np.full(2, -np.inf, np.float32)
    np.testing.assert_array_equal(
        ev("attention", q, k, v, gone, sinks=True), ev("attention", q, k, v)
    )
    high = ev("attention", q, k, v, np.full(2, 80.0, np.float32), sinks=True)
    assert np.abs(high).max() < 1e-20


@pytest.mark.parametrize("sliding", [False, True])
def test_sinks_match_transformers_gpt_oss_attention(sliding: bool) -> None:
    transformers = pytest.importorskip("transformers")
    from transformers.models.gpt_oss import modeling_gpt_oss as gpt_oss

    config = transformers.GptOssConfig(
        hidden_size=64, num_attention_heads=4, num_key_value_heads=2, head_dim=16,
        num_hidden_layers=2, sliding_window=3, layer_types=["sliding_attention", "full_attention"],
    )  # fmt: skip
    torch.manual_seed(0)
    module = gpt_oss.GptOssAttention(config, layer_idx=0 if sliding else 1).eval()
    torch.nn.init.normal_(module.sinks, std=1.5)
    assert (module.sliding_window is not None) == sliding
    s = 7
    q, k, v = randn(1, 4, s, 16), randn(1, 2, s, 16), randn(1, 2, s, 16)
    i, j = np.arange(s)[:, None], np.arange(s)[None, :]
    seen = (j <= i) & (j > i - 3) if sliding else j <= i
    mask = torch.from_numpy(np.where(seen, 0.0, -np.inf).astype(np.float32))[None, None]
    with torch.no_grad():
        want, _ = gpt_oss.eager_attention_forward(
            module, *(torch.from_numpy(a) for a in (q, k, v)), mask, scaling=module.scaling
        )
    sinks = module.sinks.detach().numpy()
    attrs = {"window": 3} if sliding else {}
    got = ev("attention", q, k, v, sinks, sinks=True, causal=True, **attrs)
    _check(want.transpose(1, 2).numpy().astype(np.float64), got, 1e-12)
