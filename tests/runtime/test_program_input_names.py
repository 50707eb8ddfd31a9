"""`CompiledProgram.run` takes inputs and weights by name as the IR writes them too (`%x`), and
calls an input the graph does not have unknown, with the closest name (issue 36, finding 5, in
the Python API: the command line's `--inputs` took `%x` already)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import optgraph as og
from optgraph.reference.interpreter import random_inputs, random_weights

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_inputs_and_weights_may_be_named_with_their_sigil() -> None:
    graph = og.parse_file(EXAMPLES / "mlp.ir")
    program = og.compile(graph)
    x, w = random_inputs(graph, 0), random_weights(graph, 0)
    want = program.run(x, w)
    got = program.run({f"%{k}": v for k, v in x.items()}, {f"%{k}": v for k, v in w.items()})
    for name, value in want.items():
        assert np.array_equal(got[name], value)


def test_an_unknown_input_is_named_with_the_closest_one() -> None:
    graph = og.parse_file(EXAMPLES / "mlp.ir")
    program = og.compile(graph)
    x = random_inputs(graph, 0)["x"]
    with pytest.raises(og.OptGraphError, match=r"no input '%xx' \(did you mean '%x'\?\)"):
        program.run({"%xx": x})
    with pytest.raises(og.OptGraphError, match=r"no input '%extra'"):
        program.run({"x": x, "extra": x})
    with pytest.raises(og.OptGraphError, match=r"input '%x' given twice"):
        program.run({"x": x, "%x": x})  # one value under both spellings
