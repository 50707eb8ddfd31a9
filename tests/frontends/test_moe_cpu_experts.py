"""Imported transformers MoE models (random weights, small configs) with some experts of every
layer on the CPU (`split-experts`, then `split-backends`): the planned prefill and decode steps,
run in the planned executor in several stream interleavings on the model's own arrays, equal the
reference of the imported (unsplit) steps bit for bit (k = 2), and greedy decoding gives
transformers' tokens."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the MoE import tests need PyTorch")
transformers = pytest.importorskip("transformers", reason="the MoE import tests need transformers")

import optgraph as og
from optgraph.analysis.host_syncs import host_device_waits, min_host_device_syncs
from optgraph.reference.interpreter import run_reference

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import hf_generate

PROMPT, NEW = 5, 8
SMALL = {
    "vocab_size": 64, "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4,
    "num_key_value_heads": 2, "intermediate_size": 64, "max_position_embeddings": 64,
    "initializer_range": 0.3,
}  # fmt: skip
PIPELINE = (
    "verify,dce,cse,split-experts{{cpu-experts={n}}},assign-streams{{max-streams=2}},"
    "split-backends,insert-sync,analyze-lifetimes,plan-memory,check-races"
)


def _model(name: str) -> Any:
    torch.manual_seed(0)
    if name == "mixtral":  # 4 experts; softmax, top 2, renormalised
        config = transformers.MixtralConfig(**SMALL, num_local_experts=4, num_experts_per_tok=2)
    else:  # 8 experts of width 32, renormalised
        config = transformers.Qwen3MoeConfig(
            **SMALL, head_dim=16, num_experts=8, num_experts_per_tok=2, moe_intermediate_size=32,
            norm_topk_prob=True,
        )  # fmt: skip
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    model.generation_config.eos_token_id = None
    model.generation_config.pad_token_id = 0
    return model


@pytest.fixture(scope="module", params=[("mixtral", 1), ("qwen3_moe", 3)])
def imported(request: pytest.FixtureRequest) -> tuple[Any, hf_generate.Steps, str]:
    name, cpu_experts = request.param
    model = _model(name)
    steps = hf_generate.import_steps(model, PROMPT, PROMPT + NEW)
    return model, steps, PIPELINE.format(n=cpu_experts)


def _assert_equal(got: dict[str, Any], want: dict[str, np.ndarray]) -> None:
    for name, value in want.items():
        assert np.asarray(got[name]).tobytes() == value.tobytes(), name


def test_both_steps_equal_the_reference_in_any_interleaving(imported) -> None:  # type: ignore[no-untyped-def]
    model, steps, pipeline = imported
    prefill = og.compile(steps.prefill, pipeline, target="cpu")
    layers = model.config.num_hidden_layers
    parts = [n for n in prefill.graph.nodes if n.op == "moe"]
    assert len(parts) == 2 * layers
    assert sorted(str(n.ann.backend) for n in parts) == ["cpu"] * layers + ["cuda"] * layers
    host = [w for w in prefill.graph.weights if w.placement == "host"]
    assert len(host) == 2 * layers  # each layer's gate_up and down pieces
    assert host_device_waits(prefill.graph) == min_host_device_syncs(prefill.graph) == 2 * layers
    prompt = np.random.default_rng(1).integers(0, 64, (1, PROMPT))
    feed = hf_generate._prefill_feed(prompt)
    want = run_reference(steps.prefill, feed, steps.prefill_weights)
    for seed in (None, 0, 1):
        _assert_equal(prefill.run(feed, steps.prefill_weights, seed=seed), want)
    names = steps.prefill.output_names()
    step = {
        "input_ids": np.array([[int(np.argmax(want[names[0]][0, -1]))]], np.int64),
        "cache_position": np.array([PROMPT], np.int64),
        **dict(zip(steps.cache_inputs, (want[n] for n in names[1:]))),
    }
    decode = og.compile(steps.decode, pipeline, target="cpu")
    assert any(n.op == "moe" and n.ann.backend == "cpu" for n in decode.graph.nodes)
    want = run_reference(steps.decode, step, steps.decode_weights)
    for seed in (None, 2):
        _assert_equal(decode.run(step, steps.decode_weights, seed=seed), want)


def test_greedy_tokens_equal_transformers(imported) -> None:  # type: ignore[no-untyped-def]
    model, steps, pipeline = imported
    prefill = og.compile(steps.prefill, pipeline, target="cpu")
    decode = og.compile(steps.decode, pipeline, target="cpu")
    prompt = np.random.default_rng(3).integers(0, 64, (1, PROMPT))
    out = prefill.run(hf_generate._prefill_feed(prompt), steps.prefill_weights)
    names = steps.prefill.output_names()
    caches = dict(zip(steps.cache_inputs, (out[n] for n in names[1:])))
    tokens = [int(np.argmax(out[names[0]][0, -1]))]
    while len(tokens) < NEW:
        feed = {
            "input_ids": np.array([[tokens[-1]]], np.int64),
            "cache_position": np.array([PROMPT + len(tokens) - 1], np.int64),
            **caches,
        }
        out = decode.run(feed, steps.decode_weights)
        caches = {name: out[steps.cache_outputs[name]] for name in steps.cache_inputs}
        tokens.append(int(np.argmax(out[steps.logits][0, -1])))
    assert tokens == hf_generate.reference_tokens(model, prompt, NEW)
    assert len(set(tokens)) > 2
