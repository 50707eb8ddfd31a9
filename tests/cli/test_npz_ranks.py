"""Arrays written to `.npz` keep their rank: a 0-d array (Gemma's `embed_scale`, a scalar output)
reads back 0-d, so a graph declaring `f32[]` runs from the file (`np.ascontiguousarray` returns
at least 1-d: an array written through it read back as `f32[1]`, and `optgraph run --weights`
refused it: "expected f32[], got f32[1]")."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from optgraph.cli.main import main
from optgraph.output_files import write_npz
from optgraph.reference.interpreter import load_weights

GRAPH = """graph scaled {
  input %x : f32[2,3]
  weight %embed_scale : f32[]
  %y = mul(%x, %embed_scale) : f32[2,3]
  output %y
}
"""


def test_a_rank_0_array_keeps_its_rank(tmp_path: Path) -> None:
    path = write_npz(tmp_path / "w.npz", {"s": np.array(8.0, np.float32), "v": np.ones(3)})
    with np.load(path) as data:
        assert data["s"].shape == () and float(data["s"]) == 8.0 and data["v"].shape == (3,)


def test_a_rank_0_weight_written_by_write_npz_runs(tmp_path: Path, capsys) -> None:  # type: ignore[no-untyped-def]
    import optgraph as og

    model = tmp_path / "scaled.ir"
    model.write_text(GRAPH)
    weights = write_npz(tmp_path / "scaled.weights.npz", {"embed_scale": np.float32(8.0)})
    assert load_weights(weights, og.parse(GRAPH))["embed_scale"].shape == ()
    status = main(["run", str(model), "--weights", str(weights), "--device", "cpu", "-q"])
    assert status == 0, capsys.readouterr().err
