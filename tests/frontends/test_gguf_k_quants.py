"""GGUF files of the types `gguf.quants.quantize` cannot make (Q4_K, Q5_K, Q6_K, MXFP4), end to
end: their matrices valid random blocks written through GGUFWriter with the raw type, one file a
Q4_K_M-like mix (q6_k for `output.weight` and `attn_v`). `og.from_gguf` and the reference decode
steps against transformers' GGUF loading (which dequantizes with gguf): logits within f32's
rounding, greedy tokens equal; and `optgraph import` + `optgraph run --weights FILE.gguf --check`
on the CPU.

The files are `gguf_models.write_gguf`'s (metadata, names, llama's permuted q/k rows) with its
`_add_tensor` swapped for `_add_random_blocks`: the model's matrices are dropped for random blocks
(`reference.dequantize.random_blocks`, values ~ N(0,1)/sqrt(K), seeded by the tensor's name), so
the file is the model for optgraph and transformers alike. Rows must be multiples of 256 (32 for
MXFP4): `K_QUANT_SIZES`.
"""

from __future__ import annotations

import math
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import optgraph as og
from optgraph.cli.main import main
from optgraph.frontends.gguf import from_gguf
from optgraph.ir.graph import TensorType
from optgraph.reference.dequantize import random_blocks
from tests.frontends import gguf_models

pytest.importorskip("gguf")
pytest.importorskip("transformers")
pytest.importorskip("accelerate")  # transformers' GGUF loading needs it

PROMPT = [3, 17, 99, 5, 200, 42]
NEW_TOKENS = 16
# f32 steps on the same dequantized values (bit for bit with gguf's): only the sums' order
# differs; the largest logit difference seen 5.9e-6 (llama-q4_k_m; an all-q5_k llama 1.6e-5),
# logits up to ~7.
BOUND = 1e-4


K_QUANT_SIZES: dict[str, Any] = {"hidden_size": 256, "intermediate_size": 512}


def tensor_type(ftype: str, name: str) -> str:
    """The ggml type of the matrix `name` in a file of type `ftype`; `Q4_K_M`: llama.cpp's mix
    of that name in short (q6_k for `output.weight` and `attn_v`, q4_k elsewhere)."""
    if ftype == "Q4_K_M":
        return "Q6_K" if name == "output.weight" or ".attn_v." in name else "Q4_K"
    return ftype


def _add_random_blocks(w: Any, name: str, a: np.ndarray, ftype: str) -> None:
    import gguf

    if a.ndim == 1:
        w.add_tensor(name, a.astype(np.float32))
        return
    qtype = gguf.GGMLQuantizationType[tensor_type(ftype, name)]
    rng = np.random.default_rng(zlib.crc32(name.encode()))
    t = TensorType(qtype.name.lower(), tuple(a.shape))
    data = random_blocks(rng, t, 1.0 / math.sqrt(a.shape[-1]))
    w.add_tensor(name, data, raw_shape=data.shape, raw_dtype=qtype)


def _file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arch: str, ftype: str, **overrides: Any
) -> Path:
    model = gguf_models.hf_model(arch, **(K_QUANT_SIZES | overrides))
    with monkeypatch.context() as patch:
        patch.setattr(gguf_models, "_add_tensor", _add_random_blocks)
        return gguf_models.write_gguf(model, tmp_path / f"{arch}-{ftype}.gguf", arch, ftype)


@pytest.mark.parametrize(
    "arch, ftype, overrides",
    [
        ("llama", "Q4_K_M", {}),
        ("qwen3", "Q5_K", {}),
        ("qwen2", "Q6_K", {"tie_word_embeddings": True}),
        ("llama", "MXFP4", {}),
    ],
    ids=["llama-q4_k_m", "qwen3-q5_k", "qwen2-tied-q6_k", "llama-mxfp4"],
)
def test_random_block_files_decode_as_transformers_loads_them(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    arch: str,
    ftype: str,
    overrides: dict[str, Any],
) -> None:
    path = _file(tmp_path, monkeypatch, arch, ftype, **overrides)
    graph, weights = from_gguf(path, cache_len=32)
    og.verify(graph)
    types = graph.value_types()
    for name in ("token_embd.weight", "blk.1.attn_q.weight", "blk.0.attn_v.weight"):
        assert types[name].dtype == tensor_type(ftype, name).lower()
        assert weights[name].dtype == np.uint8
    if ftype == "Q4_K_M":
        assert types["output.weight"].dtype == "q6_k"
        assert types["blk.0.ffn_down.weight"] == TensorType("q4_k", (256, 512))
    model = gguf_models.load_with_transformers(path)
    with torch.no_grad():
        expected_logits = model(torch.tensor([PROMPT])).logits[0].float().numpy()
    expected_tokens = gguf_models.greedy_reference(model, PROMPT, NEW_TOKENS)
    logits, tokens = gguf_models.decode_steps(graph, weights, PROMPT, NEW_TOKENS)
    difference = np.abs(logits - expected_logits).max()
    print(f"{arch} {ftype}: largest logit difference {difference:.2e}")
    assert difference <= BOUND
    assert tokens == expected_tokens


@pytest.mark.parametrize("ftype", ["Q4_K_M", "MXFP4"])
def test_import_then_run_on_the_cpu_with_the_file_as_weights(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], ftype: str
) -> None:
    path = _file(tmp_path, monkeypatch, "llama", ftype, num_hidden_layers=1)
    ir = tmp_path / "model.ir"
    argv = ["import", str(path), "-o", str(ir), "--cache-len", "16", "--seq", "2"]
    assert main(argv) == 0
    text = ir.read_text()
    if ftype == "Q4_K_M":
        assert "weight %blk.0.attn_q.weight : q4_k[256,256]" in text
        assert "weight %blk.0.attn_v.weight : q6_k[128,256]" in text
        assert "weight %output.weight : q6_k[256,256]" in text
    else:
        assert "weight %blk.0.ffn_down.weight : mxfp4[256,512]" in text
    gguf_models.run_from_the_file(path, ir, tmp_path)
    assert "Traceback" not in capsys.readouterr().err
