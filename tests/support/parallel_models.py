"""The Llama-like models the parallelizing passes are checked on, and the comparison they share.

`PARALLEL_MODELS`: name -> graph, the examples (llama_decode, gpt2_block, moe_block) and
`examples/gen_llama.py` outputs: grouped-query (8 query heads, 2 KV heads), plain multi-head, f16,
bf16, biases with tied embeddings, prefill, multi-token decode with batch 2, and a head width that
is not hidden / heads.

`compare(original, parallel, weights, seed)`: the reference interpreter of both on the same seeded
inputs (the parallel graph's weights and cache inputs cut by `shard_weights` and `shard_inputs`,
split outputs joined by `join_outputs`), as {output: nmse}, 0.0 where the arrays are
bit-identical.
"""

from __future__ import annotations

import numpy as np

import optgraph as og
from optgraph.ir.graph import Graph
from optgraph.passes.tensor_parallel import join_outputs, shard_inputs, shard_weights
from optgraph.reference.interpreter import nmse, random_inputs, random_weights, run_reference
from tests.cli.test_examples import EXAMPLES, gen_llama

GEN_VARIANTS: dict[str, dict[str, object]] = {
    "gqa": {"hidden": 128, "heads": 8, "kv_heads": 2, "ffn": 256, "vocab": 256},
    "mha": {"heads": 4, "kv_heads": 4},
    "f16": {"dtype": "f16", "hidden": 128, "heads": 8, "kv_heads": 4},
    "bf16": {"dtype": "bf16"},
    "bias_tied": {"bias": "all", "tied_embeddings": True},
    "prefill": {"mode": "prefill", "seq": 4, "batch": 2},
    "decode_seq3_batch2": {"seq": 3, "batch": 2},
    "head_dim_32": {"head_dim": 32, "heads": 4, "kv_heads": 4},
}


def _models() -> dict[str, Graph]:
    models = {
        name: og.parse_file(EXAMPLES / f"{name}.ir")
        for name in ("llama_decode", "gpt2_block", "moe_block")
    }
    for name, options in GEN_VARIANTS.items():
        models[f"gen_{name}"] = og.parse(gen_llama.generate_llama(**options), f"gen_{name}")
    return models


PARALLEL_MODELS = _models()


def compare(original: Graph, parallel: Graph, seed: int = 0) -> dict[str, float]:
    inputs, weights = random_inputs(original, seed), random_weights(original, seed)
    want = run_reference(original, inputs, weights)
    pieces = shard_inputs(original, parallel, inputs)
    got = run_reference(parallel, pieces, shard_weights(original, parallel, weights))
    got = join_outputs(original, parallel, got)
    assert list(got) == list(want)
    out = {}
    for name, value in want.items():
        assert got[name].dtype == value.dtype and got[name].shape == value.shape, name
        same = got[name].tobytes() == value.tobytes()
        out[name] = 0.0 if same else nmse(got[name].astype(np.float64), value.astype(np.float64))
    return out


def dtype_of(graph: Graph) -> str:
    """The dtype of the model's first weight (its compute dtype)."""
    return graph.weights[0].type.dtype
