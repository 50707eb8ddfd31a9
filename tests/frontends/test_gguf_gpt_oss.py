"""gpt-oss GGUF files (tests/frontends/gguf_gpt_oss.py writes them as llama.cpp's converter does)
import as graphs whose attention has the file's sinks, every second layer a sliding window, and
whose MLPs are a biased router product and one biased moe with gpt-oss's clamped SwiGLU; they
decode (the reference interpreter, f32, one token a step) as a `GptOssForCausalLM` holding the
file's dequantized values: logits within f32 rounding, greedy tokens equal; experts in F32 and
MXFP4 (other matrices F32 or Q8_0); prefill; `optgraph import` + `optgraph run --check`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import optgraph as og
from optgraph.cli.main import main
from optgraph.frontends.gguf import from_gguf
from optgraph.reference.interpreter import run_reference
from tests.frontends import gguf_gpt_oss, gguf_models

gguf = pytest.importorskip("gguf")
pytest.importorskip("transformers")

PROMPT = [3, 17, 99, 5, 200, 42, 7, 8]  # longer than the window (4)
NEW_TOKENS = 12
# f32 steps on the same values as the oracle (gguf's dequantization): only the order of sums
# differs (the other GGUF tests' bound).
BOUND = 1e-4


def _file(tmp_path: Path, experts: str, matrices: str = "F32") -> Path:
    model = gguf_gpt_oss.hf_gpt_oss()
    path = tmp_path / f"gpt-oss-{experts}-{matrices}.gguf"
    return gguf_gpt_oss.write_gpt_oss_gguf(model, path, experts, matrices)


def _logits(model: Any, prompt: list[int]) -> np.ndarray:
    with torch.no_grad():
        return model(torch.tensor([prompt])).logits[0].float().numpy()


@pytest.mark.parametrize(
    ("experts", "matrices"), [("F32", "F32"), ("MXFP4", "F32"), ("MXFP4", "Q8_0")]
)
def test_gpt_oss_files_decode_as_their_oracle(tmp_path: Path, experts: str, matrices: str) -> None:
    path = _file(tmp_path, experts, matrices)
    graph, weights = from_gguf(path, cache_len=32)
    og.verify(graph)
    types = graph.value_types()
    assert types["blk.0.ffn_gate_exps.weight"].dtype == experts.lower()
    assert types["blk.1.ffn_down_exps.weight"].dtype == experts.lower()
    logits, tokens = gguf_models.decode_steps(graph, weights, PROMPT, NEW_TOKENS)
    oracle = gguf_gpt_oss.gpt_oss_from_file(path)
    expected = _logits(oracle, PROMPT)
    difference = np.abs(logits - expected).max()
    print(f"gpt-oss experts {experts}, matrices {matrices}: largest logit difference "
          f"{difference:.2e}")  # fmt: skip
    assert difference <= BOUND
    assert tokens == gguf_models.greedy_reference(oracle, PROMPT, NEW_TOKENS)
    # What the test can tell apart: the clamp, the sinks and the window each change the logits.
    for change in ({"swiglu_limit": 1e9}, {"sliding_window": 64}):
        other = _logits(gguf_gpt_oss.gpt_oss_from_file(path, **change), PROMPT)
        assert np.abs(other - expected).max() > 100 * BOUND, change
    no_sinks = gguf_gpt_oss.gpt_oss_from_file(path)
    with torch.no_grad():
        for layer in no_sinks.model.layers:
            layer.self_attn.sinks.fill_(-1e4)
    assert np.abs(_logits(no_sinks, PROMPT) - expected).max() > 100 * BOUND


def test_the_graph_has_sinks_windows_and_a_biased_moe(tmp_path: Path) -> None:
    graph, _ = from_gguf(_file(tmp_path, "MXFP4"), cache_len=16)
    attention = [n for n in graph.nodes if n.op == "attention"]
    assert [n.attrs.get("window", 0) for n in attention] == [4, 0]  # even layers slide
    assert all(n.attrs["sinks"] is True for n in attention)
    assert [n.operands[4] for n in attention] == [
        "blk.0.attn_sinks.weight",
        "blk.1.attn_sinks.weight",
    ]
    [moe0, moe1] = [n for n in graph.nodes if n.op == "moe"]
    assert moe0.attrs["act"] == "swiglu_oai" and moe0.attrs["routing"] == "topk_softmax"
    assert moe0.operands[2:] == tuple(
        f"blk.0.ffn_{p}_exps.{k}" for k in ("weight", "bias") for p in ("gate", "up", "down")
    )
    router = {n.name: n for n in graph.nodes}[moe1.operands[1]]
    assert router.op == "add" and "blk.1.ffn_gate_inp.bias" in router.operands
    norms = [n.operands[1] for n in graph.nodes if n.op == "rms_norm"]
    assert "blk.0.post_attention_norm.weight" in norms
    assert graph.value_types()["blk.0.attn_q.weight"].shape == (128, 64)  # 4 heads of 32


def test_prefill_matches_the_oracle(tmp_path: Path) -> None:
    path = _file(tmp_path, "MXFP4")
    graph, weights = from_gguf(path, mode="prefill", seq=len(PROMPT))
    feed = {"tokens": np.array(PROMPT, np.int32), "pos": np.arange(len(PROMPT), dtype=np.int32)}
    out = run_reference(graph, feed, weights)
    expected = _logits(gguf_gpt_oss.gpt_oss_from_file(path), PROMPT)
    assert np.abs(np.asarray(out["logits"], np.float32) - expected).max() <= BOUND


def test_import_then_run_from_the_file(tmp_path: Path) -> None:
    path = _file(tmp_path, "MXFP4", "Q8_0")
    ir = tmp_path / "gpt-oss.ir"
    assert main(["import", str(path), "-o", str(ir), "--cache-len", "16", "--seq", "2"]) == 0
    gguf_models.run_from_the_file(path, ir, tmp_path)


def test_generate_from_the_file_gives_the_oracles_tokens(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`optgraph generate FILE.gguf --tokens ...` on the CPU (the file carries no vocabulary, so
    the ids in and out): the oracle's greedy tokens."""
    path = _file(tmp_path, "MXFP4", "Q8_0")
    argv = ["generate", str(path), "--tokens", ",".join(map(str, PROMPT)), "--ignore-eos"]
    argv += ["--max-new-tokens", str(NEW_TOKENS), "--device", "cpu", "--no-cache", "-q"]
    capsys.readouterr()
    assert main(argv) == 0
    out = capsys.readouterr().out
    expected = gguf_models.greedy_reference(
        gguf_gpt_oss.gpt_oss_from_file(path), PROMPT, NEW_TOKENS
    )
    assert [int(t) for t in out.split()] == expected


def _boundary_tokenizer() -> Any:
    """A byte-level BPE (`<pad>`, `<s>`, `</s>`, the 256 byte characters) whose few merges cross
    the places where gpt2's and o200k's splits differ: a contraction (o200k keeps "n't" with its
    word), a run of digits (o200k cuts it in threes), a case change (o200k cuts "lC"), a space
    before a word (both keep it), so the split decides the ids."""
    from tokenizers import Tokenizer, models, pre_tokenizers

    vocab = {"<pad>": 0, "<s>": 1, "</s>": 2}
    for ch in sorted(pre_tokenizers.ByteLevel.alphabet()):
        vocab[ch] = len(vocab)
    merges = [("n", "'"), ("3", "4"), ("l", "C"), ("\u0120", "t"), ("\u0120t", "h")]
    for left, right in merges:
        vocab[left + right] = len(vocab)
    tokenizer = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tokenizer.add_special_tokens(["<pad>", "<s>", "</s>"])
    return tokenizer


def _vocab_file(tmp_path: Path, pre: str, arch: str = "gpt-oss") -> Path:
    """A gpt-oss (or tiny llama) file carrying a small byte-level BPE vocabulary whose
    `tokenizer.ggml.pre` is `pre`."""
    from tests.support import gguf_vocab

    tokenizer = _boundary_tokenizer()
    vocab = tokenizer.get_vocab_size()

    def add(writer: Any) -> None:
        real = writer.add_tokenizer_pre
        writer.add_tokenizer_pre = lambda _: real(pre)
        gguf_vocab.add_byte_level_vocab(writer, tokenizer)

    (tmp_path / arch).mkdir(exist_ok=True)
    path = tmp_path / arch / f"vocab-{pre}.gguf"
    with gguf_vocab.vocab_added(add):
        if arch == "gpt-oss":
            gguf_gpt_oss.write_gpt_oss_gguf(gguf_gpt_oss.hf_gpt_oss(vocab_size=vocab), path)
        else:
            gguf_models.write_gguf(gguf_models.hf_model(arch, vocab_size=vocab), path, arch)
    return path


TEXTS = ["the quick brown fox", "CamelCase don't 12345 x/y\n\n end", "ÉCOLE été 日本 the"]


def test_generate_with_the_files_vocabulary(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """gpt-oss's pre-tokenizer (`tokenizer.ggml.pre` "gpt-4o", the o200k split) over a small
    byte-level vocabulary: our tokenizer encodes and decodes as transformers' GGUF tokenizer of
    the same vocabulary (texts where the split differs from gpt2's; in a llama file, as
    transformers' GGUF loading fails on a gpt-oss file's rope keys before its tokenizer), and
    `--prompt` text in gives the oracle's greedy tokens for those ids (`--json`)."""
    import json

    from transformers import AutoTokenizer

    from optgraph.api.text_tokenizer import load_tokenizer
    from tests.support import hf_checkpoints

    path, llama = _vocab_file(tmp_path, "gpt-4o"), _vocab_file(tmp_path, "gpt-4o", "llama")
    reference = hf_checkpoints.quietly(
        lambda: AutoTokenizer.from_pretrained(str(llama.parent), gguf_file=llama.name)
    )
    ours = load_tokenizer(path)
    gpt2 = load_tokenizer(_vocab_file(tmp_path, "default"))
    assert all(gpt2.encode(text) != ours.encode(text) for text in TEXTS[1:2])
    for text in TEXTS:
        ids = reference(text)["input_ids"]
        assert ours.encode(text) == ids, text
        assert ours.decode(ids) == reference.decode(ids, skip_special_tokens=True), text
    prompt = TEXTS[1]
    argv = ["generate", str(path), "--prompt", prompt, "--ignore-eos", "--device", "cpu"]
    argv += ["--max-new-tokens", "8", "--no-cache", "-q", "--json", str(tmp_path / "o.json")]
    assert main(argv) == 0
    tokens = json.loads((tmp_path / "o.json").read_text())["results"][0]["tokens"]
    ids = reference(prompt)["input_ids"]
    assert tokens == gguf_models.greedy_reference(gguf_gpt_oss.gpt_oss_from_file(path), ids, 8)
    capsys.readouterr()
    other = _vocab_file(tmp_path, "o300k")
    assert main(["generate", str(other), "--prompt", prompt, "--device", "cpu", "--no-cache"]) == 1
    err = capsys.readouterr().err
    assert "tokenizer.ggml.pre 'o300k' is not supported" in err and "Traceback" not in err


def test_an_f16_file_runs_an_f16_step(tmp_path: Path) -> None:
    """F16 matrices make the default step f16: the f32 biases, sinks and norms cast where they
    are read, the MXFP4 stacks read as stored; within f16's rounding of the oracle."""
    path = _file(tmp_path, "MXFP4", "F16")
    graph, weights = from_gguf(path, cache_len=32)
    types = graph.value_types()
    assert types["l0.q"].dtype == "f16" and types["blk.0.ffn_gate_exps.weight"].dtype == "mxfp4"
    casts = {n.operands[0] for n in graph.nodes if n.op == "cast"}
    assert {"blk.0.attn_sinks.weight", "blk.0.ffn_down_exps.bias"} <= casts
    logits, tokens = gguf_models.decode_steps(graph, weights, PROMPT, 6)
    oracle = gguf_gpt_oss.gpt_oss_from_file(path)
    assert np.abs(logits.astype(np.float32) - _logits(oracle, PROMPT)).max() <= 0.05
    assert tokens == gguf_models.greedy_reference(oracle, PROMPT, 6)


def test_another_swiglu_clamp_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = gguf_gpt_oss.hf_gpt_oss()
    path = tmp_path / "clamp.gguf"

    def clamp(writer: Any) -> None:
        writer.add_swiglu_clamp_exp([7.0, 5.0])

    gguf_gpt_oss.write_gpt_oss_gguf(model, path, edit=clamp)
    assert main(["import", str(path), "-o", str(tmp_path / "x.ir")]) == 1
    err = capsys.readouterr().err
    assert "'gpt-oss.swiglu_clamp_exp' [7.0, 5.0] is not supported" in err
    assert "Traceback" not in err and not (tmp_path / "x.ir").exists()
    same = tmp_path / "same.gguf"
    gguf_gpt_oss.write_gpt_oss_gguf(model, same, edit=lambda w: w.add_swiglu_clamp_exp([7.0] * 2))
    from_gguf(same, cache_len=8)  # llama.cpp's own value: accepted
