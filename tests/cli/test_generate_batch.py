"""A batch of prompts generated together (`api/batch_generation.py`): GGUF files of llama and
qwen2 (q/k/v biases) with a byte-level vocabulary, three prompts of different lengths on the
CPU in f32:

- `og.load(...).generate([p1, p2, p3])` runs the batch steps (three rows a step) and gives each
  row exactly the tokens of its prompt generated alone, and transformers' greedy tokens (its
  GGUF loading) and their text;
- seeded sampling: each row draws what its prompt draws alone (and not the greedy tokens);
- a row that ends (a stop token) yields no more while the others go on as they would alone;
- more prompts than a batch takes run in several batches, with the same tokens;
- `optgraph generate --prompt-file`: one block a prompt in the file's order on stdout, each
  prompt's figures on stderr, the tokens in `--json`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

torch = pytest.importorskip("torch", reason="needs PyTorch")
pytest.importorskip("transformers", reason="needs transformers")
pytest.importorskip("gguf", reason="needs the gguf package")

import optgraph as og
import tests.cli.test_generate_gguf as gguf_cli
from optgraph.api import generation
from optgraph.api.sampling import Sampling
from optgraph.cli.main import main
from tests.frontends import gguf_models
from tests.support import hf_checkpoints

PROMPTS = ("the quick brown fox", "fox", "the lazy dog jumps over the quick brown fox again")
NEW = 24


@pytest.fixture(scope="module", params=("llama", "qwen2"))
def batch_file(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Path, list[list[int]]]:
    """(GGUF file, transformers' greedy tokens of each prompt)."""
    arch = request.param
    tokenizer = hf_checkpoints.train_tokenizer()
    path = tmp_path_factory.mktemp("gguf") / f"{arch}.gguf"

    def build() -> list[list[int]]:
        from transformers import AutoTokenizer

        gguf_cli.write_file(arch, tokenizer, path)
        text_tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
        model = gguf_models.load_with_transformers(path)
        return [
            gguf_models.greedy_reference(model, text_tokenizer(p)["input_ids"], NEW)
            for p in PROMPTS
        ]

    return path, hf_checkpoints.quietly(build)


@pytest.fixture(scope="module")
def loaded(batch_file: tuple[Path, list[list[int]]]) -> Any:
    model = og.load(batch_file[0], device="cpu", cache_dir=False)
    yield model
    model.close()


def test_rows_are_their_prompts_alone_and_transformers(
    batch_file: tuple[Path, list[list[int]]], loaded: Any
) -> None:
    _, expected = batch_file
    lengths = [len(loaded.encode(p)) for p in PROMPTS]
    assert len(set(lengths)) == 3  # rows of different lengths, and prefill buckets alone
    assert len({generation.bucket_for(n, loaded.context) for n in lengths}) == 2
    results = loaded.generate(list(PROMPTS), NEW, stop_at_eos=False)
    assert f"rows-{len(PROMPTS)}-decode" in loaded._steps  # the batch steps ran
    alone = [loaded.generate(p, NEW, stop_at_eos=False) for p in PROMPTS]
    for row, (result, single, reference) in enumerate(zip(results, alone, expected)):
        assert result.tokens == single.tokens == reference, row
        assert result.text == single.text == loaded.tokenizer.decode(reference)
        assert result.prompt_tokens == single.prompt_tokens
        assert result.stats.new_tokens == NEW and result.stats.prompt_tokens == lengths[row]
    assert len({tuple(r.tokens) for r in results}) == 3


def test_seeded_rows_draw_what_they_draw_alone(loaded: Any) -> None:
    options = {"temperature": 1.5, "top_k": 40, "top_p": 0.95, "seed": 7, "stop_at_eos": False}
    results = loaded.generate(list(PROMPTS), NEW, **options)
    greedy = loaded.generate(list(PROMPTS), NEW, stop_at_eos=False)
    for result, prompt in zip(results, PROMPTS):
        assert result.tokens == loaded.generate(prompt, NEW, **options).tokens
    assert [r.tokens for r in results] != [g.tokens for g in greedy]


def test_a_row_that_ends_stops_while_the_others_go_on(
    batch_file: tuple[Path, list[list[int]]], loaded: Any
) -> None:
    _, expected = batch_file
    stop = {expected[1][3]}  # row 1's fourth token ends it (or an earlier one, if the same)
    prompts = [loaded.prompt_tokens(p) for p in PROMPTS]
    rows: list[list[int]] = [[], [], []]
    order = []
    for row, token in loaded._rows(prompts, NEW, Sampling(), stop):
        rows[row].append(token)
        order.append(row)
    for row, ids in enumerate(prompts):
        assert rows[row] == list(loaded._cpu_tokens(ids, NEW, Sampling(), stop)), row
    ended = len(rows[1])
    assert ended <= 4 and rows[1][-1] in stop
    assert max(len(r) for r in rows) > ended  # another row went on
    assert order.count(1) == ended and order.index(1) < len(order) - 1
    last_of_row_1 = len(order) - 1 - order[::-1].index(1)
    assert all(r != 1 for r in order[last_of_row_1 + 1 :])


def test_more_prompts_than_a_batch(
    batch_file: tuple[Path, list[list[int]]], loaded: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    _, expected = batch_file
    monkeypatch.setattr(generation, "MAX_BATCH", 2)  # batches of 2 rows, then 1
    results = loaded.generate(list(PROMPTS), NEW, stop_at_eos=False)
    assert [r.tokens for r in results] == expected
    assert "rows-2-decode" in loaded._steps


def test_the_cli_prints_one_block_a_prompt_in_order(
    batch_file: tuple[Path, list[list[int]]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    path, expected = batch_file
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("\n".join(PROMPTS) + "\n\n")
    out = tmp_path / "out.json"
    argv = ["generate", str(path), "--prompt-file", str(prompts), "--max-new-tokens", str(NEW)]
    argv += ["--device", "cpu", "--ignore-eos", "--json", str(out), "--no-cache"]
    assert main(argv) == 0
    captured = capsys.readouterr()
    results = json.loads(out.read_text())["results"]
    assert [r["tokens"] for r in results] == expected
    assert captured.out == "".join(r["text"] + "\n" for r in results)
    assert captured.err.count("new: first token") == len(PROMPTS)


def test_batch_steps_come_from_the_program_cache(
    batch_file: tuple[Path, list[list[int]]], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path, expected = batch_file
    first = og.load(path, device="cpu", cache_dir=tmp_path)
    assert [r.tokens for r in first.generate(list(PROMPTS), NEW, stop_at_eos=False)] == expected
    first.close()
    entries = sorted(p.name for p in tmp_path.rglob("*") if p.is_file())
    assert len(entries) >= 2  # the batch prefill and decode programs

    def no_build(self: Any, kind: str) -> Any:
        raise AssertionError(f"{kind} built again")

    monkeypatch.setattr(generation.GenerationModel, "_build", no_build)
    second = og.load(path, device="cpu", cache_dir=tmp_path)
    assert [r.tokens for r in second.generate(list(PROMPTS), NEW, stop_at_eos=False)] == expected
    second.close()
    assert sorted(p.name for p in tmp_path.rglob("*") if p.is_file()) == entries
