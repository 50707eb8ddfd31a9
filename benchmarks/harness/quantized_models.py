"""The models of bench_quantized.py: Llama steps whose matrices are stored f16, Q8_0 or in
llama.cpp's Q4_K_M mix, and valid random blocks for their weights.

- `stored_dtypes(config, weight_set)`: each matrix's stored dtype (`LlamaWeights.dtypes`).
  `q8_0`: every matrix (the embedding table and the logits head too), as llama.cpp's Q8_0.
  `q4_k_m`: llama.cpp's Q4_K_M rule (`llama_tensor_get_type`, llama-quant.cpp): q4_k by
  default (the embedding table included); q6_k for the logits head (`output.weight`), and for
  `attn_v` and `ffn_down` of the layers `use_more_bits` picks (the first and last eighth and every
  third between: layers 0, 3, 6 and 7 of 8); a k-quant whose rows are not whole 256-value blocks
  falls back as llama.cpp's `tensor_type_fallback` does (q4_k -> q5_0, q6_k -> q8_0): the
  launch-bound shape's `ffn_down` (1376 values a row).
- `llama_graph(sizes, weight_set, layers=None)`: `llama_ir`'s graph of those sizes with matrices
  stored `[out, in]` (read with `transpose_b`, as GGUF stores them; the default pipeline's
  `transpose-weights` turns the f16 ones back), norms in the step's dtype; `layers` keeps the mix
  of the first layers of the full model (the one- or two-layer check models).
- `draw_weights(graph, xp, seed)`: seeded weights with NumPy or CuPy (`xp`): float matrices
  ~ N(0,1)/√K, norm weights ~ 1 + 0.1·N(0,1), quantized ones uniformly random bytes with their
  f16 scales set so the decoded values have about the same spread (`BLOCK_RMS`: the RMS of a
  block's values per unit of its scale, from the bytes' uniform distribution).

No CuPy import here: the scripts answer `--help` without it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

from optgraph.frontends.llama_config import (
    MATRIX_ROLES,
    LlamaConfig,
    LlamaStep,
    LlamaWeights,
    weight_shapes,
)
from optgraph.frontends.llama_ir import llama_ir
from optgraph.ir.graph import QUANT_BLOCKS, Graph

WEIGHT_SETS = ("f16", "q8_0", "q4_k_m")
# llama.cpp's fallback for a k-quant whose rows are not whole super-blocks of 256 values.
K_FALLBACK = {"q4_k": "q5_0", "q6_k": "q8_0"}
# The RMS of a block's decoded values per unit of its f16 scale, the bytes uniformly random:
# q8_0 d·q (q int8): √5461.5; q5_0 d·(q − 16): √85.5; q4_k (d·sc)·q − (dmin·m) with
# dmin = 7.5·d (so the mean is about 0; sc, m ~ U{0..63}, q ~ U{0..15}): √65257;
# q6_k (d·sc)·(q − 32) with sc int8: √(5461.5 · 341.5).
BLOCK_RMS = {"q8_0": 73.9, "q5_0": 9.25, "q4_k": 255.5, "q6_k": 1365.7}
# Byte offsets of each block's f16 fields and their size in units of d.
HALVES: Mapping[str, tuple[tuple[int, float], ...]] = {
    "q8_0": ((0, 1.0),),
    "q5_0": ((0, 1.0),),
    "q4_k": ((0, 1.0), (2, 7.5)),
    "q6_k": ((208, 1.0),),
}


def use_more_bits(layer: int, layers: int) -> bool:
    """llama.cpp's choice of the layers that get more bits in the _M mixes."""
    return layer < layers // 8 or layer >= 7 * layers // 8 or (layer - layers // 8) % 3 == 2


def _fitted(dtype: str, row: int) -> str:
    """`dtype`, or llama.cpp's fallback when a row of `row` values is not whole blocks."""
    if row % QUANT_BLOCKS[dtype][0] == 0:
        return dtype
    fallback = K_FALLBACK[dtype]
    assert row % QUANT_BLOCKS[fallback][0] == 0, (dtype, row)
    return fallback


def stored_dtypes(
    config: LlamaConfig, weight_set: str, layers: int | None = None
) -> dict[str, str]:
    """Stored dtype of each matrix by its `llama_ir` short name (module docstring); `layers`
    (default: all) keeps only the first layers' names, with the full model's mix."""
    if weight_set not in WEIGHT_SETS:
        raise ValueError(f"weights must be one of {', '.join(WEIGHT_SETS)}, got {weight_set!r}")
    if weight_set == "f16":
        return {}
    kept = config.layers if layers is None else layers
    out: dict[str, str] = {}
    for (role, layer), shape in weight_shapes(config, out_in=True).items():
        if role not in MATRIX_ROLES or (layer is not None and layer >= kept):
            continue
        name = role if layer is None else f"l{layer}.{role}"
        dtype = "q8_0" if weight_set == "q8_0" else "q4_k"
        if weight_set == "q4_k_m":
            more = layer is not None and use_more_bits(layer, config.layers)
            if role == "lm_head" or (role in ("wv", "w_down") and more):
                dtype = "q6_k"
        out[name] = _fitted(dtype, shape[-1])
    return out


def llama_config(sizes: Mapping[str, Any]) -> tuple[LlamaConfig, LlamaStep]:
    """`sizes` (head_to_head's LLAMA_* dictionaries) as llama_ir's config and step."""
    config = LlamaConfig(
        layers=sizes["layers"], hidden=sizes["hidden"], heads=sizes["heads"],
        kv_heads=sizes["kv_heads"], ffn=sizes["ffn"], vocab=sizes["vocab"],
    )  # fmt: skip
    step = LlamaStep(
        dtype=sizes["dtype"], batch=sizes["batch"], seq=sizes["seq"],
        cache_len=sizes["cache_len"], mode=sizes["mode"],
    )  # fmt: skip
    return config, step


def llama_graph(sizes: Mapping[str, Any], weight_set: str, layers: int | None = None) -> Graph:
    """The step of `sizes` with `weight_set`'s matrices; `layers`: only the first layers, with
    the full model's mix."""
    import optgraph as og

    config, step = llama_config(sizes)
    dtypes = stored_dtypes(config, weight_set, layers)
    if layers is not None:
        config = dataclasses.replace(config, layers=layers)
    return og.parse(llama_ir(config, step, LlamaWeights(out_in=True, dtypes=dtypes)))


def block_bytes(dtype: str, shape: tuple[int, ...], xp: Any, rng: Any) -> Any:
    """Random valid blocks of `dtype` for values of `shape` (`uint8` of the blocks' bytes,
    `TensorType.array_shape`), drawn with `rng` of `xp` (NumPy or CuPy)."""
    elements, nbytes = QUANT_BLOCKS[dtype]
    rows, k = math.prod(shape[:-1]), shape[-1]
    blocks = rows * (k // elements)
    raw = xp.floor(rng.random((blocks, nbytes), dtype=xp.float32) * 256.0).astype(xp.uint8)
    d = 1.0 / (BLOCK_RMS[dtype] * math.sqrt(k))
    for at, times in HALVES[dtype]:
        spread = rng.random(blocks, dtype=xp.float32) * 0.5 + 0.75
        half = (spread * (d * times)).astype(xp.float16)
        raw[:, at : at + 2] = half.view(xp.uint8).reshape(blocks, 2)
    return raw.reshape(*shape[:-1], k // elements * nbytes)


def draw_weights(graph: Graph, xp: Any, seed: int = 0) -> dict[str, Any]:
    """Seeded weights of `graph` (module docstring), NumPy or CuPy arrays by `xp`."""
    from optgraph.reference.kernels import numpy_dtype

    rng = xp.random.default_rng(seed)
    out: dict[str, Any] = {}
    for w in graph.weights:
        shape = w.type.shape
        if w.type.is_quantized:
            out[w.name] = block_bytes(w.type.dtype, shape, xp, rng)
            continue
        values = rng.standard_normal(shape, dtype=xp.float32)
        values = 1.0 + 0.1 * values if len(shape) == 1 else values / math.sqrt(shape[-1])
        out[w.name] = values.astype(numpy_dtype(w.type.dtype))
    return out


def stored_megabytes(graph: Graph) -> float:
    """Every weight's stored bytes, in MB (10^6)."""
    return sum(w.type.nbytes for w in graph.weights) / 1e6


def mix_summary(graph: Graph) -> str:
    """`q4_k 50, q6_k 9, f16 17`: how many weights of each stored dtype."""
    counts: dict[str, int] = {}
    for w in graph.weights:
        counts[w.type.dtype] = counts.get(w.type.dtype, 0) + 1
    return ", ".join(f"{dtype} {n}" for dtype, n in sorted(counts.items()))


__all__ = [
    "WEIGHT_SETS",
    "block_bytes",
    "draw_weights",
    "llama_config",
    "llama_graph",
    "mix_summary",
    "stored_dtypes",
    "stored_megabytes",
    "use_more_bits",
]
