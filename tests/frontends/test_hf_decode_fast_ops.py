"""A Hugging Face Llama decode step, with transformers' SDPA attention and with its eager attention
(products, an additive mask from the position, softmax), imported: both become `attention` over
`kv_len` keys, the repeated kv heads are read by `attention` directly, every projection ends in a fused product after the default
pipeline (transpose-weights stores nn.Linear's weights transposed), and the compiled step still
equals transformers' logits and updated caches."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the Hugging Face tests need PyTorch")
pytest.importorskip("transformers", reason="the Hugging Face tests need transformers")

import optgraph as og
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from tests.frontends.numerics import assert_matches, ops_of

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import hf_generate

SIZES = ["--layers", "2", "--hidden", "64", "--heads", "8", "--kv-heads", "2", "--vocab", "96"]
MAX_LEN = 16


@pytest.fixture(scope="module", params=["sdpa", "eager"])
def step(request: pytest.FixtureRequest) -> tuple[object, og.Graph, dict[str, np.ndarray]]:
    model = hf_generate.build_model(hf_generate._parse([*SIZES, "--attention", request.param]))
    config = model.config
    caches = [
        torch.zeros(1, config.num_key_value_heads, MAX_LEN, 8)
        for _ in range(2 * config.num_hidden_layers)
    ]
    args = (torch.zeros(1, 1, dtype=torch.int64), torch.tensor([5]), *caches)
    graph, weights = og.from_torch(hf_generate.DecodeStep(model, MAX_LEN), args)
    return model, graph, weights


def test_repeated_kv_heads_are_read_directly_by_attention(step) -> None:  # type: ignore[no-untyped-def]
    _, graph, _ = step
    ops = ops_of(graph)
    assert ops.count("attention") == 2 and "expand" not in ops and "softmax" not in ops
    types = graph.value_types()
    for node in graph.nodes:
        if node.op == "attention":
            assert len(node.operands) == 4 and node.attrs.get("causal"), "kv_len, no mask"
            q, k = types[node.operands[0]], types[node.operands[1]]
            assert (q.shape[1], k.shape[1]) == (8, 2), "4 query heads share each kv head"


def test_every_projection_is_a_fused_product_after_the_default_pipeline(step) -> None:  # type: ignore[no-untyped-def]
    _, graph, _ = step
    compiled = run_pipeline(graph, DEFAULT_PIPELINE)
    assert not any(n.op == "matmul" for n in compiled.nodes), "no product left to cuBLAS"
    fused_products = [
        n for n in compiled.nodes
        if n.op == "fused" and n.body is not None and any(b.op == "matmul" for b in n.body.nodes)
    ]  # fmt: skip
    assert len(fused_products) == 2 * 7 + 1  # q, k, v, o, gate, up, down a layer; the head
    transposed = [w for w in compiled.weights if w.ann.layout == "transposed"]
    assert len(transposed) == 2 * 7 + 1


def test_the_step_equals_transformers(step) -> None:  # type: ignore[no-untyped-def]
    model, graph, weights = step
    rng = np.random.default_rng(0)
    types = graph.value_types()
    cache_names = [i.name for i in graph.inputs[2:]]
    inputs = {"input_ids": np.array([[17]]), "cache_position": np.array([9])}
    inputs.update({n: rng.standard_normal(types[n].shape).astype(np.float32) for n in cache_names})
    tensors = {k: torch.from_numpy(v.copy()) for k, v in inputs.items()}
    with torch.no_grad():
        logits = hf_generate.DecodeStep(model, MAX_LEN)(  # type: ignore[arg-type]
            tensors["input_ids"], tensors["cache_position"], *(tensors[n] for n in cache_names)
        )
    from optgraph.codegen.plan.in_place_outputs import in_place_candidates

    updated = {out: tensors[src].numpy() for out, src in in_place_candidates(graph).items()}
    others = [n for n in graph.output_names() if n not in updated]
    assert len(others) == 1
    updated[others[0]] = logits.numpy()
    assert_matches(graph, weights, inputs, [updated[n] for n in graph.output_names()])
