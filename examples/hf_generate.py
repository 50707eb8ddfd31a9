"""Greedy generation with a Hugging Face Llama compiled by optgraph, checked against `transformers`.

A small `LlamaForCausalLM` is built from a config with seeded random weights (no hub access
needed). Two programs are imported with `og.from_torch` and compiled with `og.compile`:

- **prefill**: `input_ids [1,P]`, `position_ids [1,P]` -> logits `[1,P,V]` and every layer's key
  and value rows, padded with zeros to the static cache length `[1,Hkv,L,D]`;
- **decode step** over a static cache (transformers' `StaticCache`, its tensors being the step's
  inputs): `input_ids [1,1]`, `cache_position [1]`, the caches -> logits and the updated caches.
  The cache update (`index_copy_` in transformers) imports as `kv_cache_write`; on the GPU each
  updated cache is bound to its input array, so the step writes its one new row in place.

Then 32 tokens are generated greedily, on the CPU (the planned executor) or with `--device cuda`
on the GPU (falls back to the CPU, saying why, where no GPU is usable), and compared token for
token with `model.generate(do_sample=False)` on the same model. Exit status 1 when they differ.

    python examples/hf_generate.py [--device cuda] [--layers 2 --hidden 64 --heads 4 \
        --kv-heads 2 --vocab 256 --dtype f32 --prompt-len 8 --new-tokens 32 --seed 0]

`--attention eager` (default) exports transformers' eager attention (matmul, additive mask,
softmax, matmul), `--attention sdpa` its `scaled_dot_product_attention`; the importer raises both
to optgraph's `attention` (the decode step's: over `cache_position + 1` keys of the cache).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from transformers import DynamicCache, LlamaConfig, LlamaForCausalLM, StaticCache
from transformers.cache_utils import DynamicLayer, StaticLayer

import optgraph as og
from optgraph.codegen.plan.in_place_outputs import in_place_candidates

TORCH_DTYPES = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}


def build_model(args: argparse.Namespace) -> LlamaForCausalLM:
    """A random-initialised Llama of the given sizes (seeded, eval mode, `args.dtype`)."""
    torch.manual_seed(args.seed)
    config = LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.ffn or 2 * args.hidden,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=max(256, args.prompt_len + args.new_tokens),
        # Wider than the default 0.02 so that random logits have clear winners.
        initializer_range=args.init_std,
        attn_implementation=args.attention,
    )
    model = LlamaForCausalLM(config).to(TORCH_DTYPES[args.dtype]).eval()
    model.generation_config.eos_token_id = None  # generate exactly max_new_tokens
    model.generation_config.pad_token_id = 0
    return model


def _unslid(cache: Any, full: Callable[[], Any]) -> None:
    """Each sliding-window layer of `cache` replaced by a full one made by `full` (every row at
    its position, like the other layers' caches): the model's mask still applies the window,
    computed from the positions, where a sliding layer's rolling buffer and its length kept as a
    Python int (its mask at position 0) would be traced into the step (gpt-oss)."""
    cache.layers = [
        full() if getattr(layer, "is_sliding", False) else layer for layer in cache.layers
    ]


class Prefill(nn.Module):
    """The prompt through the model: logits and each layer's K and V padded to `max_len` rows.

    Holds the model's own submodules under their own attribute names, so the imported weights
    carry `LlamaForCausalLM`'s state_dict names (`model.layers.0.self_attn.q_proj.weight`)."""

    def __init__(self, llama: LlamaForCausalLM, max_len: int) -> None:
        super().__init__()
        self.model, self.lm_head, self.max_len = llama.model, llama.lm_head, max_len

    def forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor) -> tuple[Any, ...]:
        cache = DynamicCache(config=self.model.config)
        _unslid(cache, DynamicLayer)
        out = self.model(
            input_ids=input_ids, position_ids=position_ids, past_key_values=cache, use_cache=True
        )
        rows = self.max_len - input_ids.shape[1]
        caches = []
        for layer in cache.layers:
            caches += [F.pad(layer.keys, (0, 0, 0, rows)), F.pad(layer.values, (0, 0, 0, rows))]
        return (self.lm_head(out.last_hidden_state), *caches)


class DecodeStep(nn.Module):
    """One token through the model over a static cache whose tensors are the step's inputs
    (`caches` = layer 0 keys, layer 0 values, layer 1 keys, ...): transformers updates them in
    place with `index_copy_`, which torch.export returns as the updated caches."""

    def __init__(self, llama: LlamaForCausalLM, max_len: int) -> None:
        super().__init__()
        self.model, self.lm_head, self.max_len = llama.model, llama.lm_head, max_len

    def forward(
        self, input_ids: torch.Tensor, cache_position: torch.Tensor, *caches: torch.Tensor
    ) -> torch.Tensor:
        cache = StaticCache(config=self.model.config, max_cache_len=self.max_len)
        _unslid(cache, lambda: StaticLayer(max_cache_len=self.max_len))
        first = caches[0]
        cache.early_initialization(
            first.shape[0], first.shape[1], first.shape[3], first.dtype, first.device
        )
        for index, layer in enumerate(cache.layers):
            layer.keys, layer.values = caches[2 * index], caches[2 * index + 1]
            # rows already written; a copy, as transformers advances it in place
            layer.cumulative_length = cache_position.clone()
        out = self.model(
            input_ids=input_ids,
            position_ids=cache_position[None],
            cache_position=cache_position,
            past_key_values=cache,
            use_cache=True,
        )
        return self.lm_head(out.last_hidden_state)


@dataclass
class Steps:
    """The two imported graphs, the weights they read, and where each cache goes."""

    prefill: og.Graph
    decode: og.Graph
    prefill_weights: dict[str, np.ndarray]
    decode_weights: dict[str, np.ndarray]  # the same parameters; the import constants differ
    cache_inputs: list[str]  # the decode step's cache inputs, in layer order (k, v, k, v, ...)
    cache_outputs: dict[str, str]  # decode cache input -> the output that is its updated value
    logits: str  # the decode step's logits output


def import_steps(model: LlamaForCausalLM, prompt_len: int, max_len: int) -> Steps:
    """Both steps through torch.export and `og.from_torch`, traced at their static shapes."""
    config = model.config
    head_dim = getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads
    dtype = model.dtype
    ids = torch.zeros(1, prompt_len, dtype=torch.int64)
    prefill, weights = og.from_torch(Prefill(model, max_len), (ids, torch.arange(prompt_len)[None]))
    caches = [
        torch.zeros(1, config.num_key_value_heads, max_len, head_dim, dtype=dtype)
        for _ in range(2 * config.num_hidden_layers)
    ]
    args = (torch.zeros(1, 1, dtype=torch.int64), torch.tensor([prompt_len]), *caches)
    decode, decode_weights = og.from_torch(DecodeStep(model, max_len), args)
    cache_inputs = [i.name for i in decode.inputs[2:]]
    # The updated caches: each a kv_cache_write output whose cache operand is the input itself.
    written = {source: output for output, source in in_place_candidates(decode).items()}
    missing = [name for name in cache_inputs if name not in written]
    if missing:
        raise og.OptGraphError(
            f"hf_generate: the decode step's cache write did not import as kv_cache_write for "
            f"{', '.join(missing)}"
        )
    others = [n for n in decode.output_names() if n not in written.values()]
    if len(others) != 1:
        raise og.OptGraphError(
            f"hf_generate: expected one decode output besides the caches: {others}"
        )
    return Steps(prefill, decode, weights, decode_weights, cache_inputs, written, others[0])


def _prefill_feed(prompt: np.ndarray) -> dict[str, np.ndarray]:
    return {"input_ids": prompt, "position_ids": np.arange(prompt.shape[1], dtype=np.int64)[None]}


def generate_cpu(steps: Steps, prompt: np.ndarray, new_tokens: int) -> list[int]:
    """Greedy tokens with both programs compiled for the CPU (planned executor)."""
    prefill = og.compile(steps.prefill, target="cpu")
    decode = og.compile(steps.decode, target="cpu")
    out = prefill.run(_prefill_feed(prompt), steps.prefill_weights)
    names = steps.prefill.output_names()
    caches = dict(zip(steps.cache_inputs, (out[n] for n in names[1:])))
    tokens = [int(np.argmax(out[names[0]][0, -1]))]
    logits_name = steps.logits
    position = prompt.shape[1]
    while len(tokens) < new_tokens:
        feed = {
            "input_ids": np.array([[tokens[-1]]], np.int64),
            "cache_position": np.array([position], np.int64),
            **caches,
        }
        out = decode.run(feed, steps.decode_weights)
        caches = {name: out[steps.cache_outputs[name]] for name in steps.cache_inputs}
        tokens.append(int(np.argmax(out[logits_name][0, -1])))
        position += 1
    return tokens


def generate_cuda(steps: Steps, prompt: np.ndarray, new_tokens: int) -> list[int]:
    """Greedy tokens on the GPU: the decode step bound once to device arrays, each updated cache
    bound to its input's array (written in place), then one launch per token."""
    prefill = og.compile(steps.prefill, target="cuda")
    decode = og.compile(steps.decode, target="cuda")
    import cupy as cp  # only here: the CPU path runs without CuPy

    out = prefill.run(_prefill_feed(prompt), steps.prefill_weights)
    names = steps.prefill.output_names()
    dev = {name: cp.asarray(out[n]) for name, n in zip(steps.cache_inputs, names[1:])}
    dev["input_ids"] = cp.zeros((1, 1), cp.int64)
    dev["cache_position"] = cp.zeros((1,), cp.int64)
    logits_name = steps.logits
    vocab = steps.decode.value_types()[logits_name].shape[-1]
    results = {output: dev[source] for source, output in steps.cache_outputs.items()}
    results[logits_name] = cp.zeros((1, 1, vocab), out[names[0]].dtype)
    step = decode.bind(dev, results, steps.decode_weights)
    tokens = [int(np.argmax(out[names[0]][0, -1]))]
    position = prompt.shape[1]
    while len(tokens) < new_tokens:
        dev["input_ids"].fill(tokens[-1])
        dev["cache_position"].fill(position)
        cp.cuda.Device().synchronize()  # the inputs are written before the step reads them
        step()
        cp.cuda.Device().synchronize()
        tokens.append(int(cp.argmax(results[logits_name][0, -1])))
        position += 1
    decode.close()
    prefill.close()
    return tokens


def reference_tokens(model: LlamaForCausalLM, prompt: np.ndarray, new_tokens: int) -> list[int]:
    """transformers' own greedy generation on the same model."""
    with torch.no_grad():
        out = model.generate(
            torch.from_numpy(prompt), do_sample=False, max_new_tokens=new_tokens,
            attention_mask=torch.ones(prompt.shape, dtype=torch.int64),
        )  # fmt: skip
    return [int(t) for t in out[0, prompt.shape[1] :]]


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--hidden", type=int, default=64)
    p.add_argument("--heads", type=int, default=4)
    p.add_argument("--kv-heads", type=int, default=2)
    p.add_argument("--ffn", type=int, default=0, help="MLP width (default: 2 x hidden)")
    p.add_argument("--vocab", type=int, default=256)
    p.add_argument("--dtype", choices=tuple(TORCH_DTYPES), default="f32")
    p.add_argument("--attention", choices=("eager", "sdpa"), default="eager")
    p.add_argument("--init-std", type=float, default=0.2, help="random weights' std")
    p.add_argument("--prompt-len", type=int, default=8)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--seed", type=int, default=0)
    return p.parse_args(argv)


def _generate(args: argparse.Namespace, steps: Steps, prompt: np.ndarray) -> tuple[str, list[int]]:
    """(where it ran, the tokens): on the GPU when asked and usable, else on the CPU."""
    if args.device == "cuda":
        try:
            return "cuda", generate_cuda(steps, prompt, args.new_tokens)
        except og.OptGraphError as err:
            print(f"hf_generate: --device cuda: {err.message}; generating on the CPU instead")
        except ImportError as err:
            print(f"hf_generate: --device cuda: {err}; generating on the CPU instead")
    return "cpu", generate_cpu(steps, prompt, args.new_tokens)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    model = build_model(args)
    prompt = np.random.default_rng(args.seed).integers(0, args.vocab, (1, args.prompt_len))
    try:
        steps = import_steps(model, args.prompt_len, args.prompt_len + args.new_tokens)
    except og.OptGraphError as err:
        print(err, file=sys.stderr)
        return 1
    device, tokens = _generate(args, steps, prompt)
    expected = reference_tokens(model, prompt, args.new_tokens)
    print(f"prompt:        {prompt[0].tolist()}")
    print(f"optgraph ({device}): {tokens}")
    print(f"transformers:  {expected}")
    same = tokens == expected
    first = next((i for i, (a, b) in enumerate(zip(tokens, expected)) if a != b), None)
    print("equal token for token" if same else f"DIFFERENT from token {first}")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
