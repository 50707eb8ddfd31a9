"""frontends/hf_conversions.py: a checkpoint's experts stored one tensor each are merged into the
stacks transformers' model holds, as transformers merges them when it loads (its own rules:
Mixtral's renamed `block_sparse_moe` and w1/w3/w2, Qwen's gate/up/down), equal to the loaded
parameters; a missing expert or an expert count that disagrees with the config refused by name;
`TensorMerge`'s shapes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs PyTorch")
pytest.importorskip("transformers", reason="needs transformers")
pytest.importorskip("accelerate", reason="needs accelerate")

from optgraph.errors import InputError
from optgraph.frontends.hf_checkpoint import open_checkpoint
from optgraph.frontends.hf_conversions import checkpoint_names
from optgraph.frontends.hf_steps import HFModel
from optgraph.frontends.step_graphs import TensorMerge
from tests.support import hf_checkpoints as hf


@pytest.fixture(scope="module")
def mixtral(tmp_path_factory: pytest.TempPathFactory) -> Path:
    directory = tmp_path_factory.mktemp("mixtral")
    hf.quietly(lambda: hf.build_model("mixtral", 300).save_pretrained(str(directory)))
    return directory


def test_mixtral_experts_merge_into_the_stacks_transformers_loads(mixtral: Path) -> None:
    checkpoint = open_checkpoint(mixtral)
    model = hf.quietly(lambda: HFModel(checkpoint))
    names = checkpoint_names(model.lm, checkpoint)
    prefix = "model.layers.1.mlp.experts."
    merge = names.merged[prefix + "gate_up_proj"]
    stored = "model.layers.1.block_sparse_moe.experts."
    assert merge.groups == (
        tuple(f"{stored}{e}.w1.weight" for e in range(4)),
        tuple(f"{stored}{e}.w3.weight" for e in range(4)),
    )
    assert (merge.stack_axis, merge.concat_axis) == (0, 1)
    down = names.merged[prefix + "down_proj"]
    assert down.groups == (tuple(f"{stored}{e}.w2.weight" for e in range(4)),)
    assert down.concat_axis is None
    assert names.renamed["model.layers.1.mlp.gate.weight"] == (
        "model.layers.1.block_sparse_moe.gate.weight"
    )
    loaded: dict[str, Any] = dict(hf.quietly(lambda: hf.load_reference(mixtral)).named_parameters())
    for name in (prefix + "gate_up_proj", prefix + "down_proj"):
        found = names.merged[name]
        joined = found.join([[checkpoint.array(n) for n in g] for g in found.groups])
        assert np.array_equal(joined, loaded[name].detach().numpy()), name


def _without(source: Path, target: Path, drop: str) -> Path:
    """A copy of checkpoint `source` without tensor `drop`."""
    from safetensors.numpy import load_file, save_file

    target.mkdir()
    for item in source.iterdir():
        if item.suffix != ".safetensors":
            (target / item.name).write_bytes(item.read_bytes())
    tensors = load_file(str(source / "model.safetensors"))
    del tensors[drop]
    save_file(tensors, str(target / "model.safetensors"), metadata={"format": "pt"})
    return target


def test_a_missing_expert_is_refused_by_name(mixtral: Path, tmp_path: Path) -> None:
    middle = "model.layers.0.block_sparse_moe.experts.1.w3.weight"
    checkpoint = open_checkpoint(_without(mixtral, tmp_path / "middle", middle))
    with pytest.raises(InputError, match=r"'\.experts\.1\.w3\.weight' missing \(experts 0 to 3"):
        hf.quietly(lambda: HFModel(checkpoint))
    last = "model.layers.0.block_sparse_moe.experts.3.w2.weight"
    checkpoint = open_checkpoint(_without(mixtral, tmp_path / "last", last))
    with pytest.raises(
        InputError, match=r"experts\.down_proj' \(merged from '.*', \.\.\.\) is \[3, 64, 128\]"
    ):
        hf.quietly(lambda: HFModel(checkpoint))  # 3 experts left of the config's 4


def test_tensor_merge_shapes() -> None:
    shapes = {"a0": (3, 5), "a1": (3, 5), "b0": (2, 5), "b1": (2, 5), "c0": (2, 4)}
    assert TensorMerge((("a0", "a1"),)).shape(shapes) == (2, 3, 5)
    assert TensorMerge((("a0", "a1"), ("b0", "b1")), 0, 1).shape(shapes) == (2, 5, 5)
    assert TensorMerge((("a0", "a1"),), 1).shape(shapes) == (3, 2, 5)
    assert TensorMerge((("a0", "b0"),)).shape(shapes) is None  # experts of two shapes
    assert TensorMerge((("a0", "a1"), ("c0", "c0")), 0, 1).shape(shapes) is None
    arrays = [[np.full((3, 5), e) for e in range(2)], [np.full((2, 5), 9 + e) for e in range(2)]]
    joined = TensorMerge((("a0", "a1"), ("b0", "b1")), 0, 1).join(arrays)
    assert joined.shape == (2, 5, 5)
    assert (joined[1, :3] == 1).all() and (joined[1, 3:] == 10).all()
