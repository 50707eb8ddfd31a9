"""One-row product kernels generated once per structure while a graph is lowered
(codegen/kernels/one_row/kernel_cache.py): the CUDA source is byte for byte the one generated node by node,
kernels with a split-K workspace still get one workspace a node, each structure is generated
once, a module setting changed between two lowerings is honoured, and nothing is kept outside a
lowering."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

import optgraph as og
from optgraph.codegen.kernels.one_row import kernel_cache, product_kernel
from optgraph.codegen.lower_cuda import _lowered, lower_cuda
from optgraph.codegen.plan.in_place_outputs import in_place_candidates
from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "examples"))
from gen_llama import generate_llama

ONE_STREAM_FUSED = (
    "verify,dce,cse,fuse,assign-streams{max-streams=1},insert-sync,analyze-lifetimes,plan-memory"
)
CHAINS_FUSED = (
    "verify,dce,cse,fuse,assign-streams{policy=chains},insert-sync,analyze-lifetimes,plan-memory"
)


def _llama(hidden: int, layers: int, pipeline: str) -> og.Graph:
    """A decode step: at hidden 4096 its products take split-K workspaces, at 256 they do not."""
    heads = 32 if hidden >= 4096 else 4
    text = generate_llama(
        layers=layers, hidden=hidden, heads=heads, kv_heads=heads // 4, ffn=hidden * 3,
        vocab=256, dtype="f16", cache_len=64,
    )  # fmt: skip
    return run_pipeline(og.parse(text), pipeline)


GRAPHS = {
    "realistic-2-layers": lambda: _llama(4096, 2, ONE_STREAM_FUSED),
    "small-4-layers": lambda: _llama(256, 4, ONE_STREAM_FUSED),
    "small-4-layers-streams": lambda: _llama(256, 4, CHAINS_FUSED),
    "moe-block": lambda: run_pipeline(
        og.parse_file(ROOT / "examples/moe_block.ir"), DEFAULT_PIPELINE
    ),
}


@pytest.mark.parametrize("name", sorted(GRAPHS))
def test_the_source_is_the_one_generated_node_by_node(name: str) -> None:
    graph = GRAPHS[name]()
    in_place = in_place_candidates(graph)
    remembered = lower_cuda(graph, in_place=in_place)
    node_by_node = _lowered(graph, True, in_place)  # outside `remembered()`: no memo
    assert remembered.source() == node_by_node.source()
    assert remembered.steps == node_by_node.steps


def test_split_k_kernels_keep_one_workspace_a_node() -> None:
    graph = _llama(4096, 2, ONE_STREAM_FUSED)
    declared = re.findall(r"__device__ float (og_ws_\w+)\[", lower_cuda(graph).source())
    assert len(declared) == len(set(declared))
    one_layer = re.findall(
        r"__device__ float (og_ws_\w+)\[", lower_cuda(_llama(4096, 1, ONE_STREAM_FUSED)).source()
    )
    # every split-K product of the second layer has a workspace of its own
    assert len(declared) >= 2 * len(one_layer) - 1 >= 7


def test_each_structure_is_generated_once(monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str] = []
    original = product_kernel._one_row_kernel

    def counting(salt: str, *args: object) -> object:
        built.append(salt)
        return original(salt, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(product_kernel, "_one_row_kernel", counting)
    graph = _llama(256, 6, ONE_STREAM_FUSED)
    _lowered(graph, True, None)  # outside `remembered()`: one generation a product
    products = len(built)
    assert products >= 6 * 3
    built.clear()
    lower_cuda(graph)
    # the six layers' products share their structures: one layer's, plus the ends' (lm head)
    assert 0 < len(built) <= products // 6 + 2


def test_a_setting_changed_between_lowerings_is_honoured(monkeypatch: pytest.MonkeyPatch) -> None:
    graph = _llama(4096, 1, ONE_STREAM_FUSED)
    early = lower_cuda(graph).source()
    monkeypatch.setattr(product_kernel, "EARLY_WEIGHTS", False)
    late = lower_cuda(graph).source()
    assert late != early
    assert late == _lowered(graph, True, None).source()


def test_nothing_is_kept_outside_a_lowering() -> None:
    lower_cuda(_llama(256, 1, ONE_STREAM_FUSED))
    assert kernel_cache._MEMO.kernels is None
