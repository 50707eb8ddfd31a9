"""A Hugging Face causal LM's generation steps as graphs: a prefill and a decode step over KV
caches, from the checkpoint's config alone, for every architecture of `ARCHITECTURES`.

    checkpoint = open_checkpoint("dir")
    model = HFModel(checkpoint, dtype="f32")       # transformers' model on empty weights
    prefill = model.prefill_step(bucket=16, context=64)   # StepGraph: graph, roles, constants
    decode = model.decode_step(context=64)         # decode.tensor_name(w): its checkpoint tensor

The model is built by transformers from the config with accelerate's `init_empty_weights` (no
random weights are made), and every parameter replaced by a zero-stride placeholder of its
dtype and shape (one element of memory): `torch.export` needs only types, and `og.from_torch(...,
read_parameters=False)` declares the parameters as weights by name without reading them. The
weights are then the checkpoint's memory-mapped arrays (`StepGraph.tensor_name`: tied parameters
found under any of their names; a checkpoint of the base model without its `model.` prefix
too), every parameter checked for presence and shape when the model is built.

The steps, exported through the model's own `forward` (so weight names are its state_dict's):

- prefill: `input_ids [1,S]`, `position_ids [1,S]`, `last [1,1]` (the row whose logits to keep:
  the prompt is padded to the bucket `S`; causal attention keeps the padding out of the real
  rows) -> logits `[1,1,V]` and every layer's keys and values zero-padded to the context,
  `[1,Hkv,context,D]`, from a `DynamicCache` of plain (full) layers;
- decode: `input_ids [1,1]`, `cache_position [1]`, the caches -> logits `[1,1,V]` and the caches
  updated in place (transformers' `index_copy_` imports as `kv_cache_write`).

Every layer keeps all `context` rows, sliding-window layers too: transformers' sliding layers
(`StaticSlidingWindowLayer`: a ring of `window` rows whose update branches on a Python counter)
cannot be exported once for every position, while full rows with the model's own sliding-window
mask (`create_sliding_window_causal_mask` over absolute positions) compute the same attention. So
each step's cache layout is the model's heads and head widths, the context long.

Mixture-of-experts checkpoints store each expert's tensors apart; the model's stacks are
merged from them as transformers merges them (`hf_conversions`, `StepGraph.merged_tensors`).

Not handled: multimodal configs (Gemma 3's `gemma3`, use its `gemma3_text` part), architectures
not in `ARCHITECTURES`, models whose attention is not a transformers `Cache` (refused by name).
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import import_module
from typing import Any

import numpy as np

from optgraph.errors import InputError, OptGraphError
from optgraph.frontends.hf_checkpoint import Checkpoint
from optgraph.frontends.hf_conversions import checkpoint_names
from optgraph.frontends.step_graphs import StepGraph, TensorMerge, updated_caches
from optgraph.frontends.torch_values import torch_module
from optgraph.ir.graph import Graph

# config.json's model_type -> what a user calls it; every one tested against transformers.
ARCHITECTURES = {
    "llama": "Llama (incl. llama3 rope scaling)",
    "mistral": "Mistral (sliding window)",
    "qwen2": "Qwen2",
    "qwen3": "Qwen3",
    "gemma2": "Gemma 2",
    "gemma3_text": "Gemma 3 (text)",
    "phi3": "Phi-3",
    "gpt_neox": "GPT-NeoX",
    "olmo2": "OLMo 2",
    "stablelm": "StableLM",
    "falcon": "Falcon",
    "gpt2": "GPT-2",
    "mixtral": "Mixtral (mixture of experts)",
    "qwen2_moe": "Qwen2-MoE (mixture of experts, a shared expert)",
    "qwen3_moe": "Qwen3-MoE (mixture of experts)",
    "gpt_oss": "gpt-oss",
}
TORCH_DTYPES = ("f32", "f16", "bf16")


def supported_list() -> str:
    return ", ".join(f"{k} ({v})" for k, v in ARCHITECTURES.items())


def check_architecture(checkpoint: Checkpoint) -> str:
    """The config's model_type when it is supported, else an `InputError` listing those that are."""
    kind = checkpoint.config.get("model_type")
    if not isinstance(kind, str) or kind not in ARCHITECTURES:
        archs = checkpoint.config.get("architectures")
        named = f" ({', '.join(map(str, archs))})" if isinstance(archs, list) and archs else ""
        raise checkpoint.error(
            f"architecture {kind!r}{named} is not supported by generate; supported model_type "
            f"values: {supported_list()}"
        )
    return str(kind)


class HFModel:
    """transformers' causal LM of a checkpoint, on placeholder weights (module docstring)."""

    def __init__(self, checkpoint: Checkpoint, dtype: str = "f32") -> None:
        if dtype not in TORCH_DTYPES:
            raise InputError(f"dtype must be one of {', '.join(TORCH_DTYPES)}, got {dtype!r}")
        check_architecture(checkpoint)
        self.checkpoint = checkpoint
        self.dtype = dtype
        self.lm = _empty_model(checkpoint, dtype)
        self.aliases = _tied_names(self.lm)
        names = checkpoint_names(self.lm, checkpoint)
        self.renamed, self.merged = names.renamed, names.merged
        self._check_parameters()
        self._prefills: dict[tuple[int, int], StepGraph] = {}

    # -- weights ----------------------------------------------------------------------------

    def checkpoint_name(self, name: str) -> str | TensorMerge | None:
        """The checkpoint's name of parameter `name` (a tied partner's, or without the base
        model's prefix; the tensors it merges), None when it has none."""
        prefix = getattr(self.lm, "base_model_prefix", "") + "."
        for candidate in self.aliases.get(name, (name,)):
            for spelled in (candidate, candidate.removeprefix(prefix)):
                if spelled in self.merged:
                    return self.merged[spelled]
                if spelled in self.renamed:
                    return self.renamed[spelled]
                if spelled in self.checkpoint.tensors:
                    return spelled
        return None

    def _check_parameters(self) -> None:
        missing, wrong = [], []
        shapes = {name: entry.shape for name, entry in self.checkpoint.tensors.items()}
        for name, param in self.lm.named_parameters():
            found = self.checkpoint_name(name)
            if found is None:
                missing.append(name)
                continue
            if isinstance(found, TensorMerge):  # named as the model's, with its first part
                shape = found.shape(shapes)
                named = f"'{name}' (merged from '{found.groups[0][0]}', ...)"
            else:
                shape, named = shapes[found], f"'{found}'"
            if shape != tuple(param.shape):
                given = "parts that do not join" if shape is None else list(shape)
                wrong.append(f"{named} is {given}, the config gives {list(param.shape)}")
        if missing:
            shown = ", ".join(missing[:6]) + (
                f", ... ({len(missing)} in all)" if len(missing) > 6 else ""
            )
            raise self.checkpoint.error(f"tensors missing: {shown}")
        if wrong:
            more = f" ({len(wrong)} in all)" if len(wrong) > 1 else ""
            raise self.checkpoint.error(f"tensor {wrong[0]}{more}")

    # -- steps ------------------------------------------------------------------------------

    def prefill_step(self, bucket: int, context: int) -> StepGraph:
        found = self._prefills.get((bucket, context))
        if found is None:
            found = self._prefills[(bucket, context)] = self._prefill(bucket, context)
        return found

    def _prefill(self, bucket: int, context: int) -> StepGraph:
        torch = torch_module()
        args = (
            torch.zeros(1, bucket, dtype=torch.int64),
            torch.arange(bucket)[None],
            torch.tensor([[bucket - 1]]),
        )
        graph, constants = self.export(_prefill_forward(context), args)
        names = [i.name for i in graph.inputs]
        roles = dict(zip(names, ("tokens", "position_ids", "last")))
        outputs = graph.output_names()
        return StepGraph(
            graph, roles, outputs[0], tuple(outputs[1:]), "last", constants,
            *self.tensor_names(graph, constants),
        )  # fmt: skip

    def decode_step(self, context: int) -> StepGraph:
        torch = torch_module()
        # the cache types, [1, Hkv, context, D] a layer: a prefill's outputs (16 tokens, the
        # bucket a short prompt takes, kept for its own program)
        made = [step for (_, c), step in self._prefills.items() if c == context]
        prefill = made[0] if made else self.prefill_step(min(16, context), context)
        types = prefill.graph.value_types()
        from optgraph.reference.kernels import numpy_dtype

        caches = [
            torch.from_numpy(np.zeros(types[n].shape, numpy_dtype(types[n].dtype)))
            if types[n].dtype != "bf16"
            else torch.zeros(types[n].shape, dtype=torch.bfloat16)
            for n in prefill.cache_outputs
        ]
        args = (torch.zeros(1, 1, dtype=torch.int64), torch.tensor([1]), *caches)
        graph, constants = self.export(_decode_forward(context), args)
        inputs = [i.name for i in graph.inputs]
        roles = {inputs[0]: "tokens", inputs[1]: "cache_position"}
        roles |= {name: "cache" for name in inputs[2:]}
        written = updated_caches(graph)
        missing = [n for n in inputs[2:] if n not in written]
        if missing:
            raise OptGraphError(
                f"generate: {self.checkpoint.config.get('model_type')}: the decode step's cache "
                f"update did not import as kv_cache_write for {', '.join(missing)}"
            )
        others = [n for n in graph.output_names() if n not in written.values()]
        if len(others) != 1:
            raise OptGraphError(
                f"generate: expected one decode output besides the caches: {others}"
            )
        return StepGraph(
            graph, roles, others[0], tuple(written[n] for n in inputs[2:]), "last", constants,
            *self.tensor_names(graph, constants),
        )  # fmt: skip

    def tensor_names(
        self, graph: Graph, constants: dict[str, np.ndarray]
    ) -> tuple[dict[str, str], dict[str, TensorMerge]]:
        """Graph weight -> checkpoint tensor where the names differ, and -> the tensors it
        merges."""
        names: dict[str, str] = {}
        merged: dict[str, TensorMerge] = {}
        for weight in graph.weights:
            if weight.name in constants:
                continue
            found = self.checkpoint_name(weight.name)
            if found is None:
                raise self.checkpoint.error(f"no tensor for the graph's weight '{weight.name}'")
            if isinstance(found, TensorMerge):
                merged[weight.name] = found
            elif found != weight.name:
                names[weight.name] = found
        return names, merged

    def export(
        self, forward: Callable[..., Any], args: tuple[Any, ...]
    ) -> tuple[Graph, dict[str, np.ndarray]]:
        from optgraph.frontends.torch_export import from_torch

        with _forward_replaced(self.lm, forward), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            graph, constants = from_torch(self.lm, args, read_parameters=False)
        return graph, constants


def library(name: str) -> Any:
    """A module of transformers or accelerate, typed Any (their objects are used as such)."""
    return import_module(name)


def cache_keyword(lm: Any) -> str:
    """transformers 5 calls the cache argument `cache` (`past_key_values` before)."""
    parameters = inspect.signature(type(lm).forward).parameters
    return "cache" if "cache" in parameters else "past_key_values"


def _prefill_forward(context: int) -> Callable[..., Any]:
    def forward(self: Any, input_ids: Any, position_ids: Any, last: Any) -> tuple[Any, ...]:
        DynamicCache = library("transformers.cache_utils").DynamicCache

        torch = torch_module()
        cache = DynamicCache()  # no config: plain layers keep every row, sliding ones too
        out = type(self).forward(
            self, input_ids=input_ids, position_ids=position_ids, use_cache=True,
            logits_to_keep=last, **{cache_keyword(self): cache},
        )  # fmt: skip
        rows = context - input_ids.shape[1]
        padded = []
        for layer in cache.layers:
            for part in (layer.keys, layer.values):
                padded.append(torch.nn.functional.pad(part, (0, 0, 0, rows)))
        return (out.logits, *padded)

    return forward


def _decode_forward(context: int) -> Callable[..., Any]:
    def forward(self: Any, input_ids: Any, cache_position: Any, *caches: Any) -> Any:
        cache_utils = library("transformers.cache_utils")
        Cache, StaticLayer = cache_utils.Cache, cache_utils.StaticLayer

        layers = []
        for index in range(len(caches) // 2):
            keys, values = caches[2 * index], caches[2 * index + 1]
            layer = StaticLayer(context)
            layer.keys, layer.values = keys, values
            layer.device = keys.device
            layer.batch_size, layer.num_heads = keys.shape[:2]
            layer.k_head_dim, layer.v_head_dim = keys.shape[-1], values.shape[-1]
            layer.is_initialized = True
            # rows already written: the query's offset and the row index_copy_ writes
            layer.cumulative_length = cache_position.clone()
            layers.append(layer)
        out = type(self).forward(
            self, input_ids=input_ids, position_ids=cache_position[None], use_cache=True,
            **{cache_keyword(self): Cache(layers=layers)},
        )  # fmt: skip
        return out.logits

    return forward


@contextmanager
def _forward_replaced(lm: Any, forward: Callable[..., Any]) -> Iterator[None]:
    """`lm.forward` is `forward` inside the block: export sees the model itself as the root
    module, so its weights keep the model's state_dict names."""
    lm.forward = forward.__get__(lm)
    try:
        yield
    finally:
        del lm.forward


def _empty_model(checkpoint: Checkpoint, dtype: str) -> Any:
    """transformers' model of the config, its parameters zero-stride placeholders of `dtype`."""
    try:
        transformers = library("transformers")
        init_empty_weights = library("accelerate").init_empty_weights
    except ImportError as err:
        raise InputError(
            f"generate: a Hugging Face checkpoint needs transformers and accelerate ({err})"
        ) from None
    torch = torch_module()
    torch_dtype = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}[dtype]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # transformers checks the config as it builds the model from it: what it refuses there
        # (a size of zero, a field of the wrong type; huggingface_hub's validation errors are
        # of their own kinds) is the config's fault, named as it says. Only transformers runs in
        # here, and the sizes were bounded by the checkpoint first (`hf_checkpoint`).
        try:
            config = transformers.AutoConfig.for_model(**checkpoint.config)
            with init_empty_weights():
                lm = transformers.AutoModelForCausalLM.from_config(config, dtype=torch_dtype)
        except Exception as err:  # noqa: BLE001
            said = " ".join(str(err).split())  # one line, however transformers laid it out
            said = said if len(said) <= 300 else said[:297] + "..."
            raise checkpoint.error(f"config.json: {type(err).__name__}: {said}") from None
    lm.eval()
    if hasattr(lm, "tie_weights"):  # tied embeddings are tied at load, not when built
        lm.tie_weights()
    placeholders: dict[int, Any] = {}
    for name, param in list(lm.named_parameters(remove_duplicate=False)):
        new = placeholders.get(id(param))
        if new is None:
            empty = torch.zeros((), dtype=torch_dtype).expand(param.shape)
            new = placeholders[id(param)] = torch.nn.Parameter(empty, requires_grad=False)
        owner, _, attribute = name.rpartition(".")
        lm.get_submodule(owner)._parameters[attribute] = new
    _load_buffers(checkpoint, lm)
    return lm


def _load_buffers(checkpoint: Checkpoint, lm: Any) -> None:
    """Persistent buffers the checkpoint holds take its values (non-persistent ones, rope tables
    made from the config, keep theirs)."""
    torch = torch_module()
    for name, buffer in lm.named_buffers():
        if name in checkpoint.tensors and checkpoint.tensors[name].shape == tuple(buffer.shape):
            value = np.array(checkpoint.array(name))
            with torch.no_grad():
                buffer.copy_(torch.from_numpy(value).to(buffer.dtype))


def _tied_names(lm: Any) -> dict[str, tuple[str, ...]]:
    """Each parameter name -> every name of the same parameter (tied embeddings)."""
    groups: dict[int, list[str]] = {}
    for name, param in lm.named_parameters(remove_duplicate=False):
        groups.setdefault(id(param), []).append(name)
    return {name: tuple(names) for names in groups.values() for name in names}
