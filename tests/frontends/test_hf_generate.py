"""examples/hf_generate.py: a Hugging Face Llama's prefill and static-cache decode step imported,
compiled for the CPU, and generating the same tokens as transformers; the imported step against
transformers' logits; a safetensors checkpoint of the model loaded under its own names."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

torch = pytest.importorskip("torch", reason="the Hugging Face tests need PyTorch")
pytest.importorskip("transformers", reason="the Hugging Face tests need transformers")

import numpy as np
from safetensors.numpy import load_file
from safetensors.torch import save_file

import optgraph as og
from tests.frontends.numerics import assert_matches, ops_of

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import hf_generate

SIZES = ["--layers", "2", "--hidden", "32", "--heads", "4", "--kv-heads", "2", "--vocab", "64"]
PROMPT, NEW = 5, 32


@pytest.fixture(scope="module")
def imported() -> tuple[object, hf_generate.Steps]:
    model = hf_generate.build_model(hf_generate._parse(SIZES))
    return model, hf_generate.import_steps(model, PROMPT, PROMPT + NEW)


def _decode_case(
    model: object, steps: hf_generate.Steps, seed: int
) -> tuple[dict[str, np.ndarray], list[np.ndarray]]:
    """Decode inputs at position 7 over random caches, and transformers' outputs for them, in the
    graph's output order (the updated caches, then the logits)."""
    rng = np.random.default_rng(seed)
    types = steps.decode.value_types()
    caches = {n: rng.standard_normal(types[n].shape).astype(np.float32) for n in steps.cache_inputs}
    inputs = {"input_ids": np.array([[11]]), "cache_position": np.array([7]), **caches}
    step = hf_generate.DecodeStep(model, PROMPT + NEW)  # type: ignore[arg-type]
    tensors = {k: torch.from_numpy(v.copy()) for k, v in inputs.items()}
    with torch.no_grad():
        logits = step(tensors["input_ids"], tensors["cache_position"],
                      *(tensors[n] for n in steps.cache_inputs))  # fmt: skip
    updated = {steps.cache_outputs[n]: tensors[n].numpy() for n in steps.cache_inputs}
    updated[steps.logits] = logits.numpy()
    return inputs, [updated[n] for n in steps.decode.output_names()]


def test_generation_on_the_cpu_equals_transformers_token_for_token(imported) -> None:  # type: ignore[no-untyped-def]
    model, steps = imported
    prompt = np.random.default_rng(3).integers(0, 64, (1, PROMPT))
    tokens = hf_generate.generate_cpu(steps, prompt, NEW)
    expected = hf_generate.reference_tokens(model, prompt, NEW)
    assert len(tokens) == NEW and tokens == expected
    assert len(set(tokens)) > 4  # a real sequence, not one token repeated


def test_the_script_falls_back_to_the_cpu_without_a_gpu_and_exits_0(capsys, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    import optgraph.runtime.cuda.runner as cuda_runtime

    monkeypatch.setattr(cuda_runtime, "is_available", lambda: False)  # as on a machine with none
    argv = [*SIZES, "--device", "cuda", "--prompt-len", "4", "--new-tokens", "6", "--seed", "1"]
    status = hf_generate.main(argv)
    out = capsys.readouterr().out
    assert "--device cuda: target 'cuda': no usable CUDA GPU" in out and "on the CPU instead" in out
    assert status == 0 and "optgraph (cpu)" in out and "equal token for token" in out


def test_decode_step_raises_the_fast_ops_and_writes_each_cache_once(imported) -> None:  # type: ignore[no-untyped-def]
    _, steps = imported
    ops = ops_of(steps.decode)
    assert ops.count("kv_cache_write") == 4 and len(steps.cache_outputs) == 4
    assert ops.count("rope") == 4 and ops.count("rms_norm") == 5
    assert [i.name for i in steps.decode.inputs[:2]] == ["input_ids", "cache_position"]
    prefill_ops = ops_of(steps.prefill)
    assert prefill_ops.count("pad") == 4 and prefill_ops.count("rope") == 4


def test_decode_step_matches_transformers(imported) -> None:  # type: ignore[no-untyped-def]
    model, steps = imported
    inputs, expected = _decode_case(model, steps, seed=0)
    assert_matches(steps.decode, steps.decode_weights, inputs, expected)


def test_a_safetensors_checkpoint_loads_under_the_models_own_names(imported, tmp_path) -> None:  # type: ignore[no-untyped-def]
    _, steps = imported
    other = hf_generate.build_model(hf_generate._parse([*SIZES, "--seed", "9"]))
    path = tmp_path / "model.safetensors"
    save_file({k: v.contiguous() for k, v in other.state_dict().items()}, str(path))
    checkpoint = load_file(str(path))
    graph_weights = {w.name for w in steps.decode.weights}
    parameters = {name for name, _ in other.named_parameters()}
    assert parameters <= graph_weights  # every parameter under its state_dict name
    # What the file lacks are the import's own constants (masks, aranges), not parameters.
    weights = {n: checkpoint.get(n, steps.decode_weights[n]) for n in graph_weights}
    assert not (graph_weights - set(checkpoint)) & parameters
    inputs, expected = _decode_case(other, steps, seed=1)
    assert_matches(steps.decode, weights, inputs, expected)
    stale = og.compile(steps.decode, target="cpu").run(inputs, steps.decode_weights)
    assert not np.allclose(stale[steps.logits], expected[-1])  # the checkpoint was really used


def test_both_steps_cuda_kernels_in_the_emulator_match_the_reference(imported) -> None:  # type: ignore[no-untyped-def]
    """What `--device cuda` runs, on the CPU: the default pipeline, each decode cache updated in
    place (the in-place kv_cache_write kernel with i64 positions), every kernel emulated."""
    from optgraph.codegen.lower_cuda import lower_cuda
    from optgraph.codegen.plan.in_place_outputs import in_place_candidates
    from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
    from optgraph.reference.interpreter import nmse, run_reference
    from tests.support import cuda_emulator

    model, steps = imported
    decode_inputs, _ = _decode_case(model, steps, seed=2)
    prompt = np.random.default_rng(4).integers(0, 64, (1, PROMPT))
    cases = [
        (steps.decode, steps.decode_weights, decode_inputs, 4),
        (steps.prefill, steps.prefill_weights, hf_generate._prefill_feed(prompt), 0),
    ]
    for graph, weights, inputs, in_place in cases:
        planned = run_pipeline(graph, DEFAULT_PIPELINE)
        pairs = in_place_candidates(planned)
        assert len(pairs) == in_place
        want = run_reference(graph, dict(inputs), weights)
        plan = lower_cuda(planned, in_place=pairs)
        feed = {k: v.copy() for k, v in inputs.items()}
        got = cuda_emulator.run_plan(plan, feed, weights, graph=planned)
        for name in graph.output_names():
            error = nmse(np.asarray(got[name], np.float64), np.asarray(want[name], np.float64))
            assert error <= 1e-10, f"{graph.name} %{name}: nmse {error:.3g}"


def test_a_bf16_decode_step_matches_transformers() -> None:
    """bf16 weights and caches: transformers' eager softmax runs in float32 (`softmax(...,
    dtype=torch.float32)`: the operand is cast first) and bf16 constants fold through torch."""
    from optgraph.frontends.torch_values import to_numpy
    from optgraph.reference.interpreter import nmse

    model = hf_generate.build_model(hf_generate._parse([*SIZES, "--dtype", "bf16"]))
    steps = hf_generate.import_steps(model, PROMPT, PROMPT + NEW)
    types = steps.decode.value_types()
    torch.manual_seed(5)
    caches = {n: torch.randn(types[n].shape).bfloat16() for n in steps.cache_inputs}
    inputs = {"input_ids": np.array([[11]]), "cache_position": np.array([7])}
    inputs.update({n: to_numpy(c) for n, c in caches.items()})
    step = hf_generate.DecodeStep(model, PROMPT + NEW)
    with torch.no_grad():
        logits = step(torch.tensor([[11]]), torch.tensor([7]), *caches.values()).float().numpy()
    got = og.compile(steps.decode, target="cpu").run(inputs, steps.decode_weights)
    assert got[steps.logits].dtype.name == "bfloat16"
    error = nmse(np.asarray(got[steps.logits], np.float64), logits.astype(np.float64))
    assert error <= 1e-4, f"bf16 logits: nmse {error:.3g}"
    # transformers wrote row 7 into `caches` in place; the other rows are untouched. Row 7 is
    # within bf16's error: optgraph's rms_norm rounds once where transformers rounds the
    # normalized row and then its product with the weight, and its attention computes in f32
    # where eager attention rounds scores and probabilities to bf16.
    for name in steps.cache_inputs:
        updated = np.asarray(got[steps.cache_outputs[name]], np.float32)
        want = caches[name].float().numpy()
        kept = np.arange(want.shape[2]) != 7
        assert np.array_equal(updated[:, :, kept], want[:, :, kept])
        row, wanted = updated[:, :, 7].astype(np.float64), want[:, :, 7].astype(np.float64)
        assert nmse(row, wanted) <= 1e-3  # bf16's 8 bits, rounded differently in two layers
