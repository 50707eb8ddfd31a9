"""The reference interpreter, op by op, against independent formulas and hand-computed cases.

Each expected value is computed another way than the kernel does it: python loops, explicit
rotation matrices, per-head attention with an explicit mask, known constants. Nodes are built
directly (no parser).
"""

from __future__ import annotations

import math
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

from optgraph.errors import InputError, VerifyError
from optgraph.ir.graph import (
    Annotations,
    AttrValue,
    Graph,
    Input,
    Node,
    Output,
    Region,
    TensorType,
    Weight,
)
from optgraph.reference.interpreter import (
    evaluate_node,
    load_inputs,
    load_weights,
    nmse,
    numpy_dtype,
    random_inputs,
    random_weights,
    run_reference,
    save_weights,
)

RNG = np.random.default_rng(1234)


def ev(op: str, *args: np.ndarray, type: str | None = None, **attrs: AttrValue) -> np.ndarray:
    """Evaluate one node; its type is inferred unless given as e.g. 'f16'."""
    node = Node("y", op, tuple(f"a{i}" for i in range(len(args))), attrs)
    if type is not None:
        out = evaluate_node(node, list(args))
        node = Node("y", op, node.operands, attrs, TensorType(type, out.shape))
    return evaluate_node(node, list(args))


def randn(*shape: int, dtype: type = np.float32) -> np.ndarray:
    return RNG.standard_normal(shape).astype(dtype)


def test_numpy_dtype() -> None:
    assert numpy_dtype("f32") == np.float32 and numpy_dtype("i64") == np.int64
    assert numpy_dtype("bf16") == np.dtype(ml_dtypes.bfloat16)
    assert numpy_dtype("bool") == np.bool_


# -- elementwise -------------------------------------------------------------------------------


def test_unary_math_against_math_module() -> None:
    values = [0.25, 1.0, 2.5]
    x = np.array(values, dtype=np.float32)
    for op, fn in [
        ("exp", math.exp),
        ("log", math.log),
        ("sqrt", math.sqrt),
        ("rsqrt", lambda v: 1 / math.sqrt(v)),
        ("tanh", math.tanh),
        ("sigmoid", lambda v: 1 / (1 + math.exp(-v))),
        ("silu", lambda v: v / (1 + math.exp(-v))),
        ("neg", lambda v: -v),
    ]:
        out = ev(op, x)
        assert out.dtype == np.float32, op
        np.testing.assert_allclose(out, [fn(v) for v in values], rtol=2e-6, err_msg=op)


def test_sigmoid_is_stable_for_large_inputs() -> None:
    out = ev("sigmoid", np.array([-200.0, 0.0, 200.0], dtype=np.float32))
    assert out.tolist() == [0.0, 0.5, 1.0]


def test_relu_abs_neg_keep_integer_dtypes() -> None:
    x = np.array([-3, 0, 5], dtype=np.int32)
    assert ev("relu", x).tolist() == [0, 0, 5] and ev("relu", x).dtype == np.int32
    assert ev("abs", x).tolist() == [3, 0, 5]
    assert ev("neg", x).tolist() == [3, 0, -5]


def test_gelu_known_values() -> None:
    x = np.array([-1.0, 0.0, 1.0, 2.0], dtype=np.float32)
    # x·Φ(x) with Φ the standard normal CDF: Φ(1) = 0.8413447460685429, Φ(2) = 0.9772498680518208
    exact = ev("gelu", x, approximate="none")
    np.testing.assert_allclose(
        exact, [-0.15865525393145707, 0.0, 0.8413447460685429, 2 * 0.9772498680518208], rtol=1e-6
    )
    tanh = ev("gelu", x)  # default: the tanh approximation
    np.testing.assert_allclose(tanh[2], 0.8411919906082768, rtol=1e-6)
    assert abs(float(tanh[2]) - float(exact[2])) > 1e-4  # the two forms really differ


def test_binary_broadcasting_against_loops() -> None:
    a, b = randn(3, 4), randn(4)
    for op, fn in [("add", float.__add__), ("sub", float.__sub__), ("mul", float.__mul__)]:
        out = ev(op, a, b)
        for i in range(3):
            for j in range(4):
                assert out[i, j] == np.float32(fn(float(a[i, j]), float(b[j])))
    assert ev("maximum", np.array([1, 5], np.int32), np.array([3], np.int32)).tolist() == [3, 5]
    assert ev(
        "minimum", np.array([1.0, 5.0], np.float32), np.array([3.0], np.float32)
    ).tolist() == [
        1.0,
        3.0,
    ]
    assert ev("div", np.array([1.0], np.float32), np.array([4.0], np.float32)).tolist() == [0.25]
    assert ev("pow", np.array([2.0, 9.0], np.float32), np.array([0.5], np.float32)).tolist() == [
        pytest.approx(math.sqrt(2)),
        3.0,
    ]


def test_scale_and_cast() -> None:
    x = np.array([1.5, -2.0], dtype=np.float32)
    assert ev("scale", x, factor=0.5).tolist() == [0.75, -1.0]
    assert ev("cast", np.array([1.7, -1.7], np.float32), dtype="i32").tolist() == [1, -1]
    half = ev("cast", np.array([1 / 3], np.float32))
    assert half.dtype == np.float16 and float(half[0]) == float(np.float16(1 / 3))
    # bf16 keeps 8 significand bits: 1 + 2^-8 is halfway and rounds to even (1.0)
    bf = ev("cast", np.array([1 + 2**-8, 1 + 3 * 2**-8], np.float32), dtype="bf16")
    assert bf.dtype == ml_dtypes.bfloat16 and bf.astype(np.float32).tolist() == [1.0, 1 + 2**-6]


def test_f16_ops_compute_in_f32_and_round_once() -> None:
    a = np.array([1.0, 3.0], dtype=np.float16)
    b = np.array([2**-11, 2**-10], dtype=np.float16)
    out = ev("add", a, b, type="f16")
    assert out.dtype == np.float16
    expected = (a.astype(np.float32) + b.astype(np.float32)).astype(np.float16)
    assert out.tobytes() == expected.tobytes()


def test_f16_reductions_accumulate_in_f32() -> None:
    ones = np.ones(4096, dtype=np.float16)
    # accumulating in f16 would stall at 2048 (2048 + 1 rounds back to 2048)
    assert float(ev("sum", ones, type="f16")) == 4096.0
    assert float(ev("mean", ones, type="f16")) == 1.0
    k = np.ones((1, 4096), dtype=np.float16)
    assert float(ev("matmul", k, k.T.copy(), type="f16")[0, 0]) == 4096.0
    bf = np.ones((4096,), dtype=ml_dtypes.bfloat16)
    assert float(ev("sum", bf, type="bf16")) == 4096.0


# -- reductions and norms ----------------------------------------------------------------------


def test_reductions_against_loops() -> None:
    x = randn(2, 3, 4)
    s = ev("sum", x, axes=(1,))
    m = ev("mean", x, axes=(0, 2), keepdims=True)
    mx = ev("max", x, axes=(-1,))
    assert s.shape == (2, 4) and m.shape == (1, 3, 1) and mx.shape == (2, 3)
    for i in range(2):
        for k in range(4):
            assert s[i, k] == pytest.approx(sum(float(x[i, j, k]) for j in range(3)), rel=1e-5)
    for j in range(3):
        values = [float(x[i, j, k]) for i in range(2) for k in range(4)]
        assert m[0, j, 0] == pytest.approx(sum(values) / len(values), rel=1e-5, abs=1e-6)
    for i in range(2):
        for j in range(3):
            assert mx[i, j] == max(x[i, j, :])
    assert float(ev("sum", x)) == pytest.approx(float(x.astype(np.float64).sum()), rel=1e-5)
    ints = np.array([[1, 2], [3, 4]], dtype=np.int32)
    total = ev("sum", ints, axes=(0,))
    assert total.tolist() == [4, 6] and total.dtype == np.int32


def test_softmax_identities() -> None:
    x = randn(3, 5) * 4
    p = ev("softmax", x)
    np.testing.assert_allclose(p.sum(axis=-1), 1.0, rtol=1e-6)
    # p_i / p_j = e^(x_i - x_j)
    np.testing.assert_allclose(p[:, 0] / p[:, 1], np.exp(x[:, 0] - x[:, 1]), rtol=1e-5)
    p0 = ev("softmax", x, axis=0)
    np.testing.assert_allclose(p0.sum(axis=0), 1.0, rtol=1e-6)
    big = ev("softmax", np.array([[1000.0, 1000.0]], dtype=np.float32))
    assert big.tolist() == [[0.5, 0.5]]


def test_rms_norm_hand_case() -> None:
    x = np.array([[3.0, 4.0]], dtype=np.float32)
    w = np.array([1.0, 2.0], dtype=np.float32)
    out = ev("rms_norm", x, w, eps=0.0)
    rms = math.sqrt((9 + 16) / 2)
    np.testing.assert_allclose(out, [[3 / rms, 8 / rms]], rtol=1e-6)
    with_eps = ev("rms_norm", x, w, eps=1.0)  # eps is added to the mean square
    np.testing.assert_allclose(with_eps, [[3 / math.sqrt(13.5), 8 / math.sqrt(13.5)]], rtol=1e-6)


def test_layer_norm_hand_case() -> None:
    x = np.array([[1.0, 2.0, 3.0, 4.0]], dtype=np.float32)
    w = np.array([1.0, 1.0, 2.0, 2.0], dtype=np.float32)
    b = np.array([0.0, 1.0, 0.0, 1.0], dtype=np.float32)
    out = ev("layer_norm", x, w, b, eps=0.0)
    sd = math.sqrt(1.25)  # mean 2.5, biased variance (2.25 + 0.25 + 0.25 + 2.25) / 4
    expected = [-1.5 / sd, -0.5 / sd + 1, 2 * 0.5 / sd, 2 * 1.5 / sd + 1]
    np.testing.assert_allclose(out, [expected], rtol=1e-6)


# -- matmul ------------------------------------------------------------------------------------


def test_matmul_hand_case() -> None:
    a = np.array([[1, 2], [3, 4]], dtype=np.float32)
    b = np.array([[5, 6], [7, 8]], dtype=np.float32)
    assert ev("matmul", a, b).tolist() == [[19, 22], [43, 50]]
    assert ev("matmul", a, b, transpose_a=True).tolist() == [[26, 30], [38, 44]]
    assert ev("matmul", a, b, transpose_b=True).tolist() == [[17, 23], [39, 53]]


def test_matmul_batched_against_loops() -> None:
    a = randn(2, 3, 4)
    b2 = randn(4, 5)  # 2-D b: shared by every batch
    bt = randn(2, 5, 4)  # batched b, transposed
    out2 = ev("matmul", a, b2)
    out_t = ev("matmul", a, bt, transpose_b=True)
    assert out2.shape == (2, 3, 5) and out_t.shape == (2, 3, 5)
    for n in range(2):
        for i in range(3):
            for j in range(5):
                ref = sum(float(a[n, i, k]) * float(b2[k, j]) for k in range(4))
                assert out2[n, i, j] == pytest.approx(ref, rel=1e-5, abs=1e-5)
                ref_t = sum(float(a[n, i, k]) * float(bt[n, j, k]) for k in range(4))
                assert out_t[n, i, j] == pytest.approx(ref_t, rel=1e-5, abs=1e-5)
    c = randn(3, 1, 2, 4)
    d = randn(2, 4, 3)  # batch dims [3,1] and [2] broadcast to [3,2]
    out4 = ev("matmul", c, d)
    assert out4.shape == (3, 2, 2, 3)
    for x in range(3):
        for y in range(2):
            for i in range(2):
                for j in range(3):
                    ref = sum(float(c[x, 0, i, k]) * float(d[y, k, j]) for k in range(4))
                    assert out4[x, y, i, j] == pytest.approx(ref, rel=1e-5, abs=1e-5)


# -- data movement -----------------------------------------------------------------------------


def test_views_and_concat() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    assert ev("reshape", x, shape=(6, 4))[5].tolist() == [20, 21, 22, 23]
    tr = ev("transpose", x, perm=(2, 0, 1))
    assert tr.shape == (4, 2, 3) and tr[3, 1, 2] == x[1, 2, 3]
    sl = ev("slice", x, axis=-1, start=1, end=3)
    assert sl.shape == (2, 3, 2) and sl[1, 2].tolist() == [21, 22]
    cat = ev("concat", x, x[:, :1], axis=1)
    assert cat.shape == (2, 4, 4) and cat[0, 3].tolist() == x[0, 0].tolist()


def test_copy_and_prefetch_return_fresh_arrays() -> None:
    x = randn(3)
    for op in ("copy", "prefetch"):
        out = ev(op, x)
        assert out.tolist() == x.tolist() and not np.shares_memory(out, x)


def test_get_rows() -> None:
    table = np.arange(12, dtype=np.float32).reshape(4, 3)
    ids = np.array([[3, 0], [1, 1]], dtype=np.int32)
    out = ev("get_rows", table, ids)
    assert out.shape == (2, 2, 3)
    assert out[0, 0].tolist() == [9, 10, 11] and out[1, 1].tolist() == [3, 4, 5]
    with pytest.raises(InputError, match="get_rows: id 4 out of range for a table of 4 rows"):
        ev("get_rows", table, np.array([4], dtype=np.int32))
    with pytest.raises(InputError, match="get_rows: id -1 out of range"):
        ev("get_rows", table, np.array([-1], dtype=np.int64))


def test_kv_cache_write() -> None:
    cache = randn(1, 2, 6, 4)
    before = cache.copy()
    new = randn(1, 2, 2, 4)
    out = ev("kv_cache_write", cache, new, np.array([3], dtype=np.int32))
    assert np.array_equal(cache, before)  # the operand is not modified
    assert np.array_equal(out[:, :, 3:5], new)
    assert np.array_equal(out[:, :, :3], cache[:, :, :3])
    assert np.array_equal(out[:, :, 5:], cache[:, :, 5:])
    with pytest.raises(InputError, match=r"kv_cache_write: pos 5 out of range \[0, 4\]"):
        ev("kv_cache_write", cache, new, np.array([5], dtype=np.int32))


# -- rope --------------------------------------------------------------------------------------


def test_rope_against_rotation_matrices() -> None:
    b, s, h, d, theta = 2, 3, 2, 8, 100.0
    x = randn(b, s, h, d)
    pos = np.array([0, 5, 11], dtype=np.int32)
    out = ev("rope", x, pos, theta=theta)
    half = d // 2
    for si in range(s):
        for i in range(half):
            angle = pos[si] * theta ** (-2 * i / d)
            rot = np.array(
                [[math.cos(angle), -math.sin(angle)], [math.sin(angle), math.cos(angle)]]
            )
            for bi in range(b):
                for hi in range(h):
                    pair = np.array([x[bi, si, hi, i], x[bi, si, hi, i + half]], dtype=np.float64)
                    got = [out[bi, si, hi, i], out[bi, si, hi, i + half]]
                    np.testing.assert_allclose(got, rot @ pair, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(out[:, 0], x[:, 0])  # position 0 is the identity
    np.testing.assert_allclose(np.linalg.norm(out, axis=-1), np.linalg.norm(x, axis=-1), rtol=1e-5)


def test_rope_default_theta() -> None:
    x = randn(1, 1, 1, 4)
    out = ev("rope", x, np.array([1], dtype=np.int64))
    angle = 10000.0 ** (-2 / 4)  # pair (1, 3): frequency theta^(-2/4)
    expected = x[0, 0, 0, 1] * math.cos(angle) - x[0, 0, 0, 3] * math.sin(angle)
    assert out[0, 0, 0, 1] == pytest.approx(expected, rel=1e-5)


# -- attention ---------------------------------------------------------------------------------


def _attention_loops(q, k, v, causal=False, kv_len=None, scale=None):  # type: ignore[no-untyped-def]
    b, hq, sq, d = q.shape
    hkv, skv = k.shape[1], k.shape[2]
    length = skv if kv_len is None else kv_len
    scale = 1 / math.sqrt(d) if scale is None else scale
    out = np.zeros(q.shape, dtype=np.float64)
    for bi in range(b):
        for h in range(hq):
            kh = h // (hq // hkv)
            for i in range(sq):
                keys = [j for j in range(length) if not causal or j <= length - sq + i]
                if not keys:
                    continue
                logits = [scale * float(np.dot(q[bi, h, i], k[bi, kh, j])) for j in keys]
                top = max(logits)
                weights = [math.exp(s - top) for s in logits]
                total = sum(weights)
                for w, j in zip(weights, keys):
                    out[bi, h, i] += (w / total) * v[bi, kh, j].astype(np.float64)
    return out


def test_attention_gqa_against_per_head_loops() -> None:
    q, k, v = randn(2, 4, 3, 8), randn(2, 2, 5, 8), randn(2, 2, 5, 8)
    np.testing.assert_allclose(
        ev("attention", q, k, v), _attention_loops(q, k, v), rtol=1e-4, atol=1e-6
    )
    np.testing.assert_allclose(
        ev("attention", q, k, v, scale=0.3),
        _attention_loops(q, k, v, scale=0.3),
        rtol=1e-4,
        atol=1e-6,
    )


def test_attention_causal_and_kv_len() -> None:
    q, k, v = randn(1, 2, 3, 4), randn(1, 1, 6, 4), randn(1, 1, 6, 4)
    causal = ev("attention", q, k, v, causal=True)
    np.testing.assert_allclose(causal, _attention_loops(q, k, v, causal=True), rtol=1e-4, atol=1e-6)
    kv_len = np.array([4], dtype=np.int32)
    limited = ev("attention", q, k, v, kv_len, causal=True)
    expected = _attention_loops(q, k, v, causal=True, kv_len=4)
    np.testing.assert_allclose(limited, expected, rtol=1e-4, atol=1e-6)
    # keys beyond kv_len do not matter
    k2, v2 = k.copy(), v.copy()
    k2[:, :, 4:], v2[:, :, 4:] = 100.0, 100.0
    np.testing.assert_array_equal(ev("attention", q, k2, v2, kv_len, causal=True), limited)
    # Sq = Skv, causal: the first query sees only the first key
    q3 = randn(1, 1, 6, 4)
    first = ev("attention", q3, k, v, causal=True)[0, 0, 0]
    np.testing.assert_allclose(first, v[0, 0, 0], rtol=1e-6)


def test_attention_row_without_keys_is_zero() -> None:
    q, k, v = randn(1, 1, 3, 4), randn(1, 1, 4, 4), randn(1, 1, 4, 4)
    out = ev("attention", q, k, v, np.array([1], dtype=np.int32), causal=True)
    # kv_len 1, Sq 3: query i sees keys j <= 1 - 3 + i, so only the last query sees key 0
    assert np.all(out[0, 0, :2] == 0)
    np.testing.assert_allclose(out[0, 0, 2], v[0, 0, 0], rtol=1e-6)
    with pytest.raises(InputError, match=r"attention: kv_len 5 out of range \[0, 4\]"):
        ev("attention", q, k, v, np.array([5], dtype=np.int32))


def test_attention_f16_matches_f32_math() -> None:
    q, k, v = randn(1, 2, 4, 8), randn(1, 2, 4, 8), randn(1, 2, 4, 8)
    h = [a.astype(np.float16) for a in (q, k, v)]
    out = ev("attention", *h, type="f16")
    assert out.dtype == np.float16
    expected = _attention_loops(*[a.astype(np.float32) for a in h])
    np.testing.assert_allclose(out.astype(np.float32), expected, rtol=2e-3, atol=2e-3)


# -- conv2d and pools --------------------------------------------------------------------------


def _conv_loops(x, w, b, stride, padding, groups):  # type: ignore[no-untyped-def]
    n, _, h, wd = x.shape
    o, cg, kh, kw = w.shape
    oh = (h + 2 * padding[0] - kh) // stride[0] + 1
    ow = (wd + 2 * padding[1] - kw) // stride[1] + 1
    out = np.zeros((n, o, oh, ow))
    per_group = o // groups
    for ni in range(n):
        for oc in range(o):
            g = oc // per_group
            for y in range(oh):
                for xx in range(ow):
                    acc = 0.0 if b is None else float(b[oc])
                    for ci in range(cg):
                        for i in range(kh):
                            for j in range(kw):
                                r = y * stride[0] + i - padding[0]
                                col = xx * stride[1] + j - padding[1]
                                if 0 <= r < h and 0 <= col < wd:
                                    acc += float(x[ni, g * cg + ci, r, col]) * float(
                                        w[oc, ci, i, j]
                                    )
                    out[ni, oc, y, xx] = acc
    return out


@pytest.mark.parametrize(
    ("stride", "padding", "groups", "bias"),
    [((1, 1), (0, 0), 1, False), ((2, 1), (1, 2), 1, True), ((1, 2), (1, 0), 2, True)],
)
def test_conv2d_against_loops(stride, padding, groups, bias) -> None:  # type: ignore[no-untyped-def]
    x = randn(2, 4, 5, 6)
    w = randn(6, 4 // groups, 3, 2)
    b = randn(6) if bias else None
    args = [x, w] + ([b] if b is not None else [])
    out = ev("conv2d", *args, stride=stride, padding=padding, groups=groups)
    expected = _conv_loops(x, w, b, stride, padding, groups)
    assert out.shape == expected.shape
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-5)


def test_max_pool_hand_case() -> None:
    x = np.array([[1, 2, 5, 6], [3, 4, 7, 8], [-1, -2, 0, 0], [-3, -4, 0, 9]], np.float32)
    out = ev("max_pool2d", x[None, None], kernel=(2, 2))
    assert out[0, 0].tolist() == [[4, 8], [-1, 9]]
    # padding never wins a max, even against negative values
    neg = -np.ones((1, 1, 2, 2), dtype=np.float32)
    assert ev("max_pool2d", neg, kernel=(3, 3), stride=(1, 1), padding=(1, 1)).max() == -1


def test_avg_pool_divides_by_in_bounds_count() -> None:
    x = np.array([[1, 2], [3, 4]], np.float32)[None, None]
    out = ev("avg_pool2d", x, kernel=(3, 3), stride=(1, 1), padding=(1, 1))
    # every 3x3 window around a 2x2 image covers all four values: mean 2.5, not 10/9
    assert out[0, 0].tolist() == [[2.5, 2.5], [2.5, 2.5]]
    y = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
    out2 = ev("avg_pool2d", y, kernel=(2, 2))
    assert out2[0, 0].tolist() == [[2.5, 4.5], [10.5, 12.5]]
    out3 = ev("avg_pool2d", y, kernel=(2, 2), stride=(2, 2), padding=(1, 1))
    # corner window holds only y[0,0]; the next holds y[0,1], y[0,2]
    assert out3[0, 0, 0, 0] == 0.0 and out3[0, 0, 0, 1] == 1.5


# -- fused -------------------------------------------------------------------------------------


def test_fused_rounds_after_every_body_node() -> None:
    f16 = TensorType("f16", (1,))
    body = Region(
        ("p0", "p1"),
        (Node("t", "add", ("p0", "p1"), type=f16), Node("u", "sub", ("t", "p0"), type=f16)),
        "u",
    )
    node = Node("y", "fused", ("a", "b"), type=f16, body=body)
    a, b = np.array([2048], np.float16), np.array([1], np.float16)
    # (2048 + 1) rounds to 2048 in f16, so the unfused meaning is 0, not 1
    assert evaluate_node(node, [a, b]).tolist() == [0.0]


# -- whole graphs ------------------------------------------------------------------------------


def _mlp() -> Graph:
    x, w, h, y = (TensorType("f32", s) for s in [(2, 4), (4, 3), (2, 3), (2, 3)])
    return Graph(
        "mlp",
        inputs=(Input("x", x),),
        weights=(Weight("w", w),),
        nodes=(
            Node("h", "matmul", ("x", "w"), type=h, ann=Annotations(stream=1)),
            Node("e", "record"),
            Node("e", "wait"),
            Node("y", "relu", ("h",), type=y),
            Node("z", "exp", ("h",), type=y),
        ),
        outputs=(Output("y"), Output("z")),
    )


def test_run_reference_evaluates_in_order_and_skips_events() -> None:
    graph = _mlp()
    x, w = randn(2, 4), randn(4, 3)
    out = run_reference(graph, {"x": x}, {"w": w})
    assert list(out) == ["y", "z"]
    h = x @ w
    np.testing.assert_allclose(out["y"], np.maximum(h, 0), rtol=1e-6)
    np.testing.assert_allclose(out["z"], np.exp(h), rtol=1e-5)


def test_run_reference_rejects_bad_arrays() -> None:
    graph = _mlp()
    w = randn(4, 3)
    with pytest.raises(InputError, match=r"missing input '%x' \(f32\[2,4\]\) in the given inputs"):
        run_reference(graph, {}, {"w": w})
    with pytest.raises(
        InputError, match=r"input '%x': expected f32\[2,4\], got float64\[2,4\] in the given inputs"
    ):
        run_reference(graph, {"x": np.zeros((2, 4))}, {"w": w})
    with pytest.raises(InputError, match=r"weight '%w': expected f32\[4,3\], got f32\[3,4\]"):
        run_reference(graph, {"x": randn(2, 4)}, {"w": randn(3, 4)})
    with pytest.raises(InputError, match=r"unknown weight 'ww' .*\(did you mean '%w'\?\)"):
        run_reference(graph, {"x": randn(2, 4)}, {"w": w, "ww": w})


def test_evaluate_node_checks_the_declared_shape() -> None:
    node = Node("y", "relu", ("x",), type=TensorType("f32", (3,)))
    with pytest.raises(
        VerifyError, match=r"relu: computed a f32\[2\] value but the node is declared"
    ):
        evaluate_node(node, [randn(2)])


def _decode_graph() -> Graph:
    def ty(dtype: str, *shape: int) -> TensorType:
        return TensorType(dtype, shape)

    return Graph(
        "decode",
        inputs=(
            Input("tok", ty("i32", 1)),
            Input("pos", ty("i32", 1)),
            Input("kv_len", ty("i32", 1)),
            Input("cache", ty("f32", 1, 1, 8, 4)),
            Input("x", ty("f32", 1, 4)),
        ),
        weights=(
            Weight("emb", ty("f16", 50, 4)),
            Weight("norm", ty("f16", 4)),
            Weight("w", ty("f32", 64, 16)),
        ),
        nodes=(
            Node("e", "get_rows", ("emb", "tok"), type=ty("f16", 1, 4)),
            Node("n", "rms_norm", ("e", "norm"), type=ty("f16", 1, 4)),
            Node("k", "reshape", ("x",), {"shape": (1, 1, 1, 4)}, ty("f32", 1, 1, 1, 4)),
            Node("c", "kv_cache_write", ("cache", "k", "pos"), type=ty("f32", 1, 1, 8, 4)),
            Node(
                "a", "attention", ("k", "c", "c", "kv_len"), {"causal": True}, ty("f32", 1, 1, 1, 4)
            ),
            Node("s", "sqrt", ("x",), type=ty("f32", 1, 4)),
        ),
        outputs=(Output("n"), Output("a"), Output("s")),
    )


def test_random_data_is_seeded_valid_and_well_scaled() -> None:
    graph = _decode_graph()
    inputs, weights = random_inputs(graph, seed=3), random_weights(graph, seed=3)
    again = random_inputs(graph, seed=3)
    assert all(np.array_equal(inputs[k], again[k]) for k in inputs)
    assert not np.array_equal(random_inputs(graph, seed=4)["x"], inputs["x"])
    assert inputs["tok"].dtype == np.int32 and weights["emb"].dtype == np.float16
    for seed in range(30):
        data = random_inputs(graph, seed=seed)
        assert 0 <= int(data["tok"][0]) < 50
        assert 0 <= int(data["pos"][0]) <= 7
        assert 1 <= int(data["kv_len"][0]) <= 8
        assert np.all(data["x"] > 0)  # it feeds sqrt
    assert abs(float(weights["norm"].astype(np.float32).mean()) - 1.0) < 0.2  # norm weight ~ 1
    outputs = run_reference(graph, inputs, weights)
    assert all(np.all(np.isfinite(v.astype(np.float64))) for v in outputs.values())


def test_random_weights_scale_matrices_by_fan_in() -> None:
    ty = TensorType("f32", (1024, 256))
    graph = Graph(
        "g",
        inputs=(Input("x", TensorType("f32", (2, 1024))),),
        weights=(Weight("w", ty),),
        nodes=(Node("y", "matmul", ("x", "w"), type=TensorType("f32", (2, 256))),),
        outputs=(Output("y"),),
    )
    w = random_weights(graph)["w"]
    assert float(w.std()) == pytest.approx(1 / math.sqrt(1024), rel=0.05)


# -- files -------------------------------------------------------------------------------------


def _weights_graph() -> Graph:
    return Graph(
        "g",
        weights=(Weight("a.w", TensorType("bf16", (2, 3))), Weight("b", TensorType("i32", (4,)))),
    )


@pytest.mark.parametrize("suffix", [".npz", ".safetensors"])
def test_weights_round_trip(tmp_path: Path, suffix: str) -> None:
    arrays = {
        "a.w": randn(2, 3).astype(ml_dtypes.bfloat16),
        "b": np.arange(4, dtype=np.int32),
    }
    path = tmp_path / f"w{suffix}"
    save_weights(path, arrays)
    loaded = load_weights(path, _weights_graph())
    assert loaded["a.w"].dtype == ml_dtypes.bfloat16
    assert loaded["a.w"].tobytes() == arrays["a.w"].tobytes()
    assert loaded["b"].tolist() == [0, 1, 2, 3]


def test_weight_file_errors(tmp_path: Path) -> None:
    graph = _weights_graph()
    with pytest.raises(InputError, match="weights file '.*missing.npz' not found"):
        load_weights(tmp_path / "missing.npz", graph)
    with pytest.raises(
        InputError, match=r"unsupported extension \(expected .npz or .safetensors\)"
    ):
        load_weights(tmp_path / "w.bin", graph)
    with pytest.raises(InputError, match="unsupported extension"):
        save_weights(tmp_path / "w.bin", {})
    bad = tmp_path / "bad.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(InputError, match="cannot read weights file .*bad.npz"):
        load_weights(bad, graph)
    bad_st = tmp_path / "bad.safetensors"
    bad_st.write_bytes(b"garbage!garbage!")
    with pytest.raises(InputError, match="cannot read weights file"):
        load_weights(bad_st, graph)
    path = tmp_path / "w.npz"
    save_weights(path, {"a.w": np.zeros((3, 2), np.float32), "extra": np.zeros(1, np.float32)})
    with pytest.raises(InputError) as info:
        load_weights(path, graph)
    text = str(info.value)
    assert "weight '%a.w': expected bf16[2,3], got f32[3,2] in file" in text
    assert "missing weight '%b' (i32[4]) in file" in text
    assert "unknown weight 'extra' in file" in text


def test_load_inputs(tmp_path: Path) -> None:
    graph = _mlp()
    x = randn(2, 4)
    np.savez(tmp_path / "in.npz", x=x)
    assert np.array_equal(load_inputs(tmp_path / "in.npz", graph)["x"], x)
    with pytest.raises(InputError, match=r"unsupported extension \(expected .npz\)"):
        load_inputs(tmp_path / "in.safetensors", graph)


def test_nmse() -> None:
    e = np.array([3.0, 4.0], dtype=np.float32)
    assert nmse(e, e) == 0.0
    assert nmse(np.array([3.0, 5.0], np.float16), e) == pytest.approx(1 / 25)
    assert nmse(np.zeros(2), np.zeros(2)) == 0.0
    assert nmse(np.ones(2), np.zeros(2)) == math.inf


# -- masks and selection: comparisons, not, where, clip ----------------------------------------


def test_comparisons_hand_case_broadcast_to_bool() -> None:
    a = np.array([[1.0], [2.0]], np.float32)
    b = np.array([0.5, 2.0, 3.0], np.float32)
    assert ev("equal", a, b).tolist() == [[False, False, False], [False, True, False]]
    assert ev("less", a, b).tolist() == [[False, True, True], [False, False, True]]
    assert ev("greater", a, b).tolist() == [[True, False, False], [True, False, False]]
    assert ev("less", a, b).dtype == np.bool_


def test_comparisons_of_nan_are_false_and_of_ints_exact() -> None:
    nan = np.array([np.nan, 1.0], np.float32)
    for op in ("equal", "less", "greater"):
        assert ev(op, nan, nan).tolist() == [False, op == "equal"]
    big = np.array([2**40, 2**40 + 1], np.int64)
    assert ev("less", big[:1], big[1:]).tolist() == [True]
    assert ev("equal", np.array([True, False]), np.array([True, True])).tolist() == [True, False]


def test_not_and_where_hand_case() -> None:
    mask = np.array([[True, False, True]])
    assert ev("not", mask).tolist() == [[False, True, False]]
    keep = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], np.float32)
    fill = np.array(-1e9, np.float32)
    assert ev("where", mask, keep, fill).tolist() == [[1.0, -1e9, 3.0], [4.0, -1e9, 6.0]]
    rows = np.array([[True], [False]])
    assert ev("where", rows, keep, fill).tolist() == [[1.0, 2.0, 3.0], [-1e9, -1e9, -1e9]]


def test_comparison_and_where_type_errors_name_the_op() -> None:
    f, i, m = np.zeros(2, np.float32), np.zeros(2, np.int32), np.zeros(2, np.bool_)
    with pytest.raises(VerifyError, match=r"less: operand dtypes differ \(f32 vs i32\)"):
        ev("less", f, i)
    with pytest.raises(VerifyError, match="greater: expected a numeric operand"):
        ev("greater", m, m)
    with pytest.raises(VerifyError, match="not: expected a bool operand, got f32"):
        ev("not", f)
    with pytest.raises(VerifyError, match="where: the condition must be bool, got f32"):
        ev("where", f, f, f)
    with pytest.raises(VerifyError, match=r"where: the two choices' dtypes differ \(f32 vs i32\)"):
        ev("where", m, f, i)
    with pytest.raises(VerifyError, match="where: cannot broadcast"):
        ev("where", m, np.zeros(3, np.float32), f)


def test_clip_hand_case_one_or_both_bounds() -> None:
    x = np.array([-2.0, -0.5, 0.0, 0.25, 3.0, np.nan], np.float32)
    both = ev("clip", x, min=-1.0, max=0.5)
    np.testing.assert_array_equal(both, [-1.0, -0.5, 0.0, 0.25, 0.5, np.nan])
    np.testing.assert_array_equal(ev("clip", x, min=0.0), [0.0, 0.0, 0.0, 0.25, 3.0, np.nan])
    np.testing.assert_array_equal(ev("clip", x, max=0), [-2.0, -0.5, 0.0, 0.0, 0.0, np.nan])


def test_clip_errors() -> None:
    x = np.zeros(2, np.float32)
    with pytest.raises(VerifyError, match="clip: needs attribute 'min', 'max' or both"):
        ev("clip", x)
    with pytest.raises(VerifyError, match=r"clip: attribute 'min' \(1.0\) is greater than 'max'"):
        ev("clip", x, min=1.0, max=0.0)
    with pytest.raises(VerifyError, match="clip: expected a float operand, got i32"):
        ev("clip", np.zeros(2, np.int32), min=0.0)


def test_log_softmax_hand_case_and_large_values() -> None:
    x = np.array([[0.0, 0.0], [1000.0, 0.0]], np.float32)
    got = ev("log_softmax", x)
    np.testing.assert_allclose(got[0], [-math.log(2), -math.log(2)], rtol=1e-6)
    np.testing.assert_allclose(got[1], [0.0, -1000.0], atol=1e-6)
    cols = ev("log_softmax", x, axis=0)
    np.testing.assert_allclose(cols[:, 1], [-math.log(2), -math.log(2)], rtol=1e-6)
    y = randn(3, 7)
    np.testing.assert_allclose(np.exp(ev("log_softmax", y)), ev("softmax", y), rtol=1e-5)


# -- indexing: expand, tile, pad, cumsum, argmax; prelu ----------------------------------------


def test_expand_tile_pad_hand_cases() -> None:
    x = np.array([[1.0], [2.0]], np.float32)
    assert ev("expand", x, shape=(2, 2, 3)).tolist() == [[[1, 1, 1], [2, 2, 2]]] * 2
    y = np.array([[1, 2]], np.int32)
    assert ev("tile", y, repeats=(2, 2)).tolist() == [[1, 2, 1, 2], [1, 2, 1, 2]]
    assert ev("pad", y, pads=(1, 0, 0, 2)).tolist() == [[0, 0, 0, 0], [1, 2, 0, 0]]
    got = ev("pad", x, pads=(0, 1, 0, 0), value=-1.5)
    assert got.tolist() == [[-1.5, 1.0], [-1.5, 2.0]]


def test_cumsum_and_argmax_hand_cases() -> None:
    x = np.array([[1.0, 2.0, 3.0], [4.0, -5.0, 6.0]], np.float32)
    assert ev("cumsum", x, axis=1).tolist() == [[1, 3, 6], [4, -1, 5]]
    assert ev("cumsum", x, axis=0).tolist() == [[1, 2, 3], [5, -3, 9]]
    ties = np.array([[3.0, 7.0, 7.0], [np.nan, 1.0, np.nan]], np.float32)
    got = ev("argmax", ties)
    assert got.dtype == np.int64 and got.tolist() == [1, 0]  # first maximum; NaN is largest
    assert ev("argmax", x, axis=0, keepdims=True).tolist() == [[1, 0, 1]]


def test_prelu_hand_case() -> None:
    x = np.array([[-2.0, 3.0], [-4.0, 0.0]], np.float32)
    slope = np.array([[0.5], [0.25]], np.float32)
    assert ev("prelu", x, slope).tolist() == [[-1.0, 3.0], [-1.0, 0.0]]


def test_indexing_errors_name_the_op_and_the_facts() -> None:
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(VerifyError, match=r"expand: cannot broadcast f32\[2,3\] to \[4,3\]"):
        ev("expand", x, shape=(4, 3))
    with pytest.raises(VerifyError, match=r"tile: attribute 'repeats' has 1 values for f32\[2,3\]"):
        ev("tile", x, repeats=(2,))
    with pytest.raises(VerifyError, match="pad: attribute 'pads' has a negative count"):
        ev("pad", x, pads=(0, -1, 0, 0))
    with pytest.raises(VerifyError, match=r"argmax: axis 2 out of range for f32\[2,3\]"):
        ev("argmax", x, axis=2)
    with pytest.raises(VerifyError, match="argmax: the empty axis 1"):
        ev("argmax", np.zeros((2, 0), np.float32), axis=1)
    with pytest.raises(VerifyError, match="prelu: slope f32\\[3,1\\] does not broadcast"):
        ev("prelu", x, np.zeros((3, 1), np.float32))


def test_and_or_hand_case_and_errors() -> None:
    a = np.array([[True], [False]])
    b = np.array([True, False])
    assert ev("and", a, b).tolist() == [[True, False], [False, False]]
    assert ev("or", a, b).tolist() == [[True, True], [True, False]]
    with pytest.raises(VerifyError, match=r"and: expected bool operands, got f32\[2\]"):
        ev("and", b, np.zeros(2, np.float32))
