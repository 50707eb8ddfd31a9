"""`og.from_gguf`: GGUF files written as llama.cpp's converter writes them (tests/frontends/
gguf_models.py) import as Llama-family graphs whose logits, run by the reference interpreter,
match transformers' own GGUF loading, and whose greedy tokens equal `generate`'s."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import optgraph as og
from optgraph.errors import InputError
from optgraph.frontends.gguf import from_gguf
from optgraph.reference.interpreter import run_reference
from tests.frontends import gguf_gemma, gguf_models, gguf_phi3

pytest.importorskip("gguf")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers' GGUF loading needs it

PROMPT = [3, 17, 99, 5, 200, 42]
NEW_TOKENS = 24
F32_BOUND = 1e-4  # the largest logit difference seen: 6.2e-6, on logits up to ~6
F16_BOUND = 0.05  # an f16 step (activations rounded to f16 after every op)


def _oracle(path: Path, prompt: list[int], new_tokens: int) -> tuple[np.ndarray, list[int]]:
    """transformers' GGUF loading: the prompt's logits and the greedy continuation."""
    model = gguf_models.load_with_transformers(path)
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].float().numpy()
    return logits, gguf_models.greedy_reference(model, prompt, new_tokens)


def _file(tmp_path: Path, arch: str, ftype: str = "F32", **overrides: Any) -> Path:
    """A GGUF file of `arch` as llama.cpp lays it out; Mistral models are `llama` files."""
    model = gguf_models.hf_model(arch, **overrides)
    name = "Mistral tiny" if arch == "mistral" else "tiny"
    file_arch = "llama" if arch == "mistral" else arch
    return gguf_models.write_gguf(model, tmp_path / f"{arch}.gguf", file_arch, ftype, name=name)


@pytest.mark.parametrize("arch", ["llama", "mistral", "qwen2", "qwen3"])
def test_f32_files_decode_as_transformers_loads_them(tmp_path: Path, arch: str) -> None:
    path = _file(tmp_path, arch)
    graph, weights = from_gguf(path, cache_len=40)
    og.verify(graph)
    assert {w.name for w in graph.weights} <= {t for t in weights}
    assert "blk.0.attn_q.weight" in weights and "token_embd.weight" in weights
    logits, tokens = gguf_models.decode_steps(graph, weights, PROMPT, NEW_TOKENS)
    expected_logits, expected_tokens = _oracle(path, PROMPT, NEW_TOKENS)
    assert np.abs(logits - expected_logits).max() <= F32_BOUND
    assert tokens == expected_tokens


def test_the_graph_has_gen_llamas_structure_with_the_files_names(tmp_path: Path) -> None:
    graph, _ = from_gguf(_file(tmp_path, "qwen3"), cache_len=16)
    ops = [n.op for n in graph.nodes]
    # Per layer: 5 rms_norms (attention, mlp, q and k heads), 7 products, 2 ropes, 2 cache writes.
    assert ops.count("rms_norm") == 2 * 4 + 1 and ops.count("rope") == 4
    assert ops.count("kv_cache_write") == 4 and ops.count("attention") == 2
    assert ops.count("matmul") == 2 * 7 + 1
    products = [n for n in graph.nodes if n.op == "matmul"]
    assert all(n.attrs.get("transpose_b") for n in products)
    assert [i.name for i in graph.inputs][:3] == ["tokens", "pos", "kv_len"]
    assert graph.output_names()[0] == "logits"


def test_qwen2_biases_and_tied_embeddings(tmp_path: Path) -> None:
    path = _file(tmp_path, "qwen2", tie_word_embeddings=True)
    graph, weights = from_gguf(path, cache_len=40)
    names = {w.name for w in graph.weights}
    assert "blk.1.attn_k.bias" in names and "output.weight" not in names
    logits, tokens = gguf_models.decode_steps(graph, weights, PROMPT, NEW_TOKENS)
    expected_logits, expected_tokens = _oracle(path, PROMPT, NEW_TOKENS)
    assert np.abs(logits - expected_logits).max() <= F32_BOUND
    assert tokens == expected_tokens


def test_prefill_logits_match_for_every_position(tmp_path: Path) -> None:
    path = _file(tmp_path, "llama")
    graph, weights = from_gguf(path, mode="prefill", seq=len(PROMPT))
    assert [i.name for i in graph.inputs] == ["tokens", "pos"]
    feed = {"tokens": np.array(PROMPT, np.int32), "pos": np.arange(len(PROMPT), dtype=np.int32)}
    logits = run_reference(graph, feed, weights)["logits"]
    expected, _ = _oracle(path, PROMPT, 1)
    assert np.abs(logits - expected).max() <= F32_BOUND


def test_f16_files_keep_f16_weights(tmp_path: Path) -> None:
    """f16 matrices stay f16 (`transpose_b` products); in an f32 step each is cast where it is
    read and the logits match transformers (which widens them) as closely as f32 files do; the
    default step is f16: within f16's rounding."""
    path = _file(tmp_path, "llama", "F16")
    expected_logits, expected_tokens = _oracle(path, PROMPT, NEW_TOKENS)
    graph, weights = from_gguf(path, cache_len=40, dtype="f32")
    assert weights["blk.0.attn_q.weight"].dtype == np.float16
    assert graph.value_types()["blk.0.ffn_down.weight"].dtype == "f16"
    logits, tokens = gguf_models.decode_steps(graph, weights, PROMPT, NEW_TOKENS)
    assert np.abs(logits - expected_logits).max() <= F32_BOUND
    assert tokens == expected_tokens
    graph16, weights16 = from_gguf(path, cache_len=40)
    assert graph16.value_types()["logits"].dtype == "f16"
    logits16, tokens16 = gguf_models.decode_steps(graph16, weights16, PROMPT, NEW_TOKENS)
    print("f16 step: largest logit difference", np.abs(logits16 - expected_logits).max())
    assert np.abs(logits16 - expected_logits).max() <= F16_BOUND
    # Greedy tokens agree until a near tie (the random model's top two within f16's error).
    assert tokens16[:5] == expected_tokens[:5]


def test_weights_are_views_of_the_mapped_file_except_permuted_q_and_k(tmp_path: Path) -> None:
    _, weights = from_gguf(_file(tmp_path, "llama"), cache_len=8)
    assert isinstance(weights["blk.0.ffn_up.weight"].base, np.memmap | np.ndarray)
    assert not weights["blk.0.ffn_up.weight"].flags.owndata
    assert weights["blk.0.attn_q.weight"].flags.c_contiguous  # un-permuted: a copy


@pytest.mark.parametrize(
    "rope",
    [
        {"rope_type": "linear", "factor": 2.0},
        {
            "rope_type": "llama3",
            "factor": 8.0,
            "low_freq_factor": 1.0,
            "high_freq_factor": 4.0,
            "original_max_position_embeddings": 64,
        },
        {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 64},
    ],
    ids=["linear", "llama3", "yarn"],
)
def test_rope_scaling_from_the_metadata_and_rope_freqs(
    tmp_path: Path, rope: dict[str, Any]
) -> None:
    """transformers' GGUF loader drops rope scaling: the oracle is the model the file came from."""
    rope_parameters = {"rope_theta": 500000.0, **rope}
    model = gguf_models.hf_model("llama", rope_parameters=rope_parameters)
    path = gguf_models.write_gguf(model, tmp_path / "scaled.gguf", "llama", rope=rope)
    graph, weights = from_gguf(path, cache_len=40)
    ropes = [n for n in graph.nodes if n.op == "rope"]
    assert ropes[0].attrs["scaling"] == rope["rope_type"]
    logits, _ = gguf_models.decode_steps(graph, weights, PROMPT + [7] * 20, 1)
    with torch.no_grad():
        expected = model(torch.tensor([PROMPT + [7] * 20])).logits[0].numpy()
    assert np.abs(logits - expected).max() <= F32_BOUND


@pytest.mark.parametrize(
    "arch, ftype, overrides",
    [
        ("llama", "Q8_0", {}),
        ("llama", "Q4_0", {}),
        ("qwen3", "Q8_0", {}),
        ("qwen2", "Q4_0", {"tie_word_embeddings": True}),
    ],
    ids=["llama-q8_0", "llama-q4_0", "qwen3-q8_0", "qwen2-tied-q4_0"],
)
def test_quantized_files_keep_their_blocks(
    tmp_path: Path, arch: str, ftype: str, overrides: dict[str, Any]
) -> None:
    """Quantized matrices are declared with their ggml dtype and GGUF shape `[N, K]`, their
    arrays the file's bytes (q and k rows un-permuted whole); the reference dequantizes them as
    gguf does, so the logits match transformers' (which dequantizes with gguf) as f32 files do."""
    path = _file(tmp_path, arch, ftype, **overrides)
    graph, weights = from_gguf(path, cache_len=40)
    og.verify(graph)
    types = graph.value_types()
    dtype = ftype.lower()
    assert types["blk.0.attn_q.weight"].dtype == dtype and types["token_embd.weight"].dtype == dtype
    assert weights["blk.0.attn_v.weight"].dtype == np.uint8
    assert types["blk.0.attn_norm.weight"].dtype == "f32"
    logits, tokens = gguf_models.decode_steps(graph, weights, PROMPT, NEW_TOKENS)
    expected_logits, expected_tokens = _oracle(path, PROMPT, NEW_TOKENS)
    assert np.abs(logits - expected_logits).max() <= F32_BOUND
    assert tokens == expected_tokens


def test_bf16_files(tmp_path: Path) -> None:
    path = _file(tmp_path, "qwen2", "BF16")
    graph, weights = from_gguf(path, cache_len=40, dtype="f32")
    assert graph.value_types()["blk.0.attn_q.weight"].dtype == "bf16"
    assert weights["blk.0.attn_q.weight"].dtype.name == "bfloat16"
    logits, tokens = gguf_models.decode_steps(graph, weights, PROMPT, NEW_TOKENS)
    expected_logits, expected_tokens = _oracle(path, PROMPT, NEW_TOKENS)
    assert np.abs(logits - expected_logits).max() <= F32_BOUND
    assert tokens == expected_tokens
    default, _ = from_gguf(path, cache_len=40)
    assert default.value_types()["logits"].dtype == "bf16"


@pytest.mark.parametrize("ftype", ["F32", "Q8_0"])
def test_phi3_fused_qkv_and_gate_up_are_sliced_after_their_products(
    tmp_path: Path, ftype: str
) -> None:
    """phi3 files keep Phi-3's fused `attn_qkv` ([q; k; v] rows) and `ffn_up` ([gate; up]): each
    is one product, sliced into q, k, v and gate, up; the weights stay the file's tensors."""
    path = gguf_phi3.write_phi3_gguf(gguf_phi3.phi3_model(), tmp_path / "phi3.gguf", ftype)
    graph, weights = from_gguf(path, cache_len=40)
    og.verify(graph)
    names = {w.name for w in graph.weights}
    assert {"blk.0.attn_qkv.weight", "blk.1.ffn_up.weight"} <= names
    assert not any(".attn_q." in n or ".ffn_gate." in n for n in names)
    ops = [n.op for n in graph.nodes]
    assert ops.count("matmul") == 2 * 4 + 1 and ops.count("slice") == 2 * 5
    logits, tokens = gguf_models.decode_steps(graph, weights, PROMPT, NEW_TOKENS)
    expected_logits, expected_tokens = _oracle(path, PROMPT, NEW_TOKENS)
    assert np.abs(logits - expected_logits).max() <= F32_BOUND
    assert tokens == expected_tokens


def test_phi3_sliding_window(tmp_path: Path) -> None:
    """`phi3.attention.sliding_window` becomes the attention's window, in decode and prefill.
    transformers' GGUF loader drops it: the oracle is the model the file came from."""
    model = gguf_phi3.phi3_model(sliding_window=4)
    path = gguf_phi3.write_phi3_gguf(model, tmp_path / "phi3-swa.gguf")
    prompt = PROMPT + [7, 11, 13, 250, 1, 9]
    with torch.no_grad():
        expected = model(torch.tensor([prompt])).logits[0].numpy()
    graph, weights = from_gguf(path, cache_len=40)
    assert all(n.attrs.get("window") == 4 for n in graph.nodes if n.op == "attention")
    logits, _ = gguf_models.decode_steps(graph, weights, prompt, 1)
    assert np.abs(logits - expected).max() <= F32_BOUND
    prefill, prefill_weights = from_gguf(path, mode="prefill", seq=len(prompt))
    feed = {"tokens": np.array(prompt, np.int32), "pos": np.arange(len(prompt), dtype=np.int32)}
    logits = run_reference(prefill, feed, prefill_weights)["logits"]
    assert np.abs(logits - expected).max() <= F32_BOUND
    plain = gguf_phi3.write_phi3_gguf(gguf_phi3.phi3_model(), tmp_path / "phi3.gguf")
    without, _ = from_gguf(plain, mode="prefill", seq=len(prompt))
    assert not any(n.attrs.get("window") for n in without.nodes if n.op == "attention")


def test_phi3_partial_rotary_is_refused(tmp_path: Path) -> None:
    rope = {"rope_theta": 10000.0, "partial_rotary_factor": 0.5}
    model = gguf_phi3.phi3_model(rope_parameters=rope)
    path = gguf_phi3.write_phi3_gguf(model, tmp_path / "phi3-partial.gguf")
    with pytest.raises(InputError, match="partial rotary"):
        from_gguf(path)


GEMMA_PROMPT = PROMPT + [7, 11, 13, 250, 1, 9]  # longer than the test models' window, 4


@pytest.mark.parametrize(
    "arch, ftype, overrides",
    [("gemma2", "F32", {}), ("gemma2", "Q8_0", {}), ("gemma3", "F32", {"num_hidden_layers": 6})],
    ids=["gemma2", "gemma2-q8_0", "gemma3"],
)
def test_gemma_files_decode_as_transformers_loads_them(
    tmp_path: Path, arch: str, ftype: str, overrides: dict[str, Any]
) -> None:
    """Gemma 2 and 3: embeddings times sqrt(hidden), the file's norms (1 + weight, added by the
    converter) as plain RMS norms, post-attention and post-MLP norms, a GELU-tanh MLP, sliding
    windows on all but every 2nd (gemma2) / 6th (gemma3) layer, gemma3's local rope (theta
    10000) on its sliding layers and q/k norms, gemma2's softcaps (transformers' defaults: the
    loader reads none)."""
    model = gguf_gemma.gemma_model(arch, **overrides)
    path = gguf_gemma.write_gemma_gguf(model, tmp_path / f"{arch}.gguf", arch, ftype)
    graph, weights = from_gguf(path, cache_len=40)
    og.verify(graph)
    attention = [n for n in graph.nodes if n.op == "attention"]
    thetas = [n.attrs["theta"] for n in graph.nodes if n.op == "rope"][::2]
    if arch == "gemma2":
        assert [n.attrs.get("window", 0) for n in attention] == [4, 0]
        assert all(n.attrs["softcap"] == 50.0 for n in attention)
        assert [n.op for n in graph.nodes][-3:] == ["scale", "tanh", "scale"]  # logits' softcap
    else:
        assert [n.attrs.get("window", 0) for n in attention] == [4, 4, 4, 4, 4, 0]
        assert thetas == [10000.0] * 5 + [1000000.0]
        assert "blk.0.attn_q_norm.weight" in weights
    assert "blk.1.post_ffw_norm.weight" in weights and "output.weight" not in weights
    logits, tokens = gguf_models.decode_steps(graph, weights, GEMMA_PROMPT, NEW_TOKENS)
    expected_logits, expected_tokens = _oracle(path, GEMMA_PROMPT, NEW_TOKENS)
    assert np.abs(logits - expected_logits).max() <= F32_BOUND
    assert tokens == expected_tokens
    prefill, prefill_weights = from_gguf(path, mode="prefill", seq=len(GEMMA_PROMPT))
    feed = {
        "tokens": np.array(GEMMA_PROMPT, np.int32),
        "pos": np.arange(len(GEMMA_PROMPT), dtype=np.int32),
    }
    logits = run_reference(prefill, feed, prefill_weights)["logits"]
    assert np.abs(logits - expected_logits).max() <= F32_BOUND


def test_gemma2_softcaps_from_the_metadata(tmp_path: Path) -> None:
    """Softcaps small enough to bend every score and logit, read from the file (the loader
    keeps transformers' defaults: the oracle is the model the file came from)."""
    model = gguf_gemma.gemma_model(
        "gemma2", attn_logit_softcapping=0.5, final_logit_softcapping=2.0
    )
    path = gguf_gemma.write_gemma_gguf(model, tmp_path / "gemma2-caps.gguf", "gemma2")
    graph, weights = from_gguf(path, cache_len=40)
    assert all(n.attrs["softcap"] == 0.5 for n in graph.nodes if n.op == "attention")
    logits, _ = gguf_models.decode_steps(graph, weights, GEMMA_PROMPT, 1)
    with torch.no_grad():
        expected = model(torch.tensor([GEMMA_PROMPT])).logits[0].numpy()
    assert np.abs(expected).max() <= 2.0
    assert np.abs(logits - expected).max() <= F32_BOUND
