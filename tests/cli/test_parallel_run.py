"""`optgraph run --device cpu --devices N --check` on unannotated examples: split by the
tensor-parallel pass (the default) or by the pass the pipeline names, the user's weights cut by
`shard_weights`, run on the emulated devices and checked against the single-device reference."""

from __future__ import annotations

from pathlib import Path

import pytest

from optgraph.cli import main

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


@pytest.mark.parametrize(
    ("model", "options"),
    [
        ("llama_decode.ir", ["--devices", "2"]),
        ("gpt2_block.ir", ["--devices", "4"]),
        ("llama_decode.ir", ["--devices", "2", "-p", "pipeline-parallel{stages=2},default"]),
        ("moe_block.ir", ["--devices", "2", "-p", "tensor-parallel{ways=2}"]),
    ],
)
def test_run_split_example_checks(model: str, options: list[str]) -> None:
    args = ["run", str(EXAMPLES / model), "--device", "cpu", "--check", "-q", *options]
    assert main(args) == 0
