"""Checkpoint directories damaged one file at a time (tests/support/fuzz_checkpoint.py):
`config.json`, the shard index, `tokenizer.json`, `tokenizer_config.json`,
`generation_config.json`, through what `optgraph generate CHECKPOINT_DIR` reads: the checkpoint
(`open_checkpoint` and its architecture), transformers' model of the config on placeholder
weights (`HFModel`: every parameter checked against the tensors), the tokenizer, and a sample
through the command itself.

Each mutant works or gets one `InputError` naming the directory or the file; no size in the
config reaches transformers unless the checkpoint's tensors could hold it.
"""

from __future__ import annotations

import json
import tempfile
from functools import partial
from pathlib import Path

import pytest
from hypothesis import example, given, settings

from optgraph.api.model_sources import CheckpointSource
from optgraph.api.text_tokenizer import load_tokenizer
from optgraph.errors import InputError
from optgraph.frontends.hf_checkpoint import open_checkpoint
from tests.support import fuzz_checkpoint as fc
from tests.support.fuzz_checks import assert_refused_cleanly, run_cli, works_or_refused
from tests.support.property_examples import examples

pytest.importorskip("transformers")
pytest.importorskip("accelerate")


def _config(**changes: object) -> fc.DirMutant:
    files = fc.tiny_checkpoint()
    config = json.loads(files["config.json"] or b"")
    config.update(changes)
    return fc.DirMutant(f"config {changes}", {**files, "config.json": json.dumps(config).encode()})


# Each went past the checks before: transformers built a model of the config and met the size
# itself (a RuntimeError allocating terabytes), or never finished (a million layers), or raised
# its own error out of `generate` with a traceback; or the reader raised TypeError on a value.
REGRESSIONS = [
    _config(hidden_size=10**12),
    _config(vocab_size=10**12),
    _config(head_dim=10**12),
    _config(num_hidden_layers=10**6),
    _config(intermediate_size=-1),
    _config(hidden_size="64"),
    _config(num_attention_heads=0),
    _config(rope_parameters=5),
    _config(model_type=["llama"]),
    _config(architectures=5, model_type="bert"),
]


def _file(name: str, data: bytes) -> fc.DirMutant:
    return fc.DirMutant(f"{name} = {data[:20]!r}", {**fc.tiny_checkpoint(), name: data})


# The tokenizer's files: each raised out of `load_tokenizer` before (RecursionError from json,
# UnicodeDecodeError reading the template).
TOKENIZER_REGRESSIONS = [
    _file("tokenizer_config.json", b"[" * 100_000),
    _file("generation_config.json", b"{" * 100_000),
    _file("chat_template.jinja", b"\xff\xfe{{ x }}"),
]


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_checkpoint")


def check_readers(folder: Path) -> None:
    from optgraph.frontends.hf_steps import HFModel

    source = CheckpointSource(folder)
    checkpoint = works_or_refused(lambda: source.checkpoint, folder)
    if checkpoint is not None:
        works_or_refused(source.default_context, folder)
        works_or_refused(partial(source.default_dtype, "cuda"), folder)
        works_or_refused(source.fingerprint, folder)
        works_or_refused(partial(HFModel, checkpoint, "f32"), folder)
    works_or_refused(partial(load_tokenizer, folder), folder)


def test_the_unchanged_checkpoints_work(workdir: Path) -> None:
    from optgraph.frontends.hf_steps import HFModel

    for sharded in (False, True):
        with tempfile.TemporaryDirectory(dir=workdir) as name:
            folder = Path(name)
            fc.DirMutant("unchanged", fc.tiny_checkpoint(sharded)).write(folder)
            source = CheckpointSource(folder)
            assert len(source.checkpoint.tensors) == 12
            HFModel(source.checkpoint, "f32")
            assert source.tokenizer() is not None


@pytest.mark.parametrize("mutant", REGRESSIONS, ids=lambda m: m.what)
def test_config_sizes_and_types_are_refused_by_name(mutant: fc.DirMutant, tmp_path: Path) -> None:
    from optgraph.frontends.hf_steps import HFModel

    mutant.write(tmp_path)
    with pytest.raises(InputError, match=f"checkpoint '{tmp_path}': .*"):
        HFModel(CheckpointSource(tmp_path).checkpoint, "f32")


@pytest.mark.parametrize("mutant", TOKENIZER_REGRESSIONS, ids=lambda m: m.what)
def test_tokenizer_files_are_refused_by_name(mutant: fc.DirMutant, tmp_path: Path) -> None:
    mutant.write(tmp_path)
    name = mutant.what.split(" ")[0]
    with pytest.raises(InputError, match=f"tokenizer: '{tmp_path}/{name}'"):
        load_tokenizer(tmp_path)


def test_a_named_template_list_of_any_shape(tmp_path: Path) -> None:
    """Was: TypeError (a list as a template's name, a dictionary key)."""
    config = {"chat_template": [{"name": ["x"]}, {"name": "default", "template": "{{ 1 }}"}]}
    _file("tokenizer_config.json", json.dumps(config).encode()).write(tmp_path)
    assert load_tokenizer(tmp_path).chat_template == "{{ 1 }}"


@pytest.mark.parametrize("shard", ["../x.safetensors", "a/b.safetensors", "", "..", 5])
def test_index_shards_outside_the_directory_are_refused(shard: object, tmp_path: Path) -> None:
    files = fc.tiny_checkpoint(sharded=True)
    index = json.loads(files[fc.INDEX] or b"")
    index["weight_map"]["model.norm.weight"] = shard
    fc.DirMutant("", {**files, fc.INDEX: json.dumps(index).encode()}).write(tmp_path)
    with pytest.raises(InputError, match="which is not a file name in the directory"):
        open_checkpoint(tmp_path)


@settings(max_examples=examples(40))
@given(mutant=fc.checkpoint_mutants())
@example(mutant=REGRESSIONS[0])
def test_checkpoint_mutant_works_or_is_refused_by_name(mutant: fc.DirMutant, workdir: Path) -> None:
    with tempfile.TemporaryDirectory(dir=workdir) as name:
        folder = Path(name)
        mutant.write(folder)
        check_readers(folder)


@settings(max_examples=examples(3))
@given(mutant=fc.checkpoint_mutants())
def test_checkpoint_mutant_through_generate(mutant: fc.DirMutant, workdir: Path) -> None:
    """Exit 0 or 1 naming the checkpoint, and no --json file (nor a temporary one) on a
    failure."""
    with tempfile.TemporaryDirectory(dir=workdir) as name, tempfile.TemporaryDirectory() as out:
        folder = Path(name)
        mutant.write(folder)
        status, err = run_cli(
            ["generate", str(folder), "--tokens", "1,4", "--max-new-tokens", "1", "--device",
             "cpu", "--no-cache", "--json", f"{out}/g.json"]
        )  # fmt: skip
        assert_refused_cleanly(status, err, folder)
        assert sorted(p.name for p in Path(out).iterdir()) == (["g.json"] if status == 0 else [])
