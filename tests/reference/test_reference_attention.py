"""Reference semantics of attention's mask operand, per-batch-row kv_len, window, softcap and
causal_align: against torch's scaled_dot_product_attention where it expresses the case (masks,
top-left causal), and against per-element loops written from docs/ir.md otherwise."""

from __future__ import annotations

import math

import numpy as np
import pytest

from optgraph.errors import InputError
from optgraph.ir.graph import AttrValue
from optgraph.reference.interpreter import nmse
from tests.reference.test_reference_ops import ev, randn

torch = pytest.importorskip("torch")
F = torch.nn.functional


def _sdpa(q, k, v, mask=None, causal=False):  # type: ignore[no-untyped-def]
    group = q.shape[1] // k.shape[1]
    k, v = np.repeat(k, group, 1), np.repeat(v, group, 1)
    t = [torch.from_numpy(np.asarray(a, np.float64)) for a in (q, k, v)]
    m = (
        None
        if mask is None
        else torch.from_numpy(np.asarray(mask, mask.dtype if mask.dtype == bool else np.float64))
    )
    return F.scaled_dot_product_attention(*t, attn_mask=m, is_causal=causal).numpy()


def _loops(q, k, v, attrs, kv_len=None, mask=None):  # type: ignore[no-untyped-def]
    """docs/ir.md's attention, one score at a time, in float64."""
    b, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    scale = float(attrs.get("scale", 1 / math.sqrt(d)))
    cap, window = float(attrs.get("softcap", 0.0)), int(attrs.get("window", 0))
    full = None if mask is None else np.broadcast_to(mask, (b, hq, sq, skv))
    out = np.zeros(q.shape)
    for bi in range(b):
        length = skv if kv_len is None else int(kv_len[bi if len(kv_len) > 1 else 0])
        for h in range(hq):
            kh = h // (hq // hkv)
            for i in range(sq):
                p = i if attrs.get("causal_align") == "top_left" else length - sq + i
                seen = []
                for j in range(length):
                    if attrs.get("causal") and j > p or window and j <= p - window:
                        continue
                    if full is not None and full.dtype == bool and not full[bi, h, i, j]:
                        continue
                    s = scale * float(np.dot(q[bi, h, i].astype(float), k[bi, kh, j]))
                    s = cap * math.tanh(s / cap) if cap else s
                    s += 0.0 if full is None or full.dtype == bool else float(full[bi, h, i, j])
                    seen.append((s, j))
                finite = [s for s, _ in seen if s != -math.inf]
                if not finite:
                    continue
                top = max(finite)
                weights = [(math.exp(s - top), j) for s, j in seen]
                total = sum(w for w, _ in weights)
                for w, j in weights:
                    out[bi, h, i] += w / total * v[bi, kh, j]
    return out


def _check(expected: np.ndarray, got: np.ndarray) -> None:
    err = nmse(np.asarray(got, np.float64), expected)
    assert err <= 1e-10, f"nmse {err:.3e}"


def test_bool_and_float_masks_match_torch() -> None:
    q, k, v = randn(2, 4, 3, 8), randn(2, 2, 6, 8), randn(2, 2, 6, 8)
    rng = np.random.default_rng(3)
    bool_mask = rng.random((2, 1, 3, 6)) < 0.7
    bool_mask[..., 0] = True  # torch gives NaN for a row that sees nothing
    _check(_sdpa(q, k, v, bool_mask), ev("attention", q, k, v, bool_mask, masked=True))
    float_mask = randn(3, 6)
    float_mask[1, 2:] = -np.inf
    _check(_sdpa(q, k, v, float_mask), ev("attention", q, k, v, float_mask, masked=True))


def test_top_left_causal_matches_torch_where_lengths_differ() -> None:
    for sq, skv in ((3, 6), (6, 3)):
        q, k, v = randn(1, 2, sq, 8), randn(1, 2, skv, 8), randn(1, 2, skv, 8)
        got = ev("attention", q, k, v, causal=True, causal_align="top_left")
        _check(_sdpa(q, k, v, causal=True), got)
        bottom = ev("attention", q, k, v, causal=True)
        assert nmse(np.asarray(bottom, np.float64), _sdpa(q, k, v, causal=True)) > 1e-3


def test_mask_with_causal_and_kv_len_matches_loops() -> None:
    q, k, v = randn(2, 2, 3, 8), randn(2, 1, 7, 8), randn(2, 1, 7, 8)
    mask = randn(2, 1, 1, 7)
    kv_len = np.array([5, 7], np.int32)
    attrs: dict[str, AttrValue] = {"causal": True, "masked": True}
    got = ev("attention", q, k, v, kv_len, mask, **attrs)
    _check(_loops(q, k, v, attrs, kv_len, mask), got)


def test_per_row_kv_len_is_each_rows_own_decode() -> None:
    q, k, v = randn(3, 4, 1, 8), randn(3, 2, 9, 8), randn(3, 2, 9, 8)
    kv_len = np.array([2, 9, 5], np.int64)
    got = ev("attention", q, k, v, kv_len, causal=True)
    for b in range(3):
        one = ev("attention", q[b : b + 1], k[b : b + 1], v[b : b + 1], kv_len[b : b + 1])
        np.testing.assert_array_equal(got[b : b + 1], one)
    with pytest.raises(InputError, match=r"kv_len 10 out of range \[0, 9\]"):
        ev("attention", q, k, v, np.array([2, 10, 5], np.int32))


def test_window_matches_transformers_sliding_mask() -> None:
    """Mistral's sliding window: key j is seen from query i when i - W < j <= i (W keys)."""
    sq, w = 7, 3
    q, k, v = randn(1, 2, sq, 8), randn(1, 2, sq, 8), randn(1, 2, sq, 8)
    i, j = np.arange(sq)[:, None], np.arange(sq)[None, :]
    hf_mask = (j <= i) & (j > i - w)
    assert hf_mask.sum(axis=1).max() == w
    got = ev("attention", q, k, v, causal=True, window=w)
    _check(_sdpa(q, k, v, hf_mask), got)


def test_window_and_softcap_in_decode_match_loops() -> None:
    q, k, v = randn(2, 4, 2, 8), randn(2, 2, 10, 8), randn(2, 2, 10, 8)
    kv_len = np.array([6, 10], np.int32)
    for align in ("bottom_right", "top_left"):
        attrs: dict[str, AttrValue] = {
            "causal": True, "window": 4, "softcap": 2.0, "causal_align": align,
        }  # fmt: skip
        _check(_loops(q, k, v, attrs, kv_len), ev("attention", q, k, v, kv_len, **attrs))


def test_softcap_bounds_the_scores() -> None:
    q, k, v = 30 * randn(1, 1, 2, 4), randn(1, 1, 5, 4), randn(1, 1, 5, 4)
    capped = ev("attention", q, k, v, softcap=0.5)
    _check(_loops(q, k, v, {"softcap": 0.5}), capped)
    # every score lies in (-0.5, 0.5): no weight exceeds e / (e + 4 / e) of the rest
    assert nmse(np.asarray(capped, np.float64), _loops(q, k, v, {})) > 1e-3


def test_rows_that_see_nothing_are_zero() -> None:
    q, k, v = randn(1, 1, 2, 4), randn(1, 1, 3, 4), randn(1, 1, 3, 4)
    mask = np.array([[False] * 3, [True, False, False]])
    out = ev("attention", q, k, v, mask, masked=True)
    assert np.all(out[0, 0, 0] == 0)
    np.testing.assert_allclose(out[0, 0, 1], v[0, 0, 0], rtol=1e-6)
    neg = np.full((2, 3), -np.inf, np.float32)
    assert np.all(ev("attention", q, k, v, neg, masked=True) == 0)
