"""`optgraph compile -o DIR` writes its set of outputs whole or not at all (issue 36, finding 2).

On a full disk the compile used to report the error but leave a mix: the new `model.opt.ir`
(replacing the old one) and `report.json` without the other files. Now every file of the set
(the artifacts and `--report-json`) is written to a temporary first and all are renamed together;
a failing write (simulated: the write stops halfway with ENOSPC), a failing render (a lowering
error) or a failing rename leaves every old file as it was and no temporary behind.
"""

from __future__ import annotations

import errno
import os
import shutil
from pathlib import Path

import pytest

from optgraph import output_files
from optgraph.cli import artifacts
from optgraph.cli.main import main
from optgraph.errors import OptGraphError

ROOT = Path(__file__).resolve().parents[2]
DIAMOND = str(ROOT / "examples" / "diamond.ir")


def _argv(out: Path, report: Path) -> list[str]:
    """A compile writing every file it can: the artifacts, --report-json and --timeline."""
    timeline = report.with_name("timeline.json")
    return ["compile", DIAMOND, "-o", str(out), "--report-json", str(report), "--timeline", str(timeline), "-q"]  # fmt: skip


def _old_outputs(tmp_path: Path) -> tuple[Path, Path, dict[str, bytes]]:
    """A first compile's outputs, each file's bytes then marked old (so a later change shows)."""
    out, report = tmp_path / "out", tmp_path / "report.json"
    assert main(_argv(out, report)) == 0
    old = {}
    for path in [*out.iterdir(), report, report.with_name("timeline.json")]:
        path.write_bytes(b"old " + path.name.encode())
        old[str(path)] = path.read_bytes()
    assert {"model.opt.ir", "report.json", "kernels.cu", "program.json"} <= {
        p.name for p in out.iterdir()
    }
    return out, report, old


def _files(tmp_path: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}


def _compile_fails(capsys: pytest.CaptureFixture[str], out: Path, report: Path) -> str:
    assert main(_argv(out, report)) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return err


def test_a_full_disk_at_every_file_leaves_every_old_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """For each N, the disk fills up halfway through the Nth file of the set."""
    out, report, old = _old_outputs(tmp_path)
    capsys.readouterr()
    real = output_files.write_file
    writes: list[Path] = []
    failing = 0  # the write that fails (0: none)

    def write_file(path: Path, data: bytes) -> None:
        writes.append(path)
        if len(writes) == failing:
            with open(path, "wb") as handle:
                handle.write(data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)

    monkeypatch.setattr(output_files, "write_file", write_file)
    (tmp_path / "count").mkdir()
    assert main(_argv(tmp_path / "count" / "out", tmp_path / "count" / "report.json")) == 0
    count = len(writes)
    assert count == len(old), sorted(old)  # every member of the set is counted
    shutil.rmtree(tmp_path / "count")
    capsys.readouterr()
    for failing in range(1, count + 1):
        writes.clear()
        err = _compile_fails(capsys, out, report)
        assert "No space left on device" in err and "cannot write '" in err, err
        assert len(writes) == failing
        assert _files(tmp_path) == old, failing  # the old files, unchanged, no temporary left


def test_a_lowering_error_after_some_files_leaves_every_old_output(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out, report, old = _old_outputs(tmp_path)
    capsys.readouterr()

    def fails(result: artifacts.CompileResult) -> str:
        raise OptGraphError("kernels: no CUDA code generator for this op")

    position = next(k for k, a in enumerate(artifacts.ARTIFACTS) if a.filename == "kernels.cu")
    broken = artifacts.Artifact("kernels.cu", "broken", fails)
    changed = (*artifacts.ARTIFACTS[:position], broken, *artifacts.ARTIFACTS[position + 1 :])
    monkeypatch.setattr(artifacts, "ARTIFACTS", changed)
    err = _compile_fails(capsys, out, report)
    assert "no CUDA code generator" in err
    assert _files(tmp_path) == old


def test_a_failing_rename_puts_the_renamed_ones_back(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    out, report, old = _old_outputs(tmp_path)
    capsys.readouterr()
    real, renames = os.replace, []

    def replace(src: str | os.PathLike[str], dst: str | os.PathLike[str]) -> None:
        renames.append(dst)
        if len(renames) == 4:  # three files of the set are in place already
            raise OSError(errno.EIO, "Input/output error")
        real(src, dst)

    monkeypatch.setattr(output_files.os, "replace", replace)
    err = _compile_fails(capsys, out, report)
    assert "Input/output error" in err
    assert _files(tmp_path) == old


def test_a_new_set_replaces_the_old_one_whole(tmp_path: Path) -> None:
    """A compile whose graph has no memory plan makes no program.json: the older one goes with
    the rest of the old set instead of staying beside files it does not belong to."""
    out, _, _ = _old_outputs(tmp_path)
    assert main(["compile", DIAMOND, "-p", "dce", "-o", str(out), "-q"]) == 0
    names = {p.name for p in out.iterdir()}
    assert "program.json" not in names and "model.opt.ir" in names
    assert all(not p.read_bytes().startswith(b"old ") for p in out.iterdir())
    assert not [p for p in tmp_path.rglob(".*")]  # no temporaries, no backups


def test_a_failed_compile_leaves_no_new_output_directory(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """`-o new/sub` is checked before the work but made only with the files: a compile that
    fails (a bad pipeline, a full disk at the last file) leaves neither `new` nor `new/sub`."""
    out = tmp_path / "new" / "sub"
    assert main(["compile", DIAMOND, "-p", "dcee", "-o", str(out), "-q"]) == 1
    assert "unknown pass 'dcee'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []
    real, writes = output_files.write_file, []

    def write_file(path: Path, data: bytes) -> None:
        writes.append(path)
        if path.name.startswith(".program.json."):
            raise OSError(errno.ENOSPC, "No space left on device")
        real(path, data)

    monkeypatch.setattr(output_files, "write_file", write_file)
    assert main(["compile", DIAMOND, "-o", str(out), "-q"]) == 1
    assert "No space left on device" in capsys.readouterr().err
    assert len(writes) > 1 and list(tmp_path.iterdir()) == []
    monkeypatch.setattr(output_files, "write_file", real)
    assert main(["compile", DIAMOND, "-o", str(out), "-q"]) == 0
    assert (out / "program.json").is_file()


def test_an_output_directory_under_a_file_is_refused_before_the_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "file").write_text("x")
    assert main(["compile", DIAMOND, "-o", str(tmp_path / "file" / "out"), "-q"]) == 1
    err = capsys.readouterr().err
    assert "Traceback" not in err, err
    assert f"cannot create output directory '{tmp_path / 'file' / 'out'}'" in err, err
    assert [p.name for p in tmp_path.iterdir()] == ["file"]
