"""A transformers Llama decode step in f16 / bf16 imports as the fast ops the f32 one does: the
RMSNorm computed in f32 between casts is `rms_norm`, the rope tables computed in f32 and cast to
f16 are `rope`, eager attention is `attention`, and the cache positions come first, so the step
lowers to as many CUDA launches as the same step written by `examples/gen_llama.py`; the compiled
step stays within half precision's error of transformers."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the Hugging Face tests need PyTorch")
pytest.importorskip("transformers", reason="the Hugging Face tests need transformers")

import optgraph as og
from optgraph.codegen.lower_cuda import lower_cuda
from optgraph.codegen.plan.in_place_outputs import in_place_candidates
from optgraph.codegen.plan.steps import KernelStep
from optgraph.frontends.torch_values import to_numpy
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
from optgraph.reference.interpreter import nmse, run_reference
from tests.frontends.numerics import ops_of

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
sys.path.insert(0, str(EXAMPLES))
import hf_generate
from gen_llama import generate_llama

LAYERS, HIDDEN, HEADS, KV_HEADS, FFN, VOCAB, MAX_LEN = 2, 128, 4, 2, 256, 96, 32


def _step(dtype: str, attention: str) -> tuple[object, og.Graph, dict[str, np.ndarray]]:
    sizes = [
        "--layers", str(LAYERS), "--hidden", str(HIDDEN), "--heads", str(HEADS),
        "--kv-heads", str(KV_HEADS), "--ffn", str(FFN), "--vocab", str(VOCAB),
    ]  # fmt: skip
    model = hf_generate.build_model(
        hf_generate._parse([*sizes, "--dtype", dtype, "--attention", attention])
    )
    # `.to(f16)` rounded the rope's inv_freq buffer to f16 (frequencies no theta has); a model
    # loaded with `from_pretrained(dtype=...)` keeps it in f32, as the rotary module makes it.
    model.model.rotary_emb = type(model.model.rotary_emb)(config=model.config)
    head_dim = HIDDEN // HEADS
    torch_dtype = hf_generate.TORCH_DTYPES[dtype]
    caches = [
        torch.zeros(1, KV_HEADS, MAX_LEN, head_dim, dtype=torch_dtype) for _ in range(2 * LAYERS)
    ]
    args = (torch.zeros(1, 1, dtype=torch.int64), torch.tensor([5]), *caches)
    graph, weights = og.from_torch(hf_generate.DecodeStep(model, MAX_LEN), args)
    return model, graph, weights


def _launches(graph: og.Graph) -> int:
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    plan = lower_cuda(planned, in_place=in_place_candidates(planned))
    return sum(1 for s in plan.steps if isinstance(s, KernelStep))


@pytest.mark.parametrize(("dtype", "attention"), [("f16", "eager"), ("bf16", "sdpa")])
def test_a_half_precision_step_is_the_fast_ops(dtype: str, attention: str) -> None:
    _, graph, _ = _step(dtype, attention)
    ops = ops_of(graph)
    assert ops.count("rms_norm") == 2 * LAYERS + 1 and ops.count("rope") == 2 * LAYERS
    assert ops.count("attention") == LAYERS
    assert not {"cast", "cos", "sin", "neg", "softmax", "rsqrt"} & set(ops), ops


def test_the_imported_f16_step_launches_as_often_as_the_generated_one() -> None:
    """Layer 0's q rope folds into the q product only in the rope's own bytes (k's rotated
    value sits over the product's): `qkv_folds.rope_bytes_free`."""
    _, graph, _ = _step("f16", "eager")
    text = generate_llama(
        layers=LAYERS, hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, ffn=FFN, vocab=VOCAB,
        dtype="f16", batch=1, seq=1, cache_len=MAX_LEN, mode="decode",
    )  # fmt: skip
    assert _launches(graph) == _launches(og.parse(text))


def test_the_f16_step_stays_within_half_precision_of_transformers() -> None:
    model, graph, weights = _step("f16", "eager")
    types = graph.value_types()
    cache_names = [i.name for i in graph.inputs[2:]]
    torch.manual_seed(3)
    caches = {n: (torch.randn(types[n].shape) * 0.5).half() for n in cache_names}
    inputs = {"input_ids": np.array([[17]]), "cache_position": np.array([9])}
    inputs.update({n: to_numpy(c) for n, c in caches.items()})
    with torch.no_grad():
        logits = hf_generate.DecodeStep(model, MAX_LEN)(  # type: ignore[arg-type]
            torch.tensor([[17]]), torch.tensor([9]), *caches.values()
        )
    got = og.compile(graph, target="cpu").run(inputs, weights)
    (name,) = [n for n in graph.output_names() if types[n].shape[-1] == VOCAB]
    error = nmse(np.asarray(got[name], np.float64), logits.float().numpy().astype(np.float64))
    assert error <= 1e-4, f"f16 logits: nmse {error:.3g}"


def test_the_f16_steps_cuda_kernels_in_the_emulator_match_the_reference() -> None:
    """What the GPU runs (the folds above included), emulated on the CPU, against the reference
    interpreter: the same f16 roundings, so only summation order differs."""
    from tests.support import cuda_emulator

    _, graph, weights = _step("f16", "eager")
    planned = run_pipeline(graph, DEFAULT_PIPELINE)
    pairs = in_place_candidates(planned)
    rng = np.random.default_rng(6)
    types = graph.value_types()
    inputs = {"input_ids": np.array([[23]]), "cache_position": np.array([11])}
    for decl in graph.inputs[2:]:
        inputs[decl.name] = rng.standard_normal(types[decl.name].shape).astype(np.float16)
    want = run_reference(graph, {k: v.copy() for k, v in inputs.items()}, weights)
    plan = lower_cuda(planned, in_place=pairs)
    got = cuda_emulator.run_plan(
        plan, {k: v.copy() for k, v in inputs.items()}, weights, graph=planned
    )
    for name in graph.output_names():
        error = nmse(np.asarray(got[name], np.float64), np.asarray(want[name], np.float64))
        assert error <= 1e-6, f"%{name}: nmse {error:.3g}"


class PrefillLogits(torch.nn.Module):
    """A prompt's logits, the positions transformers' own (a fixed-length prompt's export): its
    rope tables and causal mask fold to constants (the tables through a cast to f16)."""

    def __init__(self, model: torch.nn.Module) -> None:
        super().__init__()
        self.model, self.lm_head = model.model, model.lm_head  # type: ignore[union-attr]

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.lm_head(self.model(input_ids=input_ids, use_cache=False).last_hidden_state)


@pytest.mark.parametrize("length", [8, 512])
def test_an_f16_prefill_with_folded_tables_is_the_fast_ops_and_launches_as_generated(
    length: int,
) -> None:
    """512 positions: the f32 tables' angles are rounded to 6e-5 there (`table_tolerance`)."""
    model, _, _ = _step("f16", "eager")
    prefill = PrefillLogits(model)  # type: ignore[arg-type]
    ids = torch.tensor(np.random.default_rng(length).integers(0, VOCAB, (1, length)))
    graph, weights = og.from_torch(prefill, (ids,))
    ops = ops_of(graph)
    assert ops.count("rope") == 2 * LAYERS and ops.count("attention") == LAYERS
    assert not {"cast", "cos", "neg", "softmax", "concat"} & set(ops), ops
    for node in graph.nodes:
        if node.op == "attention":
            assert node.attrs.get("causal") and len(node.operands) == 3, "causal, no mask"
    text = generate_llama(
        layers=LAYERS, hidden=HIDDEN, heads=HEADS, kv_heads=KV_HEADS, ffn=FFN, vocab=VOCAB,
        dtype="f16", batch=1, seq=ids.shape[1], cache_len=MAX_LEN, mode="prefill",
    )  # fmt: skip
    assert _launches(graph) == _launches(og.parse(text))
    with torch.no_grad():
        want = prefill(ids).float().numpy().astype(np.float64)
    got = og.compile(graph, target="cpu").run({"input_ids": ids.numpy()}, weights)
    error = nmse(np.asarray(got[graph.output_names()[0]], np.float64), want)
    assert error <= 1e-4, f"f16 prefill logits: nmse {error:.3g}"
