"""GGUF mixtures of experts: `qwen3moe` files and Mixtral-style `llama` files with experts
(tests/frontends/gguf_moe.py writes them as llama.cpp's converter does) import as graphs whose
MLPs are a router product and one `moe` node, and decode (the reference interpreter, f32) as
the oracles do: transformers' GGUF loading for qwen3moe, a `MixtralForCausalLM` holding the
file's dequantized values for Mixtral-style files (transformers loads those as a dense Llama).
Logits within f32 rounding, 32 greedy tokens equal; F32, Q8_0 and a Q4_K_M-like mix; prefill;
`optgraph import` + `optgraph run --check` on the CPU; one clear error for what is not
supported."""

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
from tests.frontends import gguf_models, gguf_moe

gguf = pytest.importorskip("gguf")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers' GGUF loading needs it

PROMPT = [3, 17, 99, 5, 200, 42]
NEW_TOKENS = 32
# f32 steps on the same values as the oracle (gguf's dequantization, bit for bit): only the
# order of sums differs. Largest logit differences seen: 5.8e-6 to 2.2e-5 (qwen3moe Q4_K_M).
BOUND = 1e-4


def _file(tmp_path: Path, arch: str, ftype: str, **kwargs: Any) -> Path:
    sizes = gguf_moe.K_QUANT_SIZES if ftype == "Q4_K_M" else {}
    if arch == "mixtral":
        sizes = {k: v for k, v in sizes.items() if k in ("hidden_size", "intermediate_size")}
    overrides = kwargs.pop("overrides", {})
    model = gguf_moe.hf_moe_model(arch, **(sizes | overrides))
    path = tmp_path / f"{arch}-{ftype}.gguf"
    return gguf_moe.write_moe_gguf(model, path, arch, ftype, **kwargs)


def _oracle(arch: str, path: Path) -> Any:
    return gguf_moe.load_qwen3moe(path) if arch == "qwen3moe" else gguf_moe.mixtral_from_file(path)


def _expected(model: Any, prompt: list[int], new_tokens: int) -> tuple[np.ndarray, list[int]]:
    with torch.no_grad():
        logits = model(torch.tensor([prompt])).logits[0].float().numpy()
    return logits, gguf_models.greedy_reference(model, prompt, new_tokens)


@pytest.mark.parametrize(
    ("arch", "ftype"),
    [("qwen3moe", "F32"), ("qwen3moe", "Q8_0"), ("qwen3moe", "Q4_K_M"),
     ("mixtral", "F32"), ("mixtral", "Q8_0"), ("mixtral", "Q4_K_M")],
)  # fmt: skip
def test_moe_files_decode_as_their_oracles(tmp_path: Path, arch: str, ftype: str) -> None:
    path = _file(tmp_path, arch, ftype)
    graph, weights = from_gguf(path, cache_len=48)
    og.verify(graph)
    types = graph.value_types()
    down = types["blk.1.ffn_down_exps.weight"]
    assert down.dtype == gguf_moe.tensor_type(ftype, "blk.1.ffn_down_exps.weight").lower()
    assert types["blk.0.ffn_gate_inp.weight"].dtype == "f32"  # llama.cpp keeps the router
    logits, tokens = gguf_models.decode_steps(graph, weights, PROMPT, NEW_TOKENS)
    expected_logits, expected_tokens = _expected(_oracle(arch, path), PROMPT, NEW_TOKENS)
    difference = np.abs(logits - expected_logits).max()
    print(f"{arch} {ftype}: largest logit difference {difference:.2e}")
    assert difference <= BOUND
    assert tokens == expected_tokens


def test_the_mlp_is_a_router_product_and_one_moe(tmp_path: Path) -> None:
    qwen, _ = from_gguf(_file(tmp_path, "qwen3moe", "Q8_0"), cache_len=16)
    mixtral, _ = from_gguf(_file(tmp_path, "mixtral", "F16"), cache_len=16, dtype="f32")
    for graph, experts in ((qwen, 8), (mixtral, 6)):
        ops = [n.op for n in graph.nodes]
        assert ops.count("moe") == 2
        assert ops.count("matmul") == 2 * 5 + 1  # q, k, v, o and the router a layer; logits
        node = next(n for n in graph.nodes if n.op == "moe")
        assert node.operands == (
            "l0.mlp_in", "l0.router_logits", "blk.0.ffn_gate_exps.weight",
            "blk.0.ffn_up_exps.weight", "blk.0.ffn_down_exps.weight",
        )  # fmt: skip
        assert graph.value_types()["l0.router_logits"].shape == (1, experts)
        assert node.attrs["k"] == 2
    qwen_moe = next(n for n in qwen.nodes if n.op == "moe")
    assert qwen_moe.attrs == {"k": 2, "norm_topk": True, "routing": "softmax_topk"}
    mixtral_moe = next(n for n in mixtral.nodes if n.op == "moe")
    assert mixtral_moe.attrs == {"k": 2, "routing": "topk_softmax"}
    # f16 stacks are read as stored (a cast would widen all E experts); the router is cast.
    types = mixtral.value_types()
    assert types["blk.0.ffn_up_exps.weight"].dtype == "f16"
    casts = {n.operands[0] for n in mixtral.nodes if n.op == "cast"}
    assert "blk.0.ffn_gate_inp.weight" not in casts  # F32 in the file
    assert not any("_exps" in c for c in casts) and "blk.0.attn_q.weight" in casts


def test_f16_stacks_in_an_f32_step(tmp_path: Path) -> None:
    path = _file(tmp_path, "mixtral", "F16")
    graph, weights = from_gguf(path, cache_len=48, dtype="f32")
    logits, tokens = gguf_models.decode_steps(graph, weights, PROMPT, 8)
    expected_logits, expected_tokens = _expected(gguf_moe.mixtral_from_file(path), PROMPT, 8)
    assert np.abs(logits - expected_logits).max() <= BOUND
    assert tokens == expected_tokens


def test_qwen3moe_without_renormalisation_matches_the_source_model(tmp_path: Path) -> None:
    """`expert_weights_norm` false: the k softmax probabilities as they are (norm_topk_prob
    false); the F32 file holds the source model's values, which is then the oracle."""
    model = gguf_moe.hf_moe_model("qwen3moe", norm_topk_prob=False)
    path = gguf_moe.write_moe_gguf(model, tmp_path / "q.gguf", "qwen3moe", norm=False)
    graph, weights = from_gguf(path, cache_len=48)
    node = next(n for n in graph.nodes if n.op == "moe")
    assert "norm_topk" not in node.attrs
    logits, tokens = gguf_models.decode_steps(graph, weights, PROMPT, NEW_TOKENS)
    expected_logits, expected_tokens = _expected(model, PROMPT, NEW_TOKENS)
    assert np.abs(logits - expected_logits).max() <= BOUND
    assert tokens == expected_tokens
    # The same model written without the key (as the converter does): renormalised.
    path = gguf_moe.write_moe_gguf(model, tmp_path / "r.gguf", "qwen3moe")
    renormalised, _ = gguf_models.decode_steps(*from_gguf(path, cache_len=48), PROMPT, 1)
    assert np.abs(renormalised - expected_logits).max() > 100 * BOUND  # the key matters


@pytest.mark.parametrize("arch", ["qwen3moe", "mixtral"])
def test_prefill_logits_match_for_every_position(tmp_path: Path, arch: str) -> None:
    path = _file(tmp_path, arch, "Q8_0")
    graph, weights = from_gguf(path, mode="prefill", seq=len(PROMPT))
    feed = {"tokens": np.array(PROMPT, np.int32), "pos": np.arange(len(PROMPT), dtype=np.int32)}
    logits = run_reference(graph, feed, weights)["logits"]
    expected, _ = _expected(_oracle(arch, path), PROMPT, 1)
    assert np.abs(logits - expected).max() <= BOUND


def test_import_then_run_on_the_cpu_with_the_file_as_weights(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _file(tmp_path, "qwen3moe", "Q4_K_M", overrides={"num_hidden_layers": 1})
    ir = tmp_path / "model.ir"
    assert main(["import", str(path), "-o", str(ir), "--cache-len", "16", "--seq", "2"]) == 0
    text = ir.read_text()
    assert "weight %blk.0.ffn_gate_exps.weight : q4_k[8,256,256]" in text
    assert "weight %blk.0.ffn_down_exps.weight : q6_k[8,256,256]" in text
    assert "= moe(%l0.mlp_in, %l0.router_logits, %blk.0.ffn_gate_exps.weight" in text
    gguf_models.run_from_the_file(path, ir, tmp_path)
    assert "Traceback" not in capsys.readouterr().err


def _shared_expert(w: Any, tensors: dict[str, np.ndarray]) -> None:
    tensors["blk.0.ffn_gate_inp_shexp.weight"] = np.zeros(64, np.float32)


def _sigmoid_gating(w: Any, tensors: dict[str, np.ndarray]) -> None:
    w.add_expert_gating_func(gguf.ExpertGatingFuncType.SIGMOID)


def _per_expert(w: Any, tensors: dict[str, np.ndarray]) -> None:
    stack = tensors.pop("blk.0.ffn_gate_exps.weight")
    for e, matrix in enumerate(stack):
        tensors[f"blk.0.ffn_gate.{e}.weight"] = matrix


@pytest.mark.parametrize(
    ("arch", "kwargs", "message"),
    [
        ("qwen3moe", {"file_arch": "qwen2moe"},
         ("architecture 'qwen2moe' is not supported (its shared expert (ffn_*_shexp) is not "
         "supported); supported: llama, qwen2, qwen3, phi3, gemma2, gemma3, qwen3moe, gpt-oss")),
        ("qwen3moe", {"file_arch": "gpt-oss"}, ("tensors missing for a gpt-oss model: "
         "blk.0.post_attention_norm.weight, blk.0.attn_sinks.weight, blk.0.ffn_gate_inp.bias")),
        ("qwen3moe", {"edit": _shared_expert},
         ("shared experts (blk.0.ffn_gate_inp_shexp.weight) are not supported; supported: "
         "routed experts alone (qwen3moe, Mixtral-style llama)")),
        ("mixtral", {"edit": _sigmoid_gating},
         "expert gating 2 with weights scale 1.0 is not supported (softmax gating, 1: unscaled)"),
        ("mixtral", {"edit": _per_expert},
         ("per-expert tensors (blk.0.ffn_gate.0.weight, ...) are not supported: the experts must "
         "be stacked")),
    ],
)  # fmt: skip
def test_unsupported_variants_get_one_clear_error(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    arch: str,
    kwargs: dict[str, Any],
    message: str,
) -> None:
    model = gguf_moe.hf_moe_model(arch, num_hidden_layers=1)
    path = gguf_moe.write_moe_gguf(model, tmp_path / "bad.gguf", arch, **kwargs)
    out = tmp_path / "bad.ir"
    assert main(["import", str(path), "-o", str(out)]) == 1
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert not out.exists()
