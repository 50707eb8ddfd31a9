"""gpt-oss's experts in the `moe` op: a bias after each expert stack (six or eight operands) and
the clamped SwiGLU `act = "swiglu_oai"` (`limit`, `alpha`): printed and parsed back, the type
rule's located errors, and the reference against a direct NumPy loop over tokens and slots."""

from __future__ import annotations

import numpy as np
import pytest

import optgraph as og
from optgraph.errors import VerifyError
from optgraph.reference.interpreter import run_reference

BIASED = """graph experts {
  input %x : f32[5,64]
  input %logits : f32[5,4]
  weight %gate : f32[4,32,64]
  weight %up : f32[4,32,64]
  weight %down : f32[4,64,32]
  weight %gate_b : f32[4,32]
  weight %up_b : f32[4,32]
  weight %down_b : f32[4,64]
  weight %gate_up : f32[4,64,64]
  weight %gate_up_b : f32[4,64]
  %y = moe(%x, %logits, %gate, %up, %down, %gate_b, %up_b, %down_b) {act = "swiglu_oai", k = 2, limit = 1.5, routing = "topk_softmax"} : f32[5,64]
  %z = moe(%x, %logits, %gate_up, %down, %gate_up_b, %down_b) {act = "swiglu_oai", k = 3, routing = "topk_softmax"} : f32[5,64]
  %w = moe(%x, %logits, %gate, %up, %down, %gate_b, %up_b, %down_b) {k = 2} : f32[5,64]
  output %y, %z, %w
}
"""


def _sigmoid(v: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-v))


def _expected(
    x: np.ndarray,
    logits: np.ndarray,
    stacks: tuple[np.ndarray, ...],
    k: int,
    act: str,
    limit: float = 7.0,
    alpha: float = 1.702,
    softmax_first: bool = False,
) -> np.ndarray:
    """The gpt-oss expert block, token by token in float64 (transformers' GptOssExperts with
    gate and up as separate matrices)."""
    gate, up, down, gb, ub, db = (np.asarray(s, np.float64) for s in stacks)
    out = np.zeros((x.shape[0], down.shape[1]))
    for t in range(x.shape[0]):
        row = logits[t].astype(np.float64)
        if softmax_first:
            p = np.exp(row - row.max())
            p /= p.sum()
            ids = np.argsort(-p, kind="stable")[:k]
            weights = p[ids]
        else:
            ids = np.argsort(-row, kind="stable")[:k]
            e = np.exp(row[ids] - row[ids].max())
            weights = e / e.sum()
        for e_id, w in zip(ids, weights):
            g = gate[e_id] @ x[t] + gb[e_id]
            u = up[e_id] @ x[t] + ub[e_id]
            if act == "swiglu_oai":
                g = np.minimum(g, limit)
                u = np.clip(u, -limit, limit)
                h = g * _sigmoid(alpha * g) * (u + 1)
            else:
                h = g * _sigmoid(g) * u
            out[t] += w * (down[e_id] @ h + db[e_id])
    return out


def test_round_trip_and_reference_against_a_direct_loop() -> None:
    graph = og.parse(BIASED)
    og.verify(graph)
    assert og.print_graph(graph) == BIASED
    rng = np.random.default_rng(7)
    x = rng.standard_normal((5, 64)).astype(np.float32)
    logits = rng.standard_normal((5, 4)).astype(np.float32)
    shapes = {w.name: w.type.shape for w in graph.weights}
    weights = {n: (rng.standard_normal(s) * 0.4).astype(np.float32) for n, s in shapes.items()}
    # The fused stack holds the same gate and up rows, its bias the same gate and up biases.
    weights["gate_up"] = np.concatenate([weights["gate"], weights["up"]], axis=1)
    weights["gate_up_b"] = np.concatenate([weights["gate_b"], weights["up_b"]], axis=1)
    out = run_reference(graph, {"x": x, "logits": logits}, weights)
    stacks = tuple(weights[n] for n in ("gate", "up", "down", "gate_b", "up_b", "down_b"))
    y = _expected(x, logits, stacks, 2, "swiglu_oai", limit=1.5)
    z = _expected(x, logits, stacks, 3, "swiglu_oai")
    w = _expected(x, logits, stacks, 2, "silu", softmax_first=True)
    # The clamp must bite somewhere, or `limit` is untested.
    gate_rows = np.einsum("efh,th->tef", weights["gate"], x) + weights["gate_b"]
    assert (gate_rows > 1.5).any() and (gate_rows < -1.5).any()
    for name, expected in (("y", y), ("z", z), ("w", w)):
        np.testing.assert_allclose(out[name], expected, rtol=1e-4, atol=1e-4)
    # Without the biases the result differs: they are read.
    assert np.abs(out["y"] - _expected(x, logits, (*stacks[:3], 0 * stacks[3], 0 * stacks[4],
                                                    0 * stacks[5]), 2, "swiglu_oai", 1.5)).max() > 1e-2  # fmt: skip


@pytest.mark.parametrize(
    ("operands", "types", "message"),
    [
        ("%gate, %up, %down, %gb, %ub, %db", {"ub": "f32[4,16]"},
         "moe: up_bias f32[4,16] differs from [E,F] = [4,32]"),
        ("%gate, %up, %down, %gb, %ub, %db", {"db": "f32[4,32]"},
         "moe: down_bias f32[4,32] differs from [E,H] = [4,64]"),
        ("%gate, %up, %down, %gb, %ub, %db", {"gb": "q8_0[4,32]"},
         "moe: operand '%gb' is quantized (q8_0[4,32]); only "),
        ("%gu, %down, %gb, %db", {"gb": "q8_0[4,64]"},
         "moe: gate_up_bias must be f32, f16 or bf16, got q8_0[4,64]"),
        ("%gu, %down, %gb, %db", {},
         "moe: gate_up_bias f32[4,32] differs from [E,2F] = [4,64]"),
    ],
)  # fmt: skip
def test_bias_errors_name_the_conflict(operands: str, types: dict[str, str], message: str) -> None:
    declared = {"gate": "f32[4,32,64]", "up": "f32[4,32,64]", "down": "f32[4,64,32]"}
    declared |= {"gu": "f32[4,64,64]", "gb": "f32[4,32]", "ub": "f32[4,32]", "db": "f32[4,64]"}
    declared |= types
    weights = "".join(f"  weight %{n} : {t}\n" for n, t in declared.items())
    text = (
        f"graph g {{\n  input %x : f32[2,64]\n  input %logits : f32[2,4]\n{weights}"
        f"  %y = moe(%x, %logits, {operands}) {{k = 2}} : f32[2,64]\n  output %y\n}}\n"
    )
    with pytest.raises(VerifyError) as info:
        og.verify(og.parse(text))
    [d] = info.value.diagnostics
    assert d.message.startswith(message) and d.span is not None and d.span.line == 4 + len(declared)


def test_swiglu_oai_limit_must_be_positive() -> None:
    text = BIASED.replace("limit = 1.5", "limit = 0.0")
    with pytest.raises(VerifyError, match='act = "swiglu_oai" needs limit > 0'):
        og.verify(og.parse(text))
