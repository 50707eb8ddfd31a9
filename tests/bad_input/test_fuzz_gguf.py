"""GGUF files damaged one field at a time (tests/support/fuzz_gguf.py), through every reader a
user reaches: `open_gguf` and each tensor's array, `og.from_gguf`, the GGUF tokenizer, and a
sample through `optgraph import`, `optgraph run --weights` and `optgraph generate`.

Each mutant works or gets one `InputError` naming the file; the CLI exits 1 without a traceback
and leaves no output behind. Sizes are bounded by the file before anything is allocated: a count
of 2**62 is refused in bounded time and memory (a subprocess under an address-space limit).
The default run samples `examples(60)` mutants; `HYPOTHESIS_PROFILE=fuzz` about 83 times more.
"""

from __future__ import annotations

import os
import re
import resource
import struct
import subprocess
import sys
import tempfile
from collections.abc import Callable
from functools import partial
from pathlib import Path

import pytest
from hypothesis import example, given, settings

from optgraph.api.text_tokenizer import from_gguf_file
from optgraph.errors import InputError
from optgraph.frontends.gguf import from_gguf
from optgraph.reference.gguf_file import open_gguf
from optgraph.reference.interpreter import load_weights
from tests.support import fuzz_gguf as fg
from tests.support.fuzz_checks import Mutant, assert_refused_cleanly, run_cli, works_or_refused
from tests.support.property_examples import examples

pytest.importorskip("gguf")
REPO = Path(__file__).resolve().parents[2]
BASE = fg.encode(fg.tiny_llama())


def patched(field: str, value: int) -> Mutant:
    """The tiny file with one integer field set to `value`."""
    offset, code = BASE.fields[field]
    data = bytearray(BASE.data)
    struct.pack_into("<" + code, data, offset, value)
    return Mutant(f"{field} = {value}", bytes(data))


def _kv(key: str) -> int:
    return [k for k, _ in fg.tiny_llama().metadata].index(key)


TOKENS = _kv("tokenizer.ggml.tokens")
SCORES = _kv("tokenizer.ggml.scores")
BYTES = _kv("tokenizer.ggml.precompiled_charsmap")  # a UINT8 array


def valued(key: str, value: fg.Value) -> Mutant:
    """The tiny file with the metadata `key` holding `value`."""
    return Mutant(f"{key} = {value}", fg.encode(fg.with_value(fg.tiny_llama(), key, value)).data)


def _array(path: Path) -> object:
    return open_gguf(path).array("blk.0.attn_q.weight")


# Metadata of another type or size than the importer expects; each raised something else than an
# InputError before (the fuzzer's first finds):
WRONG_METADATA = [
    # `weight_shapes` over a billion layers: the process grew until the kernel killed it
    (valued("llama.block_count", fg.Value(fg.UINT32, 10**9)), partial(from_gguf, cache_len=8)),
    # ValueError: invalid literal for int() (the context length)
    (valued("llama.context_length", fg.Value(fg.STRING, "abc")), from_gguf),
    # TypeError: float() argument must be ... not 'list'
    (valued("llama.rope.freq_base", fg.Value(fg.ARRAY, [1, 2, 3], fg.INT32)), from_gguf),
    # TypeError: object of type 'float' has no len()
    (valued("tokenizer.ggml.token_type", fg.Value(fg.FLOAT32, 0.5)), from_gguf_file),
    # TypeError from reshape: the head count a bool
    (valued("llama.attention.head_count", fg.Value(fg.BOOL, True)), _array),
]


@pytest.mark.parametrize("mutant, reader", WRONG_METADATA, ids=[m.what for m, _ in WRONG_METADATA])
def test_metadata_of_another_type_is_refused_by_name(
    mutant: Mutant, reader: Callable[[Path], object], tmp_path: Path
) -> None:
    path = tmp_path / "m.gguf"
    path.write_bytes(mutant.data)
    with pytest.raises(
        InputError, match=f"GGUF file '{re.escape(str(path))}': .*(llama|tokenizer)[.]"
    ):
        reader(path)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_gguf")


def check_readers(path: Path) -> None:
    """Every reader of the file works or refuses it by name."""
    gguf = works_or_refused(lambda: open_gguf(path), path)
    if gguf is None:
        return
    for name in gguf.tensors:
        array = works_or_refused(partial(gguf.array, name), path)
        if array is not None:
            assert array.nbytes <= path.stat().st_size
    imported = works_or_refused(lambda: from_gguf(path, cache_len=8), path)
    if imported is not None:
        works_or_refused(lambda: load_weights(path, imported[0]), path)
    works_or_refused(lambda: from_gguf_file(path), path)


def test_the_unchanged_file_works(workdir: Path) -> None:
    path = workdir / "tiny.gguf"
    path.write_bytes(BASE.data)
    _, weights = from_gguf(path, cache_len=8)
    assert len(weights) == 11
    assert from_gguf_file(path).decode(from_gguf_file(path).encode("ab a")) == "ab a"


@settings(max_examples=examples(60))
@given(mutant=fg.gguf_mutants())
@example(mutant=patched(f"kv{BYTES}.count", 10**6))  # was: a MemoryError (HUGE_CLAIMS)
@example(mutant=WRONG_METADATA[0][0])  # was: killed for memory (a billion layers)
def test_gguf_mutant_works_or_is_refused_by_name(mutant: Mutant, workdir: Path) -> None:
    handle, name = tempfile.mkstemp(suffix=".gguf", dir=workdir)
    os.close(handle)
    path = Path(name)
    try:
        path.write_bytes(mutant.data)
        check_readers(path)
    finally:
        path.unlink()


@pytest.fixture(scope="module")
def base_ir(workdir: Path) -> Path:
    """The tiny file imported: the graph `run --weights MUTANT.gguf` runs."""
    (workdir / "base.gguf").write_bytes(BASE.data)
    assert run_cli(["import", str(workdir / "base.gguf"), "-o", str(workdir / "base.ir")])[0] == 0
    return workdir / "base.ir"


@settings(max_examples=examples(8))
@given(mutant=fg.gguf_mutants())
def test_gguf_mutant_through_the_command_line(mutant: Mutant, workdir: Path, base_ir: Path) -> None:
    """`optgraph import`, `run --weights` and `generate`: exit 0 or 1 naming the file, no
    traceback, and a failed import or generate leaves no IR or JSON (nor a temporary file)
    behind."""
    with tempfile.TemporaryDirectory(dir=workdir) as folder:
        path, out = Path(folder) / "m.gguf", Path(folder) / "m.ir"
        path.write_bytes(mutant.data)
        status, err = run_cli(["import", str(path), "-o", str(out)])
        assert_refused_cleanly(status, err, path)
        assert status == 0 or sorted(p.name for p in Path(folder).iterdir()) == ["m.gguf"]
        status, err = run_cli(
            ["run", str(base_ir), "--weights", str(path), "--device", "cpu", "-q"]
        )
        assert_refused_cleanly(status, err, path)
        out.unlink(missing_ok=True)
        status, err = run_cli(
            ["generate", str(path), "--tokens", "1,4", "--max-new-tokens", "1", "--device", "cpu",
             "--no-cache", "--json", str(Path(folder) / "m.json")]
        )  # fmt: skip
        assert_refused_cleanly(status, err, path)
        left = sorted(p.name for p in Path(folder).iterdir())
        assert left == (["m.gguf", "m.json"] if status == 0 else ["m.gguf"])


# A count, a length or a dimension of 2**62 and more: refused by `gguf_header` before anything
# that size is read, looped over or allocated. Before it, the gguf package's reader (then the
# one optgraph used) stepped through a UINT8 array of 2**62 (or 10**6) elements past the end of
# the file one empty slice at a time, appending each to a list until memory ran out (a
# MemoryError and its traceback); the other claims ended in whatever IndexError or ValueError
# that reader met past the end.
HUGE_CLAIMS = [
    patched(f"kv{BYTES}.count", 2**62),
    patched(f"kv{BYTES}.count", 10**6),
    patched("kv_count", 2**62),
    patched("tensor_count", 2**62),
    patched("kv0.key_len", 2**63),
    patched("kv0.len", 2**64 - 1),
    patched(f"kv{TOKENS}.count", 2**62),
    patched(f"kv{TOKENS}[3].len", 2**40),
    patched(f"kv{SCORES}.count", 2**62),
    patched("tensor0.dim0", 2**40),
    patched("tensor0.offset", 2**63),
]


@pytest.mark.parametrize("mutant", HUGE_CLAIMS, ids=lambda m: m.what)
def test_huge_claims_are_refused_before_reading(mutant: Mutant, tmp_path: Path) -> None:
    path = tmp_path / "huge.gguf"
    path.write_bytes(mutant.data)
    with pytest.raises(
        InputError, match=f"GGUF file '{re.escape(str(path))}': .*(damaged|outside)"
    ):
        open_gguf(path)


def _limited_import(path: Path, out: Path) -> subprocess.CompletedProcess[str]:
    """`optgraph import PATH -o OUT` in a process limited to 1 GiB of address space."""
    limit = 1 << 30

    def limited() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    env = {**os.environ, "PYTHONPATH": str(REPO), "OPENBLAS_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "optgraph.cli.main", "import", str(path), "-o", str(out)],
        env=env,
        preexec_fn=limited,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.mark.parametrize("mutant", HUGE_CLAIMS[:3], ids=lambda m: m.what)
def test_huge_claims_fail_fast_under_a_memory_limit(mutant: Mutant, tmp_path: Path) -> None:
    path = tmp_path / "huge.gguf"
    path.write_bytes(mutant.data)
    result = _limited_import(path, tmp_path / "o.ir")
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.startswith(f"error: GGUF file '{path}': "), result.stderr
    assert not (tmp_path / "o.ir").exists()


def test_a_token_of_a_million_characters_is_not_sliced_at_every_place(tmp_path: Path) -> None:
    """Was: the SentencePiece merges tried every cut of every token, quadratic in its length
    (minutes for this one token); now only cuts into lengths the vocabulary has."""
    tokens = [*fg.TOKENS[:-1], "a" * 1_000_000]
    spec = fg.with_value(
        fg.tiny_llama(), "tokenizer.ggml.tokens", fg.Value(fg.ARRAY, tokens, fg.STRING)
    )
    path = tmp_path / "long.gguf"
    path.write_bytes(fg.encode(spec).data)
    code = "import sys; from optgraph.api.text_tokenizer import from_gguf_file as f; f(sys.argv[1])"
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-c", code, str(path)],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_a_large_metadata_array_costs_no_more_than_its_bytes(tmp_path: Path) -> None:
    """A valid file whose UINT8 array holds 4 million bytes imports under a 1 GiB address-space
    limit. Was: the gguf package's reader kept a NumPy view of every element (about 700 bytes
    for each byte of the array: 3 GB, and minutes); `gguf_header` decodes only what is read."""
    big = fg.Value(fg.ARRAY, [0] * 4_000_000, fg.UINT8)
    spec = fg.with_value(fg.tiny_llama(), "tokenizer.ggml.precompiled_charsmap", big)
    path = tmp_path / "big.gguf"
    path.write_bytes(fg.encode(spec).data)
    result = _limited_import(path, tmp_path / "o.ir")
    assert result.returncode == 0, result.stderr
