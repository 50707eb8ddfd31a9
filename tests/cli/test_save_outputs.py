"""`optgraph run --save-outputs FILE.npz`: every output by name, the values the run computed,
written atomically (never half a file), and located errors before any work is done."""

from __future__ import annotations

from pathlib import Path

import ml_dtypes
import numpy as np
import pytest

import optgraph as og
from optgraph.cli.main import main
from optgraph.errors import InputError
from optgraph.output_files import write_npz
from optgraph.reference.interpreter import load_inputs, random_inputs, random_weights, run_reference

REPO = Path(__file__).resolve().parents[2]
MLP = str(REPO / "examples" / "mlp.ir")

BF16 = """\
graph halves {
  input %x : bf16[3,4]
  %y = exp(%x) : bf16[3,4]
  %z = neg(%y) : bf16[3,4]
  output %y, %z
}
"""
# Reads %y and %z back as its inputs: what --save-outputs writes, --inputs reads.
BF16_CONSUMER = """\
graph consumer {
  input %y : bf16[3,4]
  input %z : bf16[3,4]
  %s = add(%y, %z) : bf16[3,4]
  output %s
}
"""


def _run(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    status = main(["run", *args, "--device", "cpu", "-q"])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def _leftovers(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir() if p.name.endswith(".tmp"))


def test_saves_every_output_by_name_as_computed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "out.npz"
    status, out, err = _run([MLP, "--seed", "5", "--save-outputs", str(target)], capsys)
    assert (status, err) == (0, "")
    assert f"wrote {target}" in out
    graph = og.parse_file(MLP)
    expected = run_reference(graph, random_inputs(graph, seed=5), random_weights(graph, seed=5))
    with np.load(target) as saved:
        assert sorted(saved.files) == sorted(graph.output_names())
        for name in graph.output_names():  # the cpu executor is bit-identical to the reference
            np.testing.assert_array_equal(saved[name], expected[name])
            assert saved[name].dtype == expected[name].dtype
    assert _leftovers(tmp_path) == []


def test_bf16_outputs_read_back_as_inputs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "halves.ir").write_text(BF16)
    (tmp_path / "consumer.ir").write_text(BF16_CONSUMER)
    saved = tmp_path / "halves.npz"
    status, _, _ = _run([str(tmp_path / "halves.ir"), "--save-outputs", str(saved)], capsys)
    assert status == 0
    values = load_inputs(saved, og.parse(BF16_CONSUMER))
    assert values["y"].dtype == ml_dtypes.bfloat16
    np.testing.assert_array_equal(values["z"].astype(np.float32), -values["y"].astype(np.float32))
    status, _, err = _run(
        [str(tmp_path / "consumer.ir"), "--inputs", str(saved), "--check"], capsys
    )
    assert (status, err) == (0, "")


def test_replaces_an_existing_file_whole(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / "out.npz"
    target.write_bytes(b"an old file, much longer than nothing" * 1000)
    assert _run([MLP, "--save-outputs", str(target)], capsys)[0] == 0
    with np.load(target) as saved:
        assert "logits" in saved.files


def test_a_failed_write_leaves_the_old_file_and_no_temporary(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    target = tmp_path / "out.npz"
    target.write_bytes(b"old")

    def full_disk(file: object, **arrays: object) -> None:
        assert hasattr(file, "write")
        file.write(b"PK half an archive")  # type: ignore[attr-defined]
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(np, "savez", full_disk)
    with pytest.raises(InputError, match="--save-outputs: cannot write .*No space left on device"):
        write_npz(target, {"y": np.zeros(3)}, "--save-outputs: ")
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("missing/out.npz", "cannot write '{p}': directory '{d}' does not exist"),
        ("out.txt", "'{p}' is not a .npz file name"),
        ("adir.npz", "cannot write '{p}': it is a directory"),
    ],
)
def test_bad_targets_are_located_errors_before_any_work(
    name: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "adir.npz").mkdir()
    target = tmp_path / name
    status, out, err = _run([MLP, "--save-outputs", str(target)], capsys)
    expected = message.format(p=target, d=target.parent)
    assert (status, out) == (1, "")  # nothing ran: no output table
    assert err == f"error: --save-outputs: {expected}\n"
    assert "Traceback" not in err
