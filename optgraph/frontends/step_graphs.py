"""Generation steps as graphs: what each input and output of a prefill or decode step is to a
generation loop, whatever the model came from.

    step = gguf_step("model.gguf", seq=16, context=64)      # llama_ir's decode form, 16 tokens
    step.roles   # {"tokens": "tokens", "pos": "positions", "kv_len": "kv_len",
                 #  "l0.k_cache": "cache", ...}
    step.logits, step.cache_outputs   # "logits", ("l0.k_cache_new", ...)

A `StepGraph` is a graph plus `roles`, one per input:

- `tokens`: the new tokens' ids (`[1,S]` for Hugging Face steps, `[B*S]` for llama_ir's and
  a checkpoint's batch steps, B sequences of S);
- `position_ids` (`[1,S]`) / `positions` (`[S]`): their positions, `start .. start+S-1`; a
  step with positions per row: `[B*S]`, row b's `start_b .. start_b+S-1`;
- `cache_position` (`[1]`): the first new token's position;
- `kv_len` (`[1]`): the cache rows attended to after the step, `start + S` (`[B]` per row);
- `last` (`[1,1]`): the row whose logits the step returns (the prompt's last real token);
- `cache`: a KV cache, updated in place by the step (`cache_outputs`, in the same order).

`tensor_names` maps a weight to the model file's tensor where the names differ, `merged_tensors`
a weight to the tensors it is made of (a checkpoint's experts stored one tensor each: a
`TensorMerge`). `logits_rows`
says which rows the logits output holds: "last" (one row, chosen by `last`, or the
only token) or "all" (one per new token: the loop reads row `n - 1`). Three sources make them:
`hf_steps` (a checkpoint directory), `gguf_step` below (llama_ir's decode form with `seq` tokens
serves as the prefill too: it writes all of them into the caches at `pos`), and `ir_decode_step`
(an `.ir` decode step whose inputs carry llama_ir's or `hf_steps`' names).

Not handled: batches of `.ir` steps (those are one sequence).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from optgraph.errors import InputError
from optgraph.ir.graph import Graph, Node

ROLES = ("tokens", "position_ids", "positions", "cache_position", "kv_len", "last", "cache")
# llama_ir's and hf_steps' input names -> their roles (an `.ir` decode step is read by name)
NAMED_ROLES = {
    "tokens": "tokens",
    "pos": "positions",
    "kv_len": "kv_len",
    "input_ids": "tokens",
    "cache_position": "cache_position",
}


@dataclass(frozen=True)
class TensorMerge:
    """A weight made of several of the model file's tensors, as transformers merges experts when
    it loads them: each group's tensors (one an expert, in expert order) stacked along
    `stack_axis`, then the groups concatenated along `concat_axis` (one group: none).

        TensorMerge((("e0.w1", "e1.w1"), ("e0.w3", "e1.w3")), 0, 1)
        # w1 [F,H] and w3 [F,H] of 2 experts -> [2, 2F, H]
    """

    groups: tuple[tuple[str, ...], ...]
    stack_axis: int = 0
    concat_axis: int | None = None

    def shape(self, shapes: dict[str, tuple[int, ...]]) -> tuple[int, ...] | None:
        """The merged shape, given every part's (`shapes[name]`); None when they do not join
        (a group's experts differ in shape, or the groups off the concatenation axis)."""
        stacked = []
        for group in self.groups:
            first = shapes[group[0]]
            if any(shapes[name] != first for name in group):
                return None
            dims = list(first)
            dims.insert(self.stack_axis, len(group))
            stacked.append(dims)
        if self.concat_axis is None:
            return tuple(stacked[0]) if len(stacked) == 1 else None
        axis = self.concat_axis
        rest = {tuple(d[:axis] + d[axis + 1 :]) for d in stacked}
        if len(rest) != 1:
            return None
        out = stacked[0]
        out[axis] = sum(d[axis] for d in stacked)
        return tuple(out)

    def join(self, arrays: list[list[np.ndarray]]) -> np.ndarray:
        """The weight from its parts' arrays (`arrays[g][e]`: group g's expert e); a copy."""
        stacks = [np.stack(group, axis=self.stack_axis) for group in arrays]
        if self.concat_axis is None:
            return stacks[0]
        return np.concatenate(stacks, axis=self.concat_axis)


@dataclass(frozen=True)
class StepGraph:
    """One step of generation (module docstring). `constants`: weights of the graph that the
    import made (tables, masks), not the model's own tensors."""

    graph: Graph
    roles: dict[str, str]
    logits: str
    cache_outputs: tuple[str, ...]
    logits_rows: str = "last"
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    # graph weight -> the model file's tensor name, where they differ (tied parameters)
    tensor_names: dict[str, str] = field(default_factory=dict)
    # graph weight -> the model file's tensors it is made of (experts merged at load)
    merged_tensors: dict[str, TensorMerge] = field(default_factory=dict)

    def tensor_name(self, weight: str) -> str:
        return self.tensor_names.get(weight, weight)

    @property
    def cache_inputs(self) -> tuple[str, ...]:
        return tuple(n for n, role in self.roles.items() if role == "cache")

    @property
    def batch(self) -> int:
        """Sequences a run takes (B): the caches' first axis (a prefill's that makes its caches:
        its outputs')."""
        caches = self.cache_inputs or self.cache_outputs
        return self.graph.value_types()[caches[0]].shape[0] if caches else 1

    @property
    def seq(self) -> int:
        """New tokens a run takes per sequence (S)."""
        tokens = next(n for n, role in self.roles.items() if role == "tokens")
        return self.graph.value_types()[tokens].shape[-1] // self.batch

    @property
    def vocab(self) -> int:
        return self.graph.value_types()[self.logits].shape[-1]


def updated_caches(graph: Graph) -> dict[str, str]:
    """{cache input: output}: each input that a `kv_cache_write` output of the graph updates,
    or (llama_ir's rows with their own positions) a `concat` along axis 0 of `kv_cache_write`s
    into slices of that input, one a row."""
    inputs = set(graph.input_names())
    outputs = set(graph.output_names())
    nodes = {node.name: node for node in graph.nodes}
    types = graph.value_types()
    found = {}
    for node in graph.nodes:
        if node.name not in outputs:
            continue
        if node.op == "kv_cache_write" and node.operands[0] in inputs:
            found[node.operands[0]] = node.name
        elif node.op == "concat" and node.attrs.get("axis") == 0:
            sources = {_sliced_cache(nodes, operand) for operand in node.operands}
            source = sources.pop() if len(sources) == 1 else None
            if source in inputs and types[source] == types[node.name]:  # every row written
                found[str(source)] = node.name
    return found


def _sliced_cache(nodes: dict[str, Node], name: str) -> str | None:
    """The value whose axis-0 slice a `kv_cache_write` `name` writes into, if it is one."""
    write = nodes.get(name)
    if write is None or write.op != "kv_cache_write":
        return None
    cut = nodes.get(write.operands[0])
    if cut is None or cut.op != "slice" or cut.attrs.get("axis") != 0:
        return None
    return cut.operands[0]


def ir_decode_step(graph: Graph) -> StepGraph:
    """An `.ir` decode step: inputs named as llama_ir's (`tokens`, `pos`, `kv_len`) or
    hf_steps' (`input_ids`, `cache_position`), every other input a cache that a
    `kv_cache_write` output updates, one other output: the logits."""
    written = updated_caches(graph)
    roles: dict[str, str] = {}
    for item in graph.inputs:
        role = NAMED_ROLES.get(item.name) or ("cache" if item.name in written else None)
        if role is None:
            raise InputError(
                f"generate: graph '{graph.name}': input '%{item.name}' is neither a token, "
                "position nor a KV cache updated by kv_cache_write (a decode step's inputs: "
                "tokens, pos, kv_len and caches, or input_ids, cache_position and caches)",
                item.span,
            )
        roles[item.name] = role
    if "tokens" not in roles.values():
        raise InputError(f"generate: graph '{graph.name}' has no token input (tokens, input_ids)")
    others = [n for n in graph.output_names() if n not in written.values()]
    if len(others) != 1:
        raise InputError(
            f"generate: graph '{graph.name}': expected one output besides the updated caches "
            f"(the logits), got {len(others)}: {', '.join(others) or 'none'}"
        )
    step = StepGraph(graph, roles, others[0], tuple(written[n] for n in roles if n in written))
    if step.batch != 1:
        raise InputError(
            f"generate: graph '{graph.name}' has caches of {step.batch} sequences; a decode "
            "step of an .ir model is one sequence"
        )
    if step.seq != 1:
        raise InputError(
            f"generate: graph '{graph.name}' takes {step.seq} tokens a step; a decode step takes 1"
        )
    return step


def gguf_step(
    path: str | Path,
    seq: int,
    context: int,
    dtype: str | None = None,
    batch: int = 1,
    per_row: bool = False,
) -> StepGraph:
    """llama_ir's decode form of a GGUF file (`og.from_gguf(mode="decode")`): `seq` new tokens
    of each of `batch` sequences written into caches of `context` rows; logits for every new
    token. `per_row`: each sequence with its own positions and kv_len."""
    from optgraph.frontends.gguf import from_gguf

    graph, _ = from_gguf(
        path, mode="decode", batch=batch, seq=seq, cache_len=context, dtype=dtype,
        per_row=per_row,
    )  # fmt: skip
    return llama_ir_step(graph)


def llama_ir_step(graph: Graph) -> StepGraph:
    """A llama_ir graph in decode form (`tokens`, `pos`, `kv_len`, the caches; the logits of
    every new token, then the updated caches) as a step."""
    written = updated_caches(graph)
    roles = {i.name: NAMED_ROLES.get(i.name, "cache") for i in graph.inputs}
    outputs = graph.output_names()
    caches = tuple(written[n] for n in roles if n in written)
    step = StepGraph(graph, roles, outputs[0], caches)
    return step if step.seq == 1 else StepGraph(graph, roles, outputs[0], caches, "all")
