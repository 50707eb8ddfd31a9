"""The example models: each parses, verifies, round-trips and runs on the reference interpreter.

Also checks `examples/gen_llama.py` at small sizes in both modes, and that its node count grows
linearly with the number of layers.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

import optgraph as og
from optgraph.ir.graph import Graph
from optgraph.ir.verify import verify
from optgraph.reference.interpreter import random_inputs, random_weights, run_reference

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
EXAMPLE_FILES = sorted(EXAMPLES.glob("*.ir"))


def _load_gen_llama() -> ModuleType:
    spec = importlib.util.spec_from_file_location("gen_llama", EXAMPLES / "gen_llama.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


gen_llama = _load_gen_llama()


def _run_and_check(graph: Graph) -> None:
    """Run on the reference interpreter; every output is finite and has its declared type."""
    types = graph.value_types()
    outputs = run_reference(graph, random_inputs(graph, seed=0), random_weights(graph, seed=0))
    values = list(outputs.values()) if isinstance(outputs, dict) else list(outputs)
    assert len(values) == len(graph.outputs)
    for out, value in zip(graph.outputs, values):
        array = np.asarray(value)
        declared = types[out.name]
        assert array.shape == declared.shape, out.name
        assert np.all(np.isfinite(array.astype(np.float64))), f"{out.name} has non-finite values"


def test_every_expected_example_exists() -> None:
    names = {p.name for p in EXAMPLE_FILES}
    expected = {
        "llama_decode.ir",
        "gpt2_block.ir",
        "inception_block.ir",
        "moe_block.ir",
        "mlp.ir",
        "diamond.ir",
    }
    assert expected <= names


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_parses_verifies_round_trips(path: Path) -> None:
    graph = og.parse_file(path)
    verify(graph)
    assert graph.nodes and graph.outputs
    assert og.parse(og.print_graph(graph)) == graph


@pytest.mark.parametrize("path", EXAMPLE_FILES, ids=lambda p: p.name)
def test_example_runs_on_reference(path: Path) -> None:
    _run_and_check(og.parse_file(path))


# (hidden, heads, kv_heads, ffn, vocab, batch, seq, cache_len): GQA 2:1 at batch 1 with one new
# token, and multi-query 4:1 at batch 2 with three new tokens (causal over the cache).
SMALL_CONFIGS: list[dict[str, int]] = [
    dict(zip(("hidden", "heads", "kv_heads", "ffn", "vocab", "batch", "seq", "cache_len"), sizes))
    for sizes in [(32, 4, 2, 48, 64, 1, 1, 16), (64, 4, 1, 96, 50, 2, 3, 8)]
]


@pytest.mark.parametrize("mode", ["decode", "prefill"])
@pytest.mark.parametrize("config", SMALL_CONFIGS, ids=["b1s1", "b2s3"])
def test_gen_llama_verifies_and_runs(mode: str, config: dict[str, int]) -> None:
    text = gen_llama.generate_llama(layers=2, dtype="f32", mode=mode, **config)
    graph = og.parse(text)
    verify(graph)
    assert og.parse(og.print_graph(graph)) == graph
    tokens = config["batch"] * config["seq"]
    types = graph.value_types()
    assert types["logits"].shape == (tokens, config["vocab"])
    expected_outputs = 1 + (4 if mode == "decode" else 0)
    assert len(graph.outputs) == expected_outputs
    _run_and_check(graph)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_gen_llama_low_precision_verifies(dtype: str) -> None:
    graph = og.parse(gen_llama.generate_llama(layers=1, dtype=dtype, seq=2, mode="decode"))
    verify(graph)
    assert {w.type.dtype for w in graph.weights} == {dtype}
    assert graph.value_types()["logits"].dtype == dtype


@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_gen_llama_node_count_is_linear_in_layers(mode: str) -> None:
    counts = [
        len(og.parse(gen_llama.generate_llama(layers=n, mode=mode)).nodes) for n in (1, 2, 3, 5)
    ]
    per_layer = counts[1] - counts[0]
    assert per_layer > 0
    assert counts == [counts[0] + per_layer * (n - 1) for n in (1, 2, 3, 5)]


def test_llama_decode_example_is_what_the_generator_builds() -> None:
    """The hand-written example and the generator agree at the example's sizes."""
    generated = og.parse(gen_llama.generate_llama())  # the defaults are the example's sizes
    assert og.parse_file(EXAMPLES / "llama_decode.ir") == generated


def test_gen_llama_rejects_bad_sizes() -> None:
    with pytest.raises(ValueError, match="kv-heads"):
        gen_llama.generate_llama(heads=4, kv_heads=3)
    with pytest.raises(ValueError, match="mode"):
        gen_llama.generate_llama(mode="train")


def test_gen_llama_cli_writes_file(tmp_path: Path) -> None:
    out = tmp_path / "model.ir"
    args = ["--layers", "2", "--hidden", "64", "--heads", "8", "--kv-heads", "2", "--ffn", "96"]
    args += ["--vocab", "32", "--dtype", "f16", "--seq", "1", "--cache-len", "16"]
    subprocess.run(
        [sys.executable, str(EXAMPLES / "gen_llama.py"), *args, "--mode", "decode", "-o", str(out)],
        check=True,
    )
    graph = og.parse_file(out)
    verify(graph)
    assert graph.value_types()["logits"].shape == (1, 32)


@pytest.mark.parametrize("dtype", ["f16", "bf16"])
def test_gen_llama_low_precision_runs(dtype: str) -> None:
    _run_and_check(og.parse(gen_llama.generate_llama(layers=2, dtype=dtype, seq=1)))


def test_gen_llama_decode_steps_match_prefill() -> None:
    """Decoding a sequence token by token through the caches gives prefill's logits row by row."""
    sizes = {"layers": 2, "hidden": 32, "heads": 4, "kv_heads": 2, "ffn": 48, "vocab": 40}
    sizes["batch"] = 1
    seq, cache_len = 5, 8
    prefill = og.parse(gen_llama.generate_llama(seq=seq, mode="prefill", **sizes))
    decode = og.parse(gen_llama.generate_llama(seq=1, cache_len=cache_len, mode="decode", **sizes))
    weights = random_weights(prefill, seed=1)
    assert weights.keys() == random_weights(decode, seed=1).keys()
    tokens = np.array([3, 17, 0, 39, 8], dtype=np.int32)
    expected = run_reference(
        prefill, {"tokens": tokens, "pos": np.arange(seq, dtype=np.int32)}, weights
    )["logits"]

    caches = {
        f"l{i}.{kv}_cache": np.zeros((1, 2, cache_len, 8), np.float32)
        for i in range(2)
        for kv in "kv"
    }
    for t in range(seq):
        inputs = {
            "tokens": tokens[t : t + 1],
            "pos": np.array([t], np.int32),
            "kv_len": np.array([t + 1], np.int32),
            **caches,
        }
        outputs = run_reference(decode, inputs, weights)
        np.testing.assert_allclose(outputs["logits"][0], expected[t], rtol=1e-4, atol=1e-5)
        caches = {name: outputs[f"{name}_new"] for name in caches}
