"""`generate` on the GPU (runtime/cuda/decode_loop.py: the token chosen and fed back on the device):

- f32: the same 32 greedy tokens as transformers (checkpoints) and as transformers' GGUF loading
  (GGUF files), as on the CPU;
- f16: the same tokens as transformers' own f16 `generate()` on the GPU for the dense
  architectures; where the two part, the test shows it is a near tie: transformers' two largest
  logits at that step (on the common prefix) within `F16_TIE` of each other;
- seeded sampling: the same tokens run to run, and the CPU's where the logits agree (f32);
- the second `load` of a model takes its programs from the cache (no import);
- a batch of prompts (a GGUF file's, a checkpoint's) gives each row its own tokens.

Run on the GPU machine: `python -m pytest -q tests/gpu/test_gpu_generate.py -m gpu`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tests.support.gpu_support import require_gpu

pytestmark = pytest.mark.gpu
require_gpu()
torch = pytest.importorskip("torch")
pytest.importorskip("transformers")

from optgraph.api.generation import load
from tests.support import hf_checkpoints as hf

PROMPT = "the quick brown fox"
NEW = 32
F16_TIE = 0.05  # two logits this close (of values ~1..10) swap under f16 rounding
DENSE = ("llama", "llama3", "mistral", "qwen2", "qwen3", "phi3", "gpt_neox", "olmo2", "stablelm")


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return hf.train_tokenizer()


@pytest.fixture(scope="module")
def checkpoints(tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("checkpoints")
    return {
        arch: hf.quietly(lambda a=arch: hf.write_checkpoint(root / a, a, tokenizer))
        for arch in hf.ARCHITECTURES
    }


def _reference(directory: Path, prompt: list[int], dtype: Any) -> tuple[Any, list[int]]:
    model = hf.quietly(lambda: hf.load_reference(directory)).to("cuda", dtype)
    with torch.no_grad():
        out = model.generate(
            torch.tensor([prompt], device="cuda"), do_sample=False, max_new_tokens=NEW,
            attention_mask=torch.ones(1, len(prompt), dtype=torch.int64, device="cuda"),
            eos_token_id=None, pad_token_id=0,
        )  # fmt: skip
    return model, [int(t) for t in out[0, len(prompt) :]]


@pytest.mark.parametrize("arch", sorted(hf.ARCHITECTURES))
def test_f32_greedy_tokens_equal_transformers(
    arch: str, checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    model = hf.quietly(lambda: load(checkpoints[arch], "cuda", dtype="f32", cache_dir=tmp_path))
    prompt = model.prompt_tokens(PROMPT)
    _, expected = _reference(checkpoints[arch], prompt, torch.float32)
    result = model.generate(prompt, NEW, stop_at_eos=False)
    model.close()
    assert result.tokens == expected


@pytest.mark.parametrize("arch", DENSE)
def test_f16_greedy_tokens_equal_transformers_f16_or_part_at_a_near_tie(
    arch: str, checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    model = hf.quietly(lambda: load(checkpoints[arch], "cuda", dtype="f16", cache_dir=tmp_path))
    prompt = model.prompt_tokens(PROMPT)
    reference, expected = _reference(checkpoints[arch], prompt, torch.float16)
    tokens = model.generate(prompt, NEW, stop_at_eos=False).tokens
    model.close()
    if tokens == expected:
        return
    first = next(i for i, (a, b) in enumerate(zip(tokens, expected)) if a != b)
    with torch.no_grad():
        ids = torch.tensor([prompt + expected[:first]], device="cuda")
        logits = reference(ids).logits[0, -1].float().cpu().numpy()
    top = np.sort(logits)[-2:]
    margin = float(top[1] - top[0])
    assert {tokens[first], expected[first]} <= set(np.argsort(logits)[-2:].tolist())
    assert margin <= F16_TIE, f"{arch}: token {first} differs with a margin of {margin:.3g}"


def test_seeded_sampling_is_reproducible_and_agrees_with_the_cpu(
    checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    settings = {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "seed": 17}
    gpu = hf.quietly(lambda: load(checkpoints["llama"], "cuda", dtype="f32", cache_dir=tmp_path))
    first = gpu.generate(PROMPT, NEW, stop_at_eos=False, **settings).tokens
    second = gpu.generate(PROMPT, NEW, stop_at_eos=False, **settings).tokens
    other = gpu.generate(PROMPT, NEW, stop_at_eos=False, **{**settings, "seed": 18}).tokens
    gpu.close()
    cpu = hf.quietly(lambda: load(checkpoints["llama"], "cpu", cache_dir=tmp_path))
    on_cpu = cpu.generate(PROMPT, NEW, stop_at_eos=False, **settings).tokens
    assert first == second and first != other
    assert first == on_cpu  # f32 logits within a few ulps: the same draws choose the same


def test_a_second_load_takes_the_programs_from_the_cache(
    checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    first = hf.quietly(lambda: load(checkpoints["qwen2"], "cuda", dtype="f16", cache_dir=tmp_path))
    first.prepare(8)
    tokens = first.generate(PROMPT, 8, stop_at_eos=False).tokens
    first.close()
    second = load(checkpoints["qwen2"], "cuda", dtype="f16", cache_dir=tmp_path)
    second.prepare(8)
    assert second.cache.misses == 0 and second.cache.hits == 2  # decode and prefill-16
    assert second.generate(PROMPT, 8, stop_at_eos=False).tokens == tokens
    second.close()


def test_gguf_files_generate_transformers_tokens_on_the_gpu(tmp_path: Path, tokenizer: Any) -> None:
    pytest.importorskip("gguf")
    from tests.cli.test_generate_gguf import write_file
    from tests.frontends import gguf_models

    for arch in ("llama", "qwen3", "gemma2"):
        path = hf.quietly(lambda a=arch: write_file(a, tokenizer, tmp_path / f"{a}.gguf"))
        model = load(path, "cuda", dtype="f32", cache_dir=tmp_path)
        prompt = model.prompt_tokens(PROMPT)
        reference = hf.quietly(lambda p=path: gguf_models.load_with_transformers(p))
        expected = gguf_models.greedy_reference(reference, prompt, NEW)
        assert model.generate(prompt, NEW, stop_at_eos=False).tokens == expected, arch
        model.close()


def test_a_batch_of_gguf_prompts_gives_each_its_own_tokens_on_the_gpu(
    tmp_path: Path, tokenizer: Any
) -> None:
    """runtime/cuda/rows_loop.py: three prompts of different lengths in one batch give each row
    transformers' greedy tokens and what it gives alone on the GPU; seeded rows what they draw on
    the CPU's batch; a second batch after the first the same (the loop's state reset)."""
    pytest.importorskip("gguf")
    from tests.cli.test_generate_gguf import write_file
    from tests.frontends import gguf_models

    prompts = ["the quick brown fox", "fox", "the lazy dog jumps over the quick brown fox again"]
    path = hf.quietly(lambda: write_file("qwen2", tokenizer, tmp_path / "qwen2.gguf"))
    model = load(path, "cuda", dtype="f32", cache_dir=tmp_path)
    reference = hf.quietly(lambda: gguf_models.load_with_transformers(path))
    expected = [
        gguf_models.greedy_reference(reference, model.prompt_tokens(p), NEW) for p in prompts
    ]
    rows = [r.tokens for r in model.generate(prompts, NEW, stop_at_eos=False)]
    assert f"rows-{len(prompts)}-decode" in model._steps
    assert rows == expected
    assert [model.generate(p, NEW, stop_at_eos=False).tokens for p in prompts] == expected
    settings = {"temperature": 0.8, "top_k": 40, "top_p": 0.9, "seed": 17, "stop_at_eos": False}
    drawn = [r.tokens for r in model.generate(prompts, NEW, **settings)]
    assert [r.tokens for r in model.generate(prompts, NEW, stop_at_eos=False)] == expected
    model.close()
    cpu = load(path, "cpu", cache_dir=tmp_path)
    assert drawn == [r.tokens for r in cpu.generate(prompts, NEW, **settings)]


@pytest.mark.parametrize("arch", ["llama", "mistral", "mixtral"])
def test_a_batch_of_checkpoint_prompts_gives_each_its_own_tokens_on_the_gpu(
    arch: str, checkpoints: dict[str, Path], tmp_path: Path
) -> None:
    """A checkpoint's batch steps (frontends/hf_row_steps.py) in runtime/cuda/rows_loop.py:
    three prompts of different lengths in one batch give each row transformers' greedy tokens
    for its prompt alone (f32)."""
    prompts = ["the quick brown fox", "hello", "a model file in, text out, at the speed of it"]
    model = hf.quietly(lambda: load(checkpoints[arch], "cuda", dtype="f32", cache_dir=tmp_path))
    reference = hf.quietly(lambda: hf.load_reference(checkpoints[arch]))
    expected = [hf.reference_tokens(reference, model.prompt_tokens(p), NEW) for p in prompts]
    rows = [r.tokens for r in hf.quietly(lambda: model.generate(prompts, NEW, stop_at_eos=False))]
    assert f"rows-{len(prompts)}-decode" in model._steps
    model.close()
    assert rows == expected
