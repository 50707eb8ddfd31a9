"""transformers' load-time conversions of a checkpoint's tensor names, as `hf_steps` applies them:
renamings, and experts stored one tensor each merged into the stacks the model holds.

    names = checkpoint_names(lm, checkpoint)
    names.renamed["model.layers.0.mlp.gate.weight"]    # "model.layers.0.block_sparse_moe.gate.weight"
    names.merged["model.layers.0.mlp.experts.gate_up_proj"]
    # TensorMerge(groups=(("...experts.0.w1.weight", ...), ("...experts.0.w3.weight", ...)),
    #             stack_axis=0, concat_axis=1)             # Mixtral's w1 and w3, E of each

The rules are transformers' own (`conversion_mapping.get_model_conversion_mapping(model)`): each
`WeightRenaming` rewrites a name; a `WeightConverter` whose operations are `MergeModulelist`
(the tensors of each source pattern stacked along an axis, in the order of the index its `*`
stands for) optionally followed by `Concatenate` (the stacks joined along an axis, in the
patterns' order) is a `TensorMerge`, made when the weights are read (a copy: the only weights not
memory-mapped views). Every expert index from 0 to the largest must be present in every group.

Not handled (refused by name): any other conversion (split, transposed, interleaved or
dequantized tensors). Cost: O(tensors x rules) pattern tests when the model is built.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from optgraph.frontends.hf_checkpoint import Checkpoint
from optgraph.frontends.step_graphs import TensorMerge

_MERGING_OPS = ("MergeModulelist", "Concatenate")


@dataclass
class CheckpointNames:
    """The model's parameter names the checkpoint spells otherwise (module docstring)."""

    renamed: dict[str, str] = field(default_factory=dict)  # model name -> checkpoint name
    merged: dict[str, TensorMerge] = field(default_factory=dict)  # model name -> its parts


def checkpoint_names(lm: Any, checkpoint: Checkpoint) -> CheckpointNames:
    """What transformers would rename or merge loading `checkpoint` into `lm`; an `InputError`
    naming a tensor that needs another conversion."""
    try:
        mapping = import_module("transformers.conversion_mapping").get_model_conversion_mapping
    except ImportError:  # a transformers without conversions
        return CheckpointNames()
    renamings: list[Any] = []
    others: list[Any] = []
    for transform in mapping(lm):
        (renamings if type(transform).__name__ == "WeightRenaming" else others).append(transform)
    names = CheckpointNames()
    # target -> source pattern -> expert index -> checkpoint name
    parts: dict[str, dict[str, dict[int, str]]] = {}
    rules: dict[str, Any] = {}
    for name in checkpoint.tensors:
        renamed = name
        for transform in renamings:
            renamed, _ = transform.rename_source_key(renamed)
        converted = False
        for transform in others:
            target, pattern = transform.rename_source_key(renamed)
            if pattern is None:
                continue
            index = _expert_index(transform, pattern, renamed)
            if index is None:
                raise checkpoint.error(
                    f"tensor '{name}' needs transformers' {type(transform).__name__} "
                    f"({_operations(transform)}) to load, which generate does not do"
                )
            parts.setdefault(target, {}).setdefault(pattern, {})[index] = name
            rules[target] = transform
            converted = True
            break
        if not converted and renamed != name:
            names.renamed[renamed] = name
    for target, groups in parts.items():
        names.merged[target] = _merge(checkpoint, target, rules[target], groups)
    return names


def _operations(transform: Any) -> str:
    return ", ".join(type(op).__name__ for op in getattr(transform, "operations", ())) or "-"


def _axes(transform: Any) -> tuple[int, int | None] | None:
    """(stack axis, concat axis or None) of a converter that stacks then concatenates, else
    None."""
    ops = list(getattr(transform, "operations", ()))
    kinds = [type(op).__name__ for op in ops]
    if kinds == ["MergeModulelist"]:
        return int(ops[0].dim), None
    if kinds == list(_MERGING_OPS):
        return int(ops[0].dim), int(ops[1].dim)
    return None


def _expert_index(transform: Any, pattern: str, name: str) -> int | None:
    """The index `*` stands for in `name` matched by `pattern`, when `transform` is a merge."""
    if _axes(transform) is None or pattern.count("*") != 1:
        return None
    regex = re.escape(pattern).replace(r"\*", r"(\d+)")
    found = re.search(regex, name)
    return int(found.group(1)) if found else None


def _merge(
    checkpoint: Checkpoint, target: str, transform: Any, groups: dict[str, dict[int, str]]
) -> TensorMerge:
    axes = _axes(transform)
    assert axes is not None  # every part was matched by a merging converter
    patterns = [p for p in transform.source_patterns if p in groups]
    if len(patterns) != len(transform.source_patterns):
        absent = next(p for p in transform.source_patterns if p not in groups)
        raise checkpoint.error(f"'{target}' is merged from tensors '{absent}'; none found")
    ordered = []
    for pattern in patterns:
        found = groups[pattern]
        missing = [i for i in range(max(found) + 1) if i not in found]
        if missing:
            raise checkpoint.error(
                f"'{target}': tensor '{pattern.replace('*', str(missing[0]))}' missing "
                f"(experts 0 to {max(found)} merged)"
            )
        ordered.append(tuple(found[i] for i in range(len(found))))
    if len({len(group) for group in ordered}) != 1:
        raise checkpoint.error(f"'{target}': its parts hold different numbers of experts")
    return TensorMerge(tuple(ordered), axes[0], axes[1])
