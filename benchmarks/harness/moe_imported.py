"""bench_split.py's imported model (`--model qwen3moe`): transformers' Qwen3-MoE decode step,
built from a config with random weights and imported with `og.from_torch` (its experts raised to
the `moe` op), every expert in host memory on the CPU (`split-experts{cpu-moe=LAYERS}`: each
layer's whole stacks `host`), everything else on the GPU.

Sizes are Qwen3-30B-A3B's (hidden 2048, 32 query and 4 KV heads of 128, 128 experts of width
768, top 8, renormalised) but for the layers (`--layers`, 48 in the real model), the vocabulary
(`--vocab`) and the context (`--cache-len`); `--qwen3moe-hidden`, `-experts` and `-expert-ffn`
override theirs (a quick look on a small machine). f32 weights, the CPU experts NumPy products;
`--qwen3moe-expert-dtype q4_k` (or q8_0, ...) stores the expert stacks as random valid blocks of
that type (a Q4_K_M file's experts), which the CPU runs with its C kernels, never decoding a
whole expert. The import is done once a process (`imported`).
"""

from __future__ import annotations

import argparse
import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from optgraph.ir.graph import Graph
from optgraph.passes.manager import run_pipeline

QWEN3_30B_A3B = {
    "hidden_size": 2048, "num_attention_heads": 32, "num_key_value_heads": 4, "head_dim": 128,
    "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
    "intermediate_size": 6144, "norm_topk_prob": True, "rms_norm_eps": 1e-6,
}  # fmt: skip
OVERRIDES = {
    "hidden": "hidden_size",
    "experts": "num_experts",
    "expert_ffn": "moe_intermediate_size",
}
PROMPT = 4  # the prefill the import also traces (unused here)


@dataclass(frozen=True)
class ImportedMoe:
    """The decode step, its weights and where its caches go."""

    source: Graph
    weights: dict[str, np.ndarray]
    cache_inputs: tuple[str, ...]
    cache_outputs: dict[str, str]  # cache input -> its updated value's output
    logits: str


def config_values(args: argparse.Namespace) -> dict[str, Any]:
    """Qwen3-30B-A3B's sizes with `--layers`, `--vocab`, `--cache-len` and the overrides."""
    values = dict(QWEN3_30B_A3B)
    for option, key in OVERRIDES.items():
        given = getattr(args, f"qwen3moe_{option}", None)
        if given is not None:
            values[key] = given
    if values["hidden_size"] != QWEN3_30B_A3B["hidden_size"]:
        values["num_attention_heads"] = max(1, values["hidden_size"] // 128)
        values["num_key_value_heads"] = min(4, values["num_attention_heads"])
    values.update(
        num_hidden_layers=args.layers,
        vocab_size=args.vocab,
        max_position_embeddings=args.cache_len,
    )
    return values


@functools.lru_cache(maxsize=2)
def _import(key: tuple[tuple[str, Any], ...], context: int) -> ImportedMoe:
    import torch
    import transformers

    sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
    import hf_generate

    torch.manual_seed(0)
    config = transformers.Qwen3MoeConfig(**dict(key))
    config._attn_implementation = "eager"
    model = transformers.AutoModelForCausalLM.from_config(config).eval()
    with torch.no_grad():
        steps = hf_generate.import_steps(model, PROMPT, context)
    return ImportedMoe(
        steps.decode,
        steps.decode_weights,
        tuple(steps.cache_inputs),
        dict(steps.cache_outputs),
        steps.logits,
    )


def imported(args: argparse.Namespace) -> ImportedMoe:
    key = tuple(sorted(config_values(args).items()))
    return _stored(key, args.cache_len, getattr(args, "qwen3moe_expert_dtype", "f32"))


@functools.lru_cache(maxsize=2)
def _stored(key: tuple[tuple[str, Any], ...], context: int, dtype: str) -> ImportedMoe:
    model = _import(key, context)
    return model if dtype == "f32" else _quantized(model, dtype)


def _quantized(model: ImportedMoe, dtype: str) -> ImportedMoe:
    """`model` with every expert stack stored as `dtype` blocks (random valid blocks of the
    stack's spread: a Q4_K_M file's experts), the rest as it was."""
    from dataclasses import replace

    from optgraph.ir.graph import TensorType
    from optgraph.ir.verify import verify
    from optgraph.reference.dequantize import random_blocks

    stacks = {o for n in model.source.nodes if n.op == "moe" for o in n.operands[2:]}
    rng = np.random.default_rng(2)
    weights = dict(model.weights)
    retyped = []
    for w in model.source.weights:
        if w.name in stacks:
            t = TensorType(dtype, w.type.shape)
            spread = float(np.std(weights[w.name]))
            weights[w.name] = random_blocks(rng, t, spread)
            w = replace(w, type=t)
        retyped.append(w)
    source = replace(model.source, weights=tuple(retyped))
    verify(source)
    return replace(model, source=source, weights=weights)


def plan_imported(args: argparse.Namespace, split: str, gpu: str) -> tuple[Graph, Graph, Graph]:
    """(source, split program, all-GPU program): `split` with `split-experts` first: every moe
    layer's experts on the host, or with `--qwen3moe-cpu-experts N` the last N of each."""
    source = imported(args).source
    n = getattr(args, "qwen3moe_cpu_experts", None)
    placement = f"cpu-moe={args.layers}" if n is None else f"cpu-experts={n}"
    cpu_moe = f"split-experts{{{placement}}},"
    return (
        source,
        run_pipeline(source, split.replace("cse,", "cse," + cpu_moe, 1)),
        run_pipeline(source, gpu),
    )


def step_arrays(cp: Any, args: argparse.Namespace) -> tuple[dict[str, Any], dict[str, Any]]:
    """(inputs, out) of one decode step at position `--cache-len` / 2: the caches random on the
    device, updated into device `out` arrays; the token and position NumPy."""
    model = imported(args)
    types = model.source.value_types()
    rng = np.random.default_rng(1)
    inputs: dict[str, Any] = {
        "input_ids": np.array([[1]], np.int64),
        "cache_position": np.array([args.cache_len // 2], np.int64),
    }
    out: dict[str, Any] = {}
    for name in model.cache_inputs:
        shape = types[name].shape
        inputs[name] = cp.asarray(rng.standard_normal(shape, dtype=np.float32))
        out[model.cache_outputs[name]] = cp.empty(shape, np.float32)
    return inputs, out


def program_weights(args: argparse.Namespace, graph: Graph) -> dict[str, Any]:
    """The imported weights for `graph`, with the expert pieces `split-experts` named cut from
    the whole stacks (views)."""
    from optgraph.passes.split_experts import expert_weights

    model = imported(args)
    names = {w.name for w in graph.weights}
    if names <= set(model.weights):
        return model.weights
    return dict(expert_weights(model.source, graph, model.weights))
