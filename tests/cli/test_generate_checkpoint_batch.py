"""A batch of prompts of a checkpoint directory generated together (`frontends/hf_row_steps.py`
through `api/batch_generation.py`): Llama, Mistral (a sliding window of 4, shorter than the
prompts), Gemma 2 (sliding and full layers, softcaps) and Mixtral (experts routed per row)
checkpoints written by `save_pretrained`,
three prompts of 15, 4 and 36 tokens (one prefill of 64 tokens a row) on the CPU in f32:

- `og.load(dir).generate([p1, p2, p3])` runs the batch steps (three rows a step) and gives each
  row transformers' greedy tokens for that prompt alone (`generate(do_sample=False)`, batch 1)
  and their text;
- the decode step writes each row's key and value at its own position (a `kv_cache_write` into
  each row's slice of the cache, the rows joined by a `concat`), and its masks, made from the
  per-row positions, are raised into attention's `kv_len` a row: one row's cache does not
  change another's logits, nor its own rows past its position;
- `optgraph generate --prompt-file` prints one block a prompt, in the file's order.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs PyTorch")
pytest.importorskip("transformers", reason="needs transformers")
pytest.importorskip("accelerate", reason="needs accelerate")

import optgraph as og
from optgraph.api.batch_generation import rows_inputs
from optgraph.cli.main import main
from tests.support import hf_checkpoints as hf

PROMPTS = (
    "the quick brown fox",
    "hello",
    "a model file in, text out, at the speed of the compiled step and more",
)
NEW = 24


@pytest.fixture(scope="module", params=("llama", "mistral", "gemma2", "mixtral"))
def checkpoint(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[str, Path, list[list[int]], list[str]]:
    """(architecture, directory, transformers' greedy tokens of each prompt alone, their text)."""
    arch = request.param
    directory = tmp_path_factory.mktemp("checkpoints") / arch

    def build() -> tuple[list[list[int]], list[str]]:
        from transformers import AutoTokenizer

        hf.write_checkpoint(directory, arch, hf.train_tokenizer())
        text_tokenizer = AutoTokenizer.from_pretrained(str(directory))
        reference = hf.load_reference(directory)
        tokens = [
            hf.reference_tokens(reference, text_tokenizer(p)["input_ids"], NEW) for p in PROMPTS
        ]
        return tokens, [text_tokenizer.decode(t, skip_special_tokens=True) for t in tokens]

    tokens, texts = hf.quietly(build)
    return arch, directory, tokens, texts


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("programs")


def test_each_row_gets_its_prompts_own_tokens(
    checkpoint: tuple[str, Path, list[list[int]], list[str]], programs: Path
) -> None:
    arch, directory, expected, texts = checkpoint
    model = og.load(directory, device="cpu", cache_dir=programs)
    lengths = [len(model.encode(p)) for p in PROMPTS]
    assert lengths == [15, 4, 36]  # rows of different lengths, past the window of 4
    assert model.batches
    results = hf.quietly(lambda: model.generate(list(PROMPTS), NEW, stop_at_eos=False))
    assert f"rows-{len(PROMPTS)}-decode" in model._steps  # the batch steps ran
    for row, (result, tokens, text) in enumerate(zip(results, expected, texts)):
        assert result.tokens == tokens, (arch, row)
        assert result.text == text
    assert len({tuple(t) for t in expected}) == 3 and all(len(set(t)) >= 4 for t in expected)


def test_the_decode_step_writes_and_reads_each_row_at_its_own_position(
    checkpoint: tuple[str, Path, list[list[int]], list[str]], programs: Path
) -> None:
    """Rows at positions 3, 9 and 0 of random caches: row 1's logits do not change when the
    other rows' caches do, nor when its own cache changes past its position (rows 0 and 2's
    do); each row's cache changes at its own position only."""
    _, directory, _, _ = checkpoint
    model = og.load(directory, device="cpu", cache_dir=programs)
    decode = hf.quietly(lambda: model.compiled("rows-3-decode"))
    step, weights = decode.step, model.weights(decode)
    assert {n.op for n in step.graph.nodes} >= {"kv_cache_write", "concat"}
    types = step.graph.value_types()
    attentions = [n for n in step.graph.nodes if n.op == "attention"]
    assert len(attentions) == 2  # the masks raised into a kv_len a row (raise_row_masks)
    for node in attentions:
        assert node.attrs.get("causal") and not node.attrs.get("masked")
        assert types[node.operands[3]].shape == (3,)
    rng = np.random.default_rng(0)
    caches = {n: rng.standard_normal(types[n].shape).astype(np.float32) for n in step.cache_inputs}
    feed = rows_inputs(step, [[7], [12], [40]], [3, 9, 0])
    out = decode.program.run({**feed, **caches}, weights, seed=None)
    other = {n: c.copy() for n, c in caches.items()}
    for c in other.values():
        c[[0, 2]] = rng.standard_normal(c[[0, 2]].shape)
    again = decode.program.run({**feed, **other}, weights, seed=None)
    logits, logits_again = (np.asarray(o[step.logits]).reshape(3, -1) for o in (out, again))
    assert np.array_equal(logits[1], logits_again[1])  # row 1 reads only its own cache
    assert not np.allclose(logits[0], logits_again[0])  # rows 0 and 2 read theirs
    later = {n: c.copy() for n, c in caches.items()}
    for c in later.values():  # row 1 (at 9) has not reached rows 10..: its mask hides them
        c[1, :, 10:] = rng.standard_normal(c[1, :, 10:].shape)
    hidden = decode.program.run({**feed, **later}, weights, seed=None)
    assert np.array_equal(np.asarray(hidden[step.logits]).reshape(3, -1), logits)
    for name, written in zip(step.cache_inputs, step.cache_outputs):
        changed = np.asarray(out[written]) != caches[name]
        for row, position in enumerate((3, 9, 0)):
            rows_changed = np.flatnonzero(changed[row].any(axis=(0, 2)))
            assert rows_changed.tolist() == [position], (name, row)


@pytest.mark.parametrize("checkpoint", ["llama"], indirect=True)  # the CLI path is shared
def test_prompt_file_prints_one_block_a_prompt_in_order(
    checkpoint: tuple[str, Path, list[list[int]], list[str]],
    programs: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, directory, expected, texts = checkpoint
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n")
    out = tmp_path / "out.json"
    argv = ["generate", str(directory), "--prompt-file", str(prompts), "--max-new-tokens"]
    argv += [str(NEW), "--ignore-eos", "--device", "cpu", "--json", str(out)]
    argv += ["--cache-dir", str(programs)]
    assert hf.quietly(lambda: main(argv)) == 0
    stdout, stderr = capsys.readouterr()
    assert stdout == "".join(text + "\n" for text in texts)
    results: list[dict[str, Any]] = json.loads(out.read_text())["results"]
    assert [r["tokens"] for r in results] == expected
    assert stderr.count(f"{NEW} new") == len(PROMPTS)


def test_a_model_making_masks_otherwise_is_refused_by_name() -> None:
    """A batch needs every mask made per row: a model whose forward calls a mask function the
    batch step does not replace (chunked attention here) is refused, naming it."""
    from types import SimpleNamespace

    import torch

    from optgraph.errors import OptGraphError
    from optgraph.frontends.hf_row_steps import _check_masks

    class ChunkedModel(torch.nn.Module):
        __module__ = "transformers.models.chunked.modeling_chunked"

        def forward(self, x: Any) -> Any:  # never run: its source is what is read
            return create_chunked_causal_mask(x) & create_causal_mask(x)  # type: ignore[name-defined] # noqa: F821

    class PlainModel(torch.nn.Module):
        __module__ = "transformers.models.chunked.modeling_chunked"

        def forward(self, x: Any) -> Any:
            return create_causal_mask(x)  # type: ignore[name-defined] # noqa: F821

    config = {"model_type": "chunked"}
    plain = SimpleNamespace(lm=PlainModel(), checkpoint=SimpleNamespace(config=config))
    _check_masks(plain)  # type: ignore[arg-type]
    chunked = SimpleNamespace(lm=ChunkedModel(), checkpoint=SimpleNamespace(config=config))
    with pytest.raises(OptGraphError, match="chunked: .*create_chunked_causal_mask is not"):
        _check_masks(chunked)  # type: ignore[arg-type]


def test_the_cuda_batch_steps_in_the_emulator_equal_the_reference(
    checkpoint: tuple[str, Path, list[list[int]], list[str]], programs: Path
) -> None:
    """What `--device cuda` runs for a batch, on the CPU: the batch decode step (rows at
    positions 3, 9 and 0 of random caches) and prefill lowered for CUDA, every kernel in the
    CPU emulator, against the reference interpreter."""
    from optgraph.codegen.lower_cuda import lower_cuda
    from optgraph.codegen.plan.in_place_outputs import in_place_candidates
    from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline
    from optgraph.reference.interpreter import nmse, run_reference
    from tests.support import cuda_emulator

    if not cuda_emulator.available():
        pytest.skip("the CUDA emulator needs g++")
    arch, directory, _, _ = checkpoint
    model = og.load(directory, device="cpu", cache_dir=programs)
    decode = hf.quietly(lambda: model.compiled("rows-3-decode"))
    prefill = hf.quietly(lambda: model.compiled("rows-3-prefill-16"))
    types = decode.step.graph.value_types()
    rng = np.random.default_rng(1)
    caches = {n: rng.standard_normal(types[n].shape).astype(np.float32)
              for n in decode.step.cache_inputs}  # fmt: skip
    cases = [
        (decode, {**rows_inputs(decode.step, [[7], [12], [40]], [3, 9, 0]), **caches}),
        (prefill, rows_inputs(prefill.step, [[1, 86, 260], [1, 5], [1, 2, 3, 4, 5]], [0] * 3)),
    ]
    for compiled, inputs in cases:
        graph, weights = compiled.step.graph, model.weights(compiled)
        planned = run_pipeline(graph, DEFAULT_PIPELINE)
        want = run_reference(graph, dict(inputs), weights)
        plan = lower_cuda(planned, in_place=in_place_candidates(planned))
        got = cuda_emulator.run_plan(plan, dict(inputs), weights, graph=planned)
        for name in graph.output_names():
            error = nmse(np.asarray(got[name], np.float64), np.asarray(want[name], np.float64))
            assert error <= 1e-10, f"{arch} {name}: nmse {error:.3g}"


@pytest.mark.parametrize("checkpoint", ["llama"], indirect=True)
def test_the_gpu_rows_loop_takes_the_checkpoints_batch_steps(
    checkpoint: tuple[str, Path, list[list[int]], list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    """runtime/cuda/rows_loop.py on the fake CuPy with a checkpoint's batch steps (positions
    per row, no kv_len input): both decode bindings and the prefill accepted, one replay and a
    sampling launch a row a step, each row's position advanced from its own length, the
    prefill's rows padded and read at each prompt's last token."""
    from optgraph.api.generation import CompiledStep, compile_step
    from optgraph.api.model_sources import open_source
    from optgraph.api.sampling import Sampling, sample
    from optgraph.codegen.lowering_options import LoweringOptions
    from tests.runtime import test_rows_loop_fake as fake_rows

    _, directory, _, _ = checkpoint
    source = open_source(directory)

    def compiled(bucket: int | None) -> tuple[CompiledStep, dict[str, Any]]:
        step = hf.quietly(lambda: source.batch_step(3, bucket, 64, "f32"))
        assert step is not None
        program = compile_step(step.graph, "default", "cuda", LoweringOptions())
        return CompiledStep(step, program), source.weights(step)

    steps = (compiled(None), compiled(16))
    prompts = [[1, 9, 3], [1], [1, 2, 3, 4, 5, 6]]
    settings, new = Sampling(temperature=1.0, top_k=20, seed=3), 8
    monkeypatch.setattr(fake_rows, "single", _TokenTypes(fake_rows.single))
    loop, bound, got, counts = fake_rows._run(monkeypatch, steps, prompts, new, settings, set())
    zeros = np.zeros(loop.vocab, np.float32)  # the fake computes no logits
    expected = [sample(zeros, settings, i) for i in range(new)]
    for b in range(3):
        assert [t for r, t in got if r == b] == expected, b
    assert counts == {"graphs": new, "stream": 1, "event": new, "samplers": 3 * new}
    lengths = np.array([len(p) for p in prompts])
    assert loop.position.get().tolist() == (lengths + new - 1).tolist()
    assert loop.prefill_iconf.get()[:, 0].tolist() == [
        (b * 16 + n - 1) * loop.vocab for b, n in enumerate(lengths)
    ]
    assert bound.inputs["input_ids"].get().reshape(3, 16)[1].tolist() == [1] + [0] * 15


class _TokenTypes:
    """`test_decode_loop_fake` with its sampling emulation writing 64-bit tokens (a checkpoint's
    `input_ids` are i64)."""

    def __init__(self, module: Any) -> None:
        self.module = module

    def _sampling_kernel(self, fake: Any, types: dict[str, Any]) -> None:
        self.module._sampling_kernel(fake, {**types, "token": np.int64})
