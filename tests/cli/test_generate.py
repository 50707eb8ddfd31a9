"""`optgraph generate` and `og.load` beyond the per-architecture token checks, on one tiny Llama
checkpoint (and copies of it made bad in one way each):

- `og.load(...).stream` yields what `generate` returns, a list of prompts a list (together,
  each as alone); seeded sampling is reproducible, a seed changes it, and the CPU loop follows
  `api/sampling.py` step by step;
- `--chat` renders exactly what transformers' `apply_chat_template` renders (the checkpoint's own
  template, and one using namespace, tojson, loop, filters and raise_exception);
- the program cache: a second process's load compiles nothing and imports no torch; an entry
  cut short or damaged is reported and rebuilt whole; no temporary file is left behind;
- a sharded checkpoint (index + shards) generates what the single file does;
- an `.ir` decode step with `--weights` generates the reference interpreter's greedy tokens;
- `--prompt-file` runs each line; `--tokens` without a tokenizer prints ids;
- bad input: a missing shard, a missing tensor, a tensor of the wrong shape, an unsupported
  architecture, a prompt longer than the context, a damaged safetensors or GGUF file, an `.ir`
  without weights: one message, exit status 1, every cache entry whole.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs PyTorch")
pytest.importorskip("transformers", reason="needs transformers")
pytest.importorskip("accelerate", reason="needs accelerate")

import optgraph as og
from optgraph.api.chat_template import render_chat
from optgraph.api.program_cache import SUFFIX, decode_entry
from optgraph.api.sampling import Sampling, sample
from optgraph.cli.main import main
from optgraph.errors import InputError
from tests.support import hf_checkpoints as hf

PROMPT = "the quick brown fox"
EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    return hf.train_tokenizer()


@pytest.fixture(scope="module")
def llama(tokenizer: Any, tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("llama") / "llama"
    return hf.quietly(lambda: hf.write_checkpoint(directory, "llama", tokenizer))


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("programs")


@pytest.fixture(scope="module")
def model(llama: Path, cache: Path) -> Any:
    return hf.quietly(lambda: og.load(llama, device="cpu", cache_dir=cache))


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = hf.quietly(lambda: main(argv))
    out, err = capsys.readouterr()
    return status, out, err


def _entries_whole(cache: Path) -> list[Path]:
    """Every file in the cache is a whole entry (and no temporary file is left)."""
    files = sorted(cache.iterdir()) if cache.exists() else []
    for path in files:
        assert path.suffix == SUFFIX, f"a stray file in the cache: {path.name}"
        decode_entry(path.read_bytes())
    return files


# -- the API ----------------------------------------------------------------------------------


def test_stream_yields_what_generate_returns(model: Any) -> None:
    result = model.generate(PROMPT, 12, stop_at_eos=False)
    assert list(model.stream(PROMPT, 12, stop_at_eos=False)) == result.tokens
    assert result.prompt_tokens == model.tokenizer.encode(PROMPT)
    assert result.text == model.tokenizer.decode(result.tokens) and len(result.tokens) == 12
    assert result.stats.new_tokens == 12 and result.stats.decode_tokens_per_s > 0


def test_a_list_of_prompts_gives_a_list_each_as_alone(model: Any) -> None:
    """A checkpoint's prompts run together on the CPU (its batch steps), each as it runs alone."""
    prompts = [PROMPT, "hello world, this is"]
    results = model.generate(prompts, 6, stop_at_eos=False)
    assert model.batches and isinstance(results, list) and len(results) == 2
    for result, prompt in zip(results, prompts):
        alone = model.generate(prompt, 6, stop_at_eos=False)
        assert result.tokens == alone.tokens and result.text == alone.text
        assert result.stats.prompt_tokens == len(alone.prompt_tokens)
    ids = model.prompt_tokens(PROMPT)
    assert model.generate([ids], 6, stop_at_eos=False)[0].tokens == results[0].tokens


def test_seeded_sampling_is_reproducible_and_follows_the_definition(model: Any) -> None:
    settings = {"temperature": 0.9, "top_k": 30, "top_p": 0.95, "seed": 5}
    first = model.generate(PROMPT, 16, stop_at_eos=False, **settings).tokens
    assert model.generate(PROMPT, 16, stop_at_eos=False, **settings).tokens == first
    other = model.generate(PROMPT, 16, stop_at_eos=False, **{**settings, "seed": 6}).tokens
    assert other != first
    greedy = model.generate(PROMPT, 16, stop_at_eos=False).tokens
    assert first != greedy
    # step by step: the decode program's logits, each token drawn by `sample` at its step
    from optgraph.api.generation import step_inputs

    decode = model.decode
    weights = model.weights(decode)
    types = decode.step.graph.value_types()
    caches = {n: np.zeros(types[n].shape, np.float32) for n in decode.step.cache_inputs}
    prompt = model.tokenizer.encode(PROMPT)
    chosen = []
    for position, token in enumerate(prompt + first[:-1]):
        out = decode.program.run({**step_inputs(decode.step, [token], position), **caches}, weights)
        caches = dict(zip(decode.step.cache_inputs, (out[o] for o in decode.step.cache_outputs)))
        if position >= len(prompt) - 1:
            row = out[decode.step.logits].reshape(-1)
            chosen.append(sample(row, Sampling(**settings), position - len(prompt) + 1))
    assert chosen == first


def test_text_streams_in_whole_characters_and_adds_up(model: Any) -> None:
    from optgraph.api.text_tokenizer import Detokenizer

    text = "ünïcödé 😀 the quick brown fox, again 日本"
    ids = model.tokenizer.encode(text, add_special_tokens=False)
    assert len(ids) > len(text.encode()) // 2  # bytes outside the vocabulary: split over tokens
    detok = Detokenizer(model.tokenizer)
    pieces = [detok.push(t) for t in ids]
    assert "".join(pieces) + detok.flush() == model.tokenizer.decode(ids) == text
    assert not any("\ufffd" in p for p in pieces) and pieces.count("") > 0  # held back


def test_an_end_of_sequence_token_stops_unless_ignored(model: Any) -> None:
    tokens = model.generate(PROMPT, 12, stop_at_eos=False).tokens
    model.tokenizer.eos_ids = (tokens[3],)
    try:
        stopped = model.generate(PROMPT, 12).tokens
    finally:
        model.tokenizer.eos_ids = (2,)
    assert stopped == tokens[: tokens.index(tokens[3]) + 1]


# -- chat -------------------------------------------------------------------------------------

TEMPLATE = (
    "{%- set ns = namespace(system='') -%}"
    "{%- for m in messages -%}{%- if m['role'] == 'system' -%}{%- set ns.system = m['content'] -%}"
    "{%- endif -%}{%- endfor -%}"
    "{{ bos_token }}{% if ns.system %}<<SYS>>{{ ns.system | trim }}<</SYS>>\n{% endif %}"
    "{%- for m in messages if m['role'] != 'system' -%}"
    "{%- if m['role'] not in ['user', 'assistant'] %}{{ raise_exception('bad role') }}{% endif -%}"
    "[{{ m['role'] | upper }}] {{ m['content'] | tojson }}{% if not loop.last %}\n{% endif %}"
    "{%- endfor %}{% if add_generation_prompt %}\n[ASSISTANT]{% endif %}"
)
CONVERSATION = [
    {"role": "system", "content": "  be brief  "},
    {"role": "user", "content": "hello <world> é"},
    {"role": "assistant", "content": 'say "hi"'},
    {"role": "user", "content": "again"},
]


def test_chat_renders_what_apply_chat_template_renders(
    llama: Path, capsys: pytest.CaptureFixture[str], tmp_path: Path, cache: Path
) -> None:
    from transformers import AutoTokenizer

    reference = hf.quietly(lambda: AutoTokenizer.from_pretrained(str(llama)))
    ours = og.load(llama, device="cpu", cache_dir=cache).tokenizer
    for messages, template in (
        ([{"role": "user", "content": PROMPT}], None),
        (CONVERSATION, TEMPLATE),
    ):
        want = reference.apply_chat_template(
            messages, chat_template=template, tokenize=False, add_generation_prompt=True
        )
        got = render_chat(template or ours.chat_template, messages, ours.special_tokens)
        assert got == want
    with pytest.raises(InputError, match="bad role"):
        render_chat(TEMPLATE, [{"role": "tool", "content": "x"}], ours.special_tokens)
    out = tmp_path / "chat.json"
    argv = ["generate", str(llama), "--prompt", PROMPT, "--chat", "--max-new-tokens", "4"]
    status, _, _ = _run(
        [*argv, "--device", "cpu", "--cache-dir", str(cache), "--json", str(out)], capsys
    )
    assert status == 0
    rendered = reference.apply_chat_template(
        [{"role": "user", "content": PROMPT}], tokenize=False, add_generation_prompt=True
    )
    ids = reference(rendered, add_special_tokens=False)["input_ids"]
    assert json.loads(out.read_text())["results"][0]["prompt_ids"] == ids


# -- the program cache ------------------------------------------------------------------------


def test_a_second_load_compiles_nothing_and_imports_no_torch(
    model: Any, llama: Path, cache: Path
) -> None:
    expected = model.generate(PROMPT, 8, stop_at_eos=False).tokens  # decode and prefill-16
    assert len(_entries_whole(cache)) >= 2
    # the same software: this process's stamp (others' edits to a checkout between the two
    # processes would change it, and rightly compile again)
    from optgraph.api.program_cache import software_stamp

    script = (
        "import sys, optgraph as og, optgraph.api.program_cache as cache\n"
        f"cache._STAMP = {software_stamp()!r}\n"
        f"m = og.load({str(llama)!r}, device='cpu', cache_dir={str(cache)!r})\n"
        f"print(m.generate({PROMPT!r}, 8, stop_at_eos=False).tokens, m.cache.misses, "
        "m.cache.hits, 'torch' in sys.modules)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == f"{expected} 0 2 False"


def test_damaged_entries_are_refused_with_their_reason() -> None:
    from optgraph.api.program_cache import CorruptEntry, encode_entry

    data = encode_entry({"a": np.arange(1000)})
    assert decode_entry(data)["a"].sum() == 499500
    flipped = bytearray(data)
    flipped[len(data) // 2] ^= 0xFF
    for damaged, reason in (
        (data[: len(data) // 2], "payload bytes"),
        (bytes(flipped), "checksum mismatch"),
        (b"not a program", "bad magic"),
        (data[:30], "cut short"),
    ):
        with pytest.raises(CorruptEntry, match=reason):
            decode_entry(damaged)


def test_a_damaged_entry_is_reported_and_rebuilt_whole(
    model: Any, llama: Path, cache: Path, tmp_path: Path
) -> None:
    expected = model.generate(PROMPT, 8, stop_at_eos=False).tokens
    programs = tmp_path / "programs"
    shutil.copytree(cache, programs)
    entries = _entries_whole(programs)
    for index, path in enumerate(entries):  # cut one, flip a byte in the others
        data = bytearray(path.read_bytes())
        if index == 0:
            data = data[: len(data) // 2]
        else:
            data[len(data) // 2] ^= 0xFF
        path.write_bytes(bytes(data))
    reports: list[tuple[Path, str]] = []
    second = hf.quietly(
        lambda: og.load(
            llama, device="cpu", cache_dir=programs, on_rebuild=lambda p, r: reports.append((p, r))
        )
    )
    assert second.generate(PROMPT, 8, stop_at_eos=False).tokens == expected
    # decode and prefill-16 (the cache may hold other prompts' buckets too)
    assert second.cache.rebuilt == 2 == len(reports) and second.cache.hits == 0
    for path, _ in reports:  # written again, whole
        assert path in entries and decode_entry(path.read_bytes()) is not None
    assert sorted(programs.iterdir()) == entries  # and nothing else


# -- other sources and prompts ----------------------------------------------------------------


def test_a_sharded_checkpoint_generates_what_the_single_file_does(
    llama: Path, model: Any, cache: Path, tmp_path: Path
) -> None:
    """The same config and tensor table: the programs come from the cache, the weights from the
    shards (what a compiled program never holds)."""
    sharded = tmp_path / "sharded"
    reference = hf.quietly(lambda: hf.load_reference(llama))
    hf.quietly(lambda: reference.save_pretrained(str(sharded), max_shard_size="40KB"))
    shutil.copy(llama / "tokenizer.json", sharded)
    assert (sharded / "model.safetensors.index.json").is_file()
    assert len(list(sharded.glob("*.safetensors"))) > 2
    loaded = hf.quietly(lambda: og.load(sharded, device="cpu", cache_dir=cache))
    assert loaded.generate(PROMPT, 12, stop_at_eos=False).tokens == (
        model.generate(PROMPT, 12, stop_at_eos=False).tokens
    )
    weights = loaded.weights(loaded.decode)
    name = "model.layers.1.mlp.down_proj.weight"
    assert isinstance(weights[name].base, np.memmap) or isinstance(weights[name], np.memmap)


def test_an_ir_decode_step_with_weights_generates_the_reference_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from optgraph.reference.interpreter import random_weights, run_reference, save_weights

    graph = og.parse_file(EXAMPLES / "llama_decode.ir")
    weights = random_weights(graph, seed=3)
    save_weights(tmp_path / "w.npz", weights)
    argv = ["generate", str(EXAMPLES / "llama_decode.ir"), "--weights", str(tmp_path / "w.npz")]
    argv += ["--tokens", "5,9,2", "--max-new-tokens", "10", "--device", "cpu", "--no-cache"]
    status, out, _ = _run([*argv, "--json", str(tmp_path / "o.json")], capsys)
    assert status == 0
    tokens = json.loads((tmp_path / "o.json").read_text())["results"][0]["tokens"]
    assert out.split() == [str(t) for t in tokens]  # no tokenizer: the ids
    caches = {i.name: np.zeros(i.type.shape, np.float32) for i in graph.inputs if "cache" in i.name}
    expected, token, sequence = [], 5, [5, 9, 2]
    for position in range(12):
        feed = {"tokens": np.array([token], np.int32), "pos": np.array([position], np.int32)}
        feed |= {"kv_len": np.array([position + 1], np.int32), **caches}
        result = run_reference(graph, feed, weights)
        caches = dict(zip(caches, (result[n] for n in graph.output_names()[1:])))
        token = int(np.argmax(result["logits"])) if position >= 2 else sequence[position + 1]
        if position >= 2:
            expected.append(token)
    assert tokens == expected


def test_a_prompt_file_runs_each_line(
    llama: Path, cache: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    prompts = tmp_path / "prompts.txt"
    prompts.write_text("the quick brown fox\n\nhello world, this is\n")
    out = tmp_path / "out.json"
    argv = ["generate", str(llama), "--prompt-file", str(prompts), "--max-new-tokens", "5"]
    argv += ["--device", "cpu", "--cache-dir", str(cache), "--json", str(out), "--ignore-eos"]
    status, stdout, stderr = _run(argv, capsys)
    results = json.loads(out.read_text())["results"]
    assert status == 0 and len(results) == 2 and stderr.count("new: first token") == 2
    assert stdout == "".join(r["text"] + "\n" for r in results)


# -- bad input --------------------------------------------------------------------------------


def _copy(llama: Path, tmp_path: Path) -> Path:
    target = tmp_path / "copy"
    shutil.copytree(llama, target)
    return target


def _fails(argv: list[str], capsys: pytest.CaptureFixture[str], message: str, cache: Path) -> None:
    status, _, err = _run([*argv, "--device", "cpu", "--cache-dir", str(cache)], capsys)
    assert status == 1, err
    assert message in err and "Traceback" not in err
    _entries_whole(cache)


def test_bad_checkpoints_fail_with_one_message(
    llama: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from safetensors.numpy import load_file, save_file

    cache = tmp_path / "programs"
    base = ["generate", "--prompt", PROMPT]

    def case(name: str) -> Path:
        return _copy(llama, tmp_path / name)

    sharded = tmp_path / "sharded"
    reference = hf.quietly(lambda: hf.load_reference(llama))
    hf.quietly(lambda: reference.save_pretrained(str(sharded), max_shard_size="40KB"))
    missing_shard = sorted(sharded.glob("*.safetensors"))[1]
    missing_shard.unlink()
    _fails([base[0], str(sharded), *base[1:]], capsys, f"lacks: {missing_shard.name}", cache)

    no_tensor = case("no_tensor")
    tensors = load_file(str(no_tensor / "model.safetensors"))
    del tensors["model.layers.1.mlp.up_proj.weight"]
    save_file(tensors, str(no_tensor / "model.safetensors"))
    _fails(
        [base[0], str(no_tensor), *base[1:]], capsys, "missing: model.layers.1.mlp.up_proj", cache
    )

    wrong = case("wrong_shape")
    config = json.loads((wrong / "config.json").read_text())
    config["intermediate_size"] = 96
    (wrong / "config.json").write_text(json.dumps(config))
    _fails(
        [base[0], str(wrong), *base[1:]], capsys, "is [128, 64], the config gives [96, 64]", cache
    )

    bert = case("bert")
    (bert / "config.json").write_text(
        json.dumps({"model_type": "bert", "architectures": ["BertModel"]})
    )
    _fails(
        [base[0], str(bert), *base[1:]],
        capsys,
        "architecture 'bert' (BertModel) is not supported",
        cache,
    )
    _fails([base[0], str(bert), *base[1:]], capsys, "llama (Llama", cache)

    for damage in ("header", "cut"):
        broken = case(f"broken_{damage}")
        path = broken / "model.safetensors"
        data = path.read_bytes()
        path.write_bytes(data[:8] + b"{nonsense" + data[17:] if damage == "header" else data[:-100])
        reason = "header is not valid JSON" if damage == "header" else "outside the data"
        _fails([base[0], str(broken), *base[1:]], capsys, reason, cache)

    long_prompt = " ".join(["the quick brown fox"] * 10)
    _fails(
        ["generate", str(llama), "--prompt", long_prompt, "--context", "16"], capsys,
        "more than the context (16)", cache,
    )  # fmt: skip


def test_bad_files_and_arguments_fail_with_one_message(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cache = tmp_path / "programs"
    broken = tmp_path / "broken.gguf"
    broken.write_bytes(b"GGUF" + b"\x03\x00\x00\x00" + b"\xff" * 40)
    _fails(["generate", str(broken), "--tokens", "1,2"], capsys, "broken.gguf", cache)
    ir = str(EXAMPLES / "llama_decode.ir")
    _fails(["generate", ir, "--tokens", "1,2"], capsys, "needs --weights FILE", cache)
    _fails(["generate", str(tmp_path / "none"), "--tokens", "1"], capsys, "not found", cache)
    _fails(["generate", ir, "--tokens", "1"], capsys, "needs --weights", cache)
    (tmp_path / "w.npz").write_bytes(b"")
    argv = ["generate", ir, "--weights", str(tmp_path / "w.npz")]
    _fails([*argv, "--prompt", "hi"], capsys, "has no tokenizer", cache)
    _fails([*argv, "--tokens", "1", "--prompt", "x"], capsys, "exactly one of", cache)
    _fails([*argv, "--tokens", "1", "--top-p", "0"], capsys, "--top-p must be in (0, 1]", cache)
    _fails([*argv, "--tokens", "1", "--temperature", "-1"], capsys, "--temperature must be", cache)
