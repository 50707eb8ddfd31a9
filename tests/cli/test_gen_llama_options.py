"""`examples/gen_llama.py`'s variants: `--eps`, `--theta`, `--tied-embeddings`, `--bias`,
`--head-dim`. Each changes the generated IR as documented, and every variant verifies, runs on
the reference interpreter and gives the same numbers on the planned executor (small sizes)."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import optgraph as og
from optgraph.ir.graph import Graph
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference
from tests.cli.test_examples import EXAMPLES, gen_llama

SIZES: dict[str, Any] = {"layers": 2, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 48}
SIZES |= {"vocab": 40, "cache_len": 8}


def _graph(**options: Any) -> Graph:
    graph = og.parse(gen_llama.generate_llama(**(SIZES | options)))
    og.verify(graph)
    return graph


def _run(graph: Graph, weights: dict[str, np.ndarray] | None = None) -> dict[str, np.ndarray]:
    """The reference outputs, on inputs whose positions are not 0 (rope at 0 is the identity)."""
    inputs = random_inputs(graph, seed=1)
    inputs["pos"] = np.arange(5, 5 + inputs["pos"].shape[0], dtype=np.int32)
    return dict(run_reference(graph, inputs, weights or random_weights(graph, seed=1)))


def _nodes(graph: Graph, op: str) -> list[Any]:
    return [n for n in graph.nodes if n.op == op]


VARIANTS = [
    {"eps": 1e-3},
    {"theta": 500000.0},
    {"tied_embeddings": True},
    {"bias": "qkv"},
    {"bias": "attention"},
    {"bias": "all"},
    {"head_dim": 16},
    {"eps": 1e-5, "theta": 1e6, "tied_embeddings": True, "bias": "all", "head_dim": 4},
]


@pytest.mark.parametrize("mode", ["decode", "prefill"])
@pytest.mark.parametrize(
    "options", VARIANTS, ids=lambda o: ",".join(f"{k}={v}" for k, v in o.items())
)
def test_every_variant_verifies_and_runs_like_the_reference(
    options: dict[str, Any], mode: str
) -> None:
    graph = _graph(mode=mode, seq=2, **options)
    inputs, weights = random_inputs(graph, seed=2), random_weights(graph, seed=2)
    expected = run_reference(graph, inputs, weights)
    got = og.compile(graph, target="cpu").run(inputs, weights)
    for name in graph.output_names():
        assert np.all(np.isfinite(expected[name])), name
        np.testing.assert_allclose(got[name], expected[name], rtol=1e-5, atol=1e-5, err_msg=name)


def test_eps_sets_every_rms_norm_and_changes_the_numbers() -> None:
    default, changed = _graph(), _graph(eps=0.5)
    assert {n.attrs["eps"] for n in _nodes(default, "rms_norm")} == {1e-6}
    norms = _nodes(changed, "rms_norm")
    assert len(norms) == 2 * SIZES["layers"] + 1
    assert {n.attrs["eps"] for n in norms} == {0.5}
    assert not np.allclose(_run(default)["logits"], _run(changed)["logits"])


def test_theta_sets_every_rope_and_changes_the_numbers() -> None:
    default, changed = _graph(), _graph(theta=500000.0)
    assert {n.attrs["theta"] for n in _nodes(default, "rope")} == {10000.0}
    ropes = _nodes(changed, "rope")
    assert len(ropes) == 2 * SIZES["layers"]
    assert {n.attrs["theta"] for n in ropes} == {500000.0}
    assert not np.allclose(_run(default)["logits"], _run(changed)["logits"])


@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_tied_embeddings_read_the_embedding_table_as_the_head(mode: str) -> None:
    separate, tied = _graph(mode=mode), _graph(mode=mode, tied_embeddings=True)
    assert "lm_head" in separate.weight_names() and "lm_head" not in tied.weight_names()
    (logits,) = [n for n in tied.nodes if n.name == "logits"]
    assert (logits.op, logits.operands, logits.attrs["transpose_b"]) == (
        "matmul",
        ("h_final", "embed"),
        True,
    )
    # The tied model computes what the separate one does with lm_head = embed transposed.
    weights = random_weights(tied, seed=3)
    as_separate = weights | {"lm_head": np.ascontiguousarray(weights["embed"].T)}
    np.testing.assert_allclose(
        _run(tied, weights)["logits"], _run(separate, as_separate)["logits"], rtol=1e-6, atol=1e-6
    )


@pytest.mark.parametrize(
    ("bias", "projections"),
    [
        ("none", ()),
        ("qkv", ("q", "k", "v")),
        ("attention", ("q", "k", "v", "o")),
        ("all", ("q", "k", "v", "o", "gate", "up", "down")),
    ],
)
def test_bias_adds_a_vector_after_each_named_projection(
    bias: str, projections: tuple[str, ...]
) -> None:
    plain, biased = _graph(), _graph(bias=bias)
    widths = {"q": 32, "k": 16, "v": 16, "o": 32, "gate": 48, "up": 48, "down": 32}
    types = biased.value_types()
    for layer in range(SIZES["layers"]):
        names = {f"l{layer}.b_{p}" for p in widths}
        assert {n for n in names if n in biased.weight_names()} == {
            f"l{layer}.b_{p}" for p in projections
        }
        for p in projections:
            assert types[f"l{layer}.b_{p}"].shape == (widths[p],)
    assert len(_nodes(biased, "add")) - len(_nodes(plain, "add")) == len(projections) * 2
    # Zero biases give the unbiased model's numbers exactly; others change them.
    weights = random_weights(biased, seed=4)
    zero = {k: (np.zeros_like(v) if ".b_" in k else v) for k, v in weights.items()}
    plain_weights = {k: v for k, v in weights.items() if ".b_" not in k}
    np.testing.assert_array_equal(
        _run(biased, zero)["logits"], _run(plain, plain_weights)["logits"]
    )
    if projections:
        assert not np.allclose(
            _run(biased, weights)["logits"], _run(plain, plain_weights)["logits"]
        )


def test_head_dim_overrides_hidden_over_heads() -> None:
    graph = _graph(hidden=30, heads=4, kv_heads=2, head_dim=6)  # 30 / 4 is not even a whole
    types = graph.value_types()
    assert types["l0.wq"].shape == (30, 4 * 6)
    assert types["l0.wk"].shape == (30, 2 * 6)
    assert types["l0.wo"].shape == (4 * 6, 30)
    assert types["l0.k_cache"].shape == (1, 2, SIZES["cache_len"], 6)
    assert types["l0.attn"].shape == (1, 4, 1, 6)
    assert types["logits"].shape == (1, SIZES["vocab"])
    assert np.all(np.isfinite(_run(graph)["logits"]))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"head_dim": 5}, "head_dim (5) must be even"),
        ({"hidden": 30}, "hidden (30) must be divisible by heads (4)"),
        ({"eps": 0.0}, "must be positive"),
        ({"theta": -1.0}, "must be positive"),
        ({"bias": "mlp"}, "bias must be one of none, qkv, attention, all"),
    ],
)
def test_bad_variants_are_rejected(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        gen_llama.generate_llama(**(SIZES | options))


def test_command_line_flags_reach_the_ir() -> None:
    flags = ["--layers", "1", "--eps", "1e-5", "--theta", "500000", "--tied-embeddings"]
    flags += ["--head-dim", "8", "--bias"]  # --bias alone: every projection
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "gen_llama.py"), *flags],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    graph = og.parse(done.stdout)
    og.verify(graph)
    assert {n.attrs["eps"] for n in _nodes(graph, "rms_norm")} == {1e-5}
    assert {n.attrs["theta"] for n in _nodes(graph, "rope")} == {500000.0}
    assert "lm_head" not in graph.weight_names()
    assert {"l0.b_q", "l0.b_o", "l0.b_down"} <= set(graph.weight_names())
    assert graph.value_types()["l0.wq"].shape == (64, 4 * 8)
