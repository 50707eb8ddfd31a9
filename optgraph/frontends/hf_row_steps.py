"""A checkpoint's batch steps: B prompts at once through transformers' own forward, each row with
its own positions (what `api/batch_generation.py` runs; `hf_steps` makes the one-prompt steps).

    prefill = rows_prefill_step(model, batch=3, bucket=16, context=64)
    decode = rows_decode_step(model, batch=3, context=64)

- prefill: `input_ids [B*S]` (each prompt at the start of its row, padded to the bucket S),
  `position_ids [S]` (0..S-1, shared) -> the logits of every token `[B,S,V]` and every layer's
  keys and values zero-padded to the context `[B,Hkv,context,D]` (a `DynamicCache`, as the
  one-prompt prefill). Causal attention keeps a row's padding out of its real tokens, and the
  padding's cache rows are overwritten by that row's decode steps before any query reads them;
- decode: `input_ids [B]`, `position_ids [B]` (row b's new token at its own position p_b), the
  caches -> logits `[B,1,V]` and the caches, row b's key and value written at p_b: a
  `kv_cache_write` into each row's slice of the cache, the rows joined by a `concat` (as
  llama_ir's per-row step; `step_graphs.updated_caches` recognizes the form).

The decode step's masks: the model's module makes them with transformers'
`create_causal_mask` and `create_sliding_window_causal_mask` from one query offset for every
row; during the export both are replaced by the same mask functions
(`causal_mask_function`, `sliding_window_causal_mask_function(config.sliding_window)`) through
the same mask interface of the model's attention implementation, with each row's query at its
own position: key j is seen by row b iff j <= p_b (and j > p_b - W on sliding layers). So each
row attends to what it attends to alone; rope takes the per-row positions as they are.

The importer raises the per-row masks into attention's per-row `kv_len`
(`raise_row_masks.py`).

Not handled: a model whose classes make masks by other functions (chunked or bidirectional
attention; refused by name); architectures not in `ROWS_ARCHITECTURES` run their prompts in
turn. The caches come out of a `concat` (a copy a step); rope stays written out (the rope
raising takes positions shared by the rows).
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from optgraph.errors import OptGraphError
from optgraph.frontends.hf_steps import HFModel, cache_keyword, library
from optgraph.frontends.step_graphs import StepGraph, updated_caches
from optgraph.frontends.torch_values import torch_module

MASK_FUNCTIONS = ("create_causal_mask", "create_sliding_window_causal_mask")
# model_types whose batches give each prompt's own greedy tokens: tests/cli/
# test_generate_checkpoint_batch.py runs llama, mistral, gemma2 and mixtral; the others were
# checked the same way (docs/generate.md). gpt2's forward can make a bidirectional mask.
ROWS_ARCHITECTURES = frozenset(
    {
        "llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3_text", "phi3", "gpt_neox",
        "olmo2", "stablelm", "falcon", "mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss",
    }
)  # fmt: skip


def rows_prefill_step(model: HFModel, batch: int, bucket: int, context: int) -> StepGraph:
    """B prompts' prefill (module docstring)."""
    torch = torch_module()
    args = (torch.zeros(batch * bucket, dtype=torch.int64), torch.arange(bucket))
    graph, constants = model.export(_prefill_forward(batch, context), args)
    names = [i.name for i in graph.inputs]
    roles = dict(zip(names, ("tokens", "positions")))
    outputs = graph.output_names()
    return StepGraph(
        graph, roles, outputs[0], tuple(outputs[1:]), "all", constants,
        *model.tensor_names(graph, constants),
    )  # fmt: skip


def rows_decode_step(model: HFModel, batch: int, context: int) -> StepGraph:
    """B rows' decode step, each at its own position (module docstring)."""
    torch = torch_module()
    _check_masks(model)
    types = _cache_types(model, context)
    caches = [torch.zeros((batch, *shape[1:]), dtype=dtype) for shape, dtype in types]
    args = (torch.zeros(batch, dtype=torch.int64), torch.arange(batch), *caches)
    graph, constants = model.export(_decode_forward(batch, context), args)
    inputs = [i.name for i in graph.inputs]
    roles = {inputs[0]: "tokens", inputs[1]: "positions"} | {n: "cache" for n in inputs[2:]}
    written = updated_caches(graph)
    missing = [n for n in inputs[2:] if n not in written]
    others = [n for n in graph.output_names() if n not in written.values()]
    if missing or len(others) != 1:
        raise OptGraphError(
            f"generate: {model.checkpoint.config.get('model_type')}: the batch decode step's "
            f"caches did not import as per-row kv_cache_write ({', '.join(missing) or others})"
        )
    return StepGraph(
        graph, roles, others[0], tuple(written[n] for n in inputs[2:]), "last", constants,
        *model.tensor_names(graph, constants),
    )  # fmt: skip


def _cache_types(model: HFModel, context: int) -> list[tuple[tuple[int, ...], Any]]:
    """(shape, torch dtype) of each cache of one sequence: the one-prompt prefill's outputs."""
    torch = torch_module()
    prefill = model.prefill_step(min(16, context), context)
    types = prefill.graph.value_types()
    dtypes = {"f32": torch.float32, "f16": torch.float16, "bf16": torch.bfloat16}
    return [(types[n].shape, dtypes[types[n].dtype]) for n in prefill.cache_outputs]


def _modeling_modules(lm: Any) -> list[Any]:
    """The modules that define the model's classes (where its mask functions are looked up)."""
    found: dict[str, Any] = {}
    for sub in lm.modules():
        module = inspect.getmodule(type(sub))
        if module is not None and module.__name__.startswith("transformers.models."):
            found[module.__name__] = module
    return list(found.values())


def _check_masks(model: HFModel) -> None:
    """Refuse a model whose classes' `forward`s call mask functions other than
    `MASK_FUNCTIONS` (those would make one offset's masks for every row)."""
    others: set[str] = set()
    for kind in {type(sub) for sub in model.lm.modules()}:
        for klass in kind.__mro__:
            forward = vars(klass).get("forward")
            if forward is None or not klass.__module__.startswith("transformers.models."):
                continue
            called = re.findall(r"\b(create_\w*mask\w*)\(", inspect.getsource(forward))
            others |= set(called) - set(MASK_FUNCTIONS)
    if others:
        raise OptGraphError(
            f"generate: {model.checkpoint.config.get('model_type')}: a batch needs its masks "
            f"made per row; {', '.join(sorted(others))} is not replaced"
        )


@contextmanager
def _row_masks(lm: Any, positions: Any, context: int) -> Iterator[None]:
    """The model's mask functions replaced by per-row ones (module docstring) inside the block."""
    utils = library("transformers.masking_utils")
    modules = _modeling_modules(lm)
    saved = [
        (m, name, vars(m)[name]) for m in modules for name in MASK_FUNCTIONS if name in vars(m)
    ]

    def made(function: Callable[..., Any]) -> Callable[..., Any]:
        def create(config: Any, inputs_embeds: Any, *args: Any, **kwargs: Any) -> Any:
            def per_row(batch_idx: Any, head_idx: Any, q_idx: Any, kv_idx: Any) -> Any:
                # non-vmap expansion: batch_idx is arange(B) along axis 0
                return function(batch_idx, head_idx, q_idx + positions.view(-1, 1, 1, 1), kv_idx)

            interface = utils.ALL_MASK_ATTENTION_FUNCTIONS[config._attn_implementation]
            return interface(
                batch_size=inputs_embeds.shape[0], q_length=1, kv_length=context, q_offset=0,
                kv_offset=0, mask_function=per_row, attention_mask=None,
                allow_is_causal_skip=False, dtype=inputs_embeds.dtype, config=config,
                use_vmap=False, device=inputs_embeds.device,
            )  # fmt: skip

        return create

    def sliding(config: Any, *args: Any, **kwargs: Any) -> Any:
        window = utils.sliding_window_causal_mask_function(config.sliding_window)
        return made(window)(config, *args, **kwargs)

    replaced = {"create_causal_mask": made(utils.causal_mask_function)}
    replaced["create_sliding_window_causal_mask"] = sliding
    for module, name, _ in saved:
        setattr(module, name, replaced[name])
    try:
        yield
    finally:
        for module, name, original in saved:
            setattr(module, name, original)


def _prefill_forward(batch: int, context: int) -> Callable[..., Any]:
    def forward(self: Any, input_ids: Any, position_ids: Any) -> tuple[Any, ...]:
        DynamicCache = library("transformers.cache_utils").DynamicCache

        torch = torch_module()
        bucket = position_ids.shape[0]
        cache = DynamicCache()
        out = type(self).forward(
            self, input_ids=input_ids.view(batch, bucket),
            position_ids=position_ids[None].expand(batch, bucket), use_cache=True,
            **{cache_keyword(self): cache},
        )  # fmt: skip
        padded = []
        for layer in cache.layers:
            for part in (layer.keys, layer.values):
                padded.append(torch.nn.functional.pad(part, (0, 0, 0, context - bucket)))
        return (out.logits, *padded)

    return forward


def _decode_forward(batch: int, context: int) -> Callable[..., Any]:
    def forward(self: Any, input_ids: Any, position_ids: Any, *caches: Any) -> tuple[Any, ...]:
        Cache = library("transformers.cache_utils").Cache

        RowsLayer = _rows_layer_class()
        layers = [
            RowsLayer(context, caches[i], caches[i + 1], position_ids)
            for i in range(0, len(caches), 2)
        ]
        with _row_masks(self, position_ids, context):
            out = type(self).forward(
                self, input_ids=input_ids[:, None], position_ids=position_ids[:, None],
                use_cache=True, **{cache_keyword(self): Cache(layers=layers)},
            )  # fmt: skip
        return (out.logits, *[part for layer in layers for part in (layer.keys, layer.values)])

    return forward


def _rows_layer_class() -> Any:
    StaticLayer = library("transformers.cache_utils").StaticLayer

    class RowsLayer(StaticLayer):  # type: ignore[misc,valid-type]
        """A static layer whose rows are written each at its own position, out of place."""

        def __init__(self, context: int, keys: Any, values: Any, positions: Any) -> None:
            super().__init__(context)
            self.keys, self.values, self.positions = keys, values, positions
            self.device = keys.device
            self.batch_size, self.num_heads = keys.shape[:2]
            self.k_head_dim, self.v_head_dim = keys.shape[-1], values.shape[-1]
            self.is_initialized = True

        def update(self, key_states: Any, value_states: Any, *args: Any, **kwargs: Any) -> Any:
            torch = torch_module()
            rows = range(self.keys.shape[0])
            at = [self.positions[b : b + 1] for b in rows]
            self.keys = torch.cat(
                [self.keys[b : b + 1].index_copy(2, at[b], key_states[b : b + 1]) for b in rows]
            )
            self.values = torch.cat(
                [self.values[b : b + 1].index_copy(2, at[b], value_states[b : b + 1]) for b in rows]
            )
            return self.keys, self.values

    return RowsLayer
