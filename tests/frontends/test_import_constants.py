"""Constants folded at import stay constants (`weight %c : i64[1] = [1]`, ir/constants.py), so
`optgraph run MODEL.ir --check` with its own random data computes what the model computes: the
graphs of the issue that failed so ("attention: kv_len 26 out of range [0, 24]", "kv_cache_write:
pos 52 out of range", "get_rows: id 13 out of range for a table of 2 rows") run and check, and
the import's constants read back with their values."""

from __future__ import annotations

import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="the import tests need PyTorch")
transformers = pytest.importorskip("transformers", reason="the import tests need transformers")

import optgraph as og
from optgraph.cli.main import main
from optgraph.ir.constants import INLINE_LIMIT, constant_array

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "examples"))
import hf_generate

from tools import transformers_sweep


def _run_check(graph: og.Graph, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """`optgraph run MODEL.ir --check` with no weights file: exit 0, every output ok."""
    path = tmp_path / f"{graph.name}.ir"
    path.write_text(og.print_graph(graph))
    capsys.readouterr()
    status = main(["run", str(path), "--device", "cpu", "--check", "-q"])
    out, err = capsys.readouterr()
    assert status == 0, err
    assert "error" not in err and out.count(" ok ") == len(graph.outputs), out


def _constants(graph: og.Graph) -> dict[str, np.ndarray]:
    return {w.name: constant_array(w) for w in graph.weights if w.value is not None}


def test_a_llama_decode_step_keeps_its_kv_offset_and_runs_on_random_data(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """kv_len = cache_position + kv_offset: a random kv_offset made kv_len leave the cache."""
    model = hf_generate.build_model(
        hf_generate._parse(["--layers", "1", "--hidden", "32", "--heads", "4", "--vocab", "64"])
    )
    steps = hf_generate.import_steps(model, 4, 24)
    constants = _constants(steps.decode)
    offsets = [v.tolist() for k, v in constants.items() if k.startswith("kv_offset")]
    assert offsets == [[1]]
    text = og.print_graph(steps.decode)
    assert any(line.strip().startswith("weight %kv_offset") and line.endswith("= [1]")
               for line in text.splitlines())  # fmt: skip
    _run_check(steps.decode, tmp_path, capsys)
    _run_check(steps.prefill, tmp_path, capsys)


def test_gpt2s_decode_step_draws_its_position_within_the_cache(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """cache_position reads the 64-row position table and writes the 24-row caches."""
    from optgraph.frontends.hf_checkpoint import open_checkpoint
    from optgraph.frontends.hf_steps import HFModel

    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        model = transformers_sweep.models()["gpt2"]()
        model.save_pretrained(tmp_path / "gpt2")
        decode = HFModel(open_checkpoint(tmp_path / "gpt2")).decode_step(24).graph
    types = decode.value_types()
    assert types["transformer.wpe.weight"].shape[0] == 64 and decode.inputs[1].name
    _run_check(decode, tmp_path, capsys)


@pytest.mark.parametrize("name", ["roberta", "gpt_oss_batched_mm"])
def test_buffers_and_top_k_positions_stay_constants(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """RoBERTa's token-type buffer (zeros, gathered: random ones left its 2-row table) and
    top-k's positions (a random table made the router's ids leave the experts)."""
    module, args = transformers_sweep.wrapped(name)
    graph, weights = og.from_torch(module, args)
    constants = _constants(graph)
    assert constants and all(v.size <= INLINE_LIMIT for v in constants.values())
    for key, value in constants.items():  # the weights returned still hold them, equal
        assert np.array_equal(weights[key], value, equal_nan=True)
    if name == "roberta":
        assert any(v.dtype == np.int64 and v.size == 64 and not v.any() for v in constants.values())
    else:
        assert any(np.array_equal(v.reshape(-1), np.arange(4)) for v in constants.values())
    _run_check(graph, tmp_path, capsys)


def test_tables_larger_than_the_limit_stay_weights() -> None:
    class Table(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.register_buffer("table", torch.arange(INLINE_LIMIT + 1).float())

        def forward(self, x: Any) -> Any:
            return x + self.table, x[:4] + torch.arange(4)

    graph, weights = og.from_torch(Table(), (torch.ones(INLINE_LIMIT + 1),))
    declared = {w.name: w for w in graph.weights}
    assert declared["table"].value is None and weights["table"].size == INLINE_LIMIT + 1
    assert all(w.value is not None for n, w in declared.items() if n != "table")
