"""`optgraph generate CHECKPOINT-DIR` against transformers: for every architecture generate
supports, a random-weight checkpoint written by `save_pretrained` (with a locally trained BPE
tokenizer) generates the same 32 greedy tokens as `generate(do_sample=False)` on transformers'
own loading of the same directory, and the same decoded text, on the CPU in float32.

What `--device cuda` runs, on the CPU: for the architectures whose steps have their own ops
(sliding windows, Gemma's norms and softcaps, multi-query attention, learned positions, fused
projections), the same decode and prefill steps (from the program cache when the first test ran
in the same worker, else compiled here)
lowered for CUDA with the caches updated in place, every kernel in the CPU emulator, against the
reference interpreter."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="needs PyTorch")
pytest.importorskip("transformers", reason="needs transformers")
pytest.importorskip("accelerate", reason="needs accelerate")

from optgraph.cli.main import main
from tests.support import hf_checkpoints as hf

PROMPT = "the quick brown fox"  # 5 tokens with <s>: the 16-token prefill bucket
NEW = 32


EMULATED = ["mistral", "gemma3", "falcon", "gpt2", "phi3"]
MOE = ["mixtral", "qwen2_moe", "qwen3_moe"]  # raised to moe ops (gpt-oss's experts are not)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return hf.train_tokenizer()


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("programs")


@pytest.fixture(scope="module", params=sorted(hf.ARCHITECTURES))
def checkpoint(
    request: pytest.FixtureRequest, tokenizer: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, list[int], str]:
    """(architecture, directory, transformers' 32 greedy tokens, their decoded text)."""
    arch = request.param
    directory = tmp_path_factory.mktemp("checkpoints") / arch

    def build() -> tuple[list[int], str]:
        from transformers import AutoTokenizer

        hf.write_checkpoint(directory, arch, tokenizer)
        text_tokenizer = AutoTokenizer.from_pretrained(str(directory))
        prompt = text_tokenizer(PROMPT)["input_ids"]
        tokens = hf.reference_tokens(hf.load_reference(directory), prompt, NEW)
        return tokens, text_tokenizer.decode(tokens, skip_special_tokens=True)

    tokens, text = hf.quietly(build)
    return arch, directory, tokens, text


def test_greedy_tokens_and_text_equal_transformers(
    checkpoint: tuple[str, Path, list[int], str],
    programs: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    arch, directory, expected, text = checkpoint
    out = tmp_path / "out.json"
    argv = ["generate", str(directory), "--prompt", PROMPT, "--max-new-tokens", str(NEW)]
    argv += ["--device", "cpu", "--ignore-eos", "--json", str(out), "--cache-dir", str(programs)]
    assert hf.quietly(lambda: main(argv)) == 0
    result = json.loads(out.read_text())["results"][0]
    assert result["tokens"] == expected, arch
    assert len(set(expected)) >= 8  # a real sequence, not one token repeated
    assert result["text"] == text
    stdout, stderr = capsys.readouterr()
    assert stdout == text + "\n"  # streamed piece by piece, the same text
    assert f"{len(result['prompt_ids'])} prompt tokens, {NEW} new" in stderr
    assert result["ttft_s"] > 0 and result["decode_tokens_per_s"] > 0


@pytest.mark.parametrize("checkpoint", EMULATED, indirect=True)
def test_the_cuda_steps_in_the_emulator_equal_the_reference(
    checkpoint: tuple[str, Path, list[int], str], programs: Path
) -> None:
    import numpy as np

    import optgraph as og
    from optgraph.api.generation import step_inputs
    from optgraph.codegen.lower_cuda import lower_cuda
    from optgraph.codegen.plan.in_place_outputs import in_place_candidates
    from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
    from optgraph.reference.interpreter import nmse, run_reference
    from tests.support import cuda_emulator

    if not cuda_emulator.available():
        pytest.skip("the CUDA emulator needs g++")
    arch, directory, _, _ = checkpoint
    model = og.load(directory, device="cpu", cache_dir=programs)
    decode, prefill = model.decode, model.prefill_for(5)  # from the cache if the worker has it
    rng = np.random.default_rng(1)
    types = decode.step.graph.value_types()
    caches = {n: rng.standard_normal(types[n].shape).astype(np.float32)
              for n in decode.step.cache_inputs}  # fmt: skip
    cases = [
        (decode, {**step_inputs(decode.step, [7], 9), **caches}, len(caches)),
        (prefill, step_inputs(prefill.step, [1, 86, 260, 223, 83], 0), 0),
    ]
    for compiled, inputs, in_place in cases:
        graph, weights = compiled.step.graph, model.weights(compiled)
        planned = run_pipeline(graph, DEFAULT_PIPELINE)
        pairs = in_place_candidates(planned)
        assert len(pairs) == in_place  # every decode cache written where the caller keeps it
        want = run_reference(graph, dict(inputs), weights)
        plan = lower_cuda(planned, in_place=pairs)
        feed = {k: v.copy() for k, v in inputs.items()}
        got = cuda_emulator.run_plan(plan, feed, weights, graph=planned)
        for name in graph.output_names():
            error = nmse(np.asarray(got[name], np.float64), np.asarray(want[name], np.float64))
            assert error <= 1e-10, f"{arch} {name}: nmse {error:.3g}"


@pytest.mark.parametrize("checkpoint", MOE, indirect=True)
def test_mixture_of_experts_steps_run_one_moe_op_a_layer_on_the_merged_experts(
    checkpoint: tuple[str, Path, list[int], str], programs: Path
) -> None:
    """The steps that gave transformers' tokens above compute each layer's experts with one moe
    op, over stacks merged from the checkpoint's one tensor an expert as transformers loads
    them."""
    import numpy as np

    import optgraph as og

    arch, directory, _, _ = checkpoint
    model = og.load(directory, device="cpu", cache_dir=programs)
    reference = hf.quietly(lambda: hf.load_reference(directory))
    loaded = dict(reference.named_parameters())
    prefill = model.prefill_for(5)
    assert prefill is not None
    for compiled in (model.decode, prefill):
        graph = compiled.step.graph
        moes = [node for node in graph.nodes if node.op == "moe"]
        assert len(moes) == 2, arch  # one a layer
        stacks = {name for node in moes for name in node.operands[2:]}
        assert stacks == set(compiled.step.merged_tensors)
        weights = model.weights(compiled)
        for name in stacks:
            assert np.array_equal(weights[name], loaded[name].detach().numpy()), name
