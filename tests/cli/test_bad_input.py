"""Bad input through the real command line: one located message with a caret, exit 1, no traceback.

`tests/bad_input/expected.txt` lists, for every malformed model, the exact first line
`optgraph compile FILE` must print on stderr (`file:line:col: error: message`). Files named `gen_*`
are too large or too binary to commit and are written at test time (`bad_input_generated.py`).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from optgraph.cli.main import main
from tests.support.bad_input_generated import GENERATED

BAD = Path(__file__).resolve().parents[1] / "bad_input"
REPO = BAD.parent.parent


def _manifest() -> dict[str, str]:
    entries: dict[str, str] = {}
    for line in (BAD / "expected.txt").read_text(encoding="utf-8").splitlines():
        if line.startswith("#") or not line.strip():
            continue
        name = line.split(":", 1)[0]
        assert name not in entries, f"{name} is listed twice in expected.txt"
        entries[name] = line
    return entries


EXPECTED = _manifest()
CARET = re.compile(r"^ +\| *\^~*$")
SOURCE = re.compile(r"^ +\d+ \| ")


def _materialize(name: str, tmp_path: Path) -> Path:
    """The directory holding `name`: tests/bad_input, or tmp_path for a generated file."""
    if name in GENERATED:
        (tmp_path / name).write_bytes(GENERATED[name]())
        return tmp_path
    return BAD


def run_cli(args: list[str], cwd: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    old = Path.cwd()
    os.chdir(cwd)
    try:
        status = main(args)
    finally:
        os.chdir(old)
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_corpus_is_large_and_fully_listed() -> None:
    committed = {p.name for p in BAD.glob("*.ir")}
    assert len(EXPECTED) >= 45
    assert committed <= set(EXPECTED), f"not in expected.txt: {committed - set(EXPECTED)}"
    assert set(EXPECTED) <= committed | set(GENERATED), "expected.txt names a missing file"


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_bad_model_gets_one_located_message(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # -q: a parse slower than the progress heartbeat (a loaded machine) would add a line
    status, out, err = run_cli(["compile", name, "-q"], _materialize(name, tmp_path), capsys)
    lines = err.splitlines()
    assert status == 1
    assert out == ""
    assert lines[0] == EXPECTED[name]
    assert SOURCE.match(lines[1]), lines[1]
    assert CARET.match(lines[2]), lines[2]
    assert "Traceback" not in err
    assert max(len(line) for line in lines) < 400  # huge lines are shown as a window


@pytest.mark.parametrize(
    "name", ["syntax_missing_paren.ir", "name_cycle.ir", "gen_nul_byte.ir", "gen_deep_parens.ir"]
)
def test_real_process_exits_1_without_traceback(name: str, tmp_path: Path) -> None:
    cwd = _materialize(name, tmp_path)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "optgraph.cli.main", "compile", name, "-q"],
        cwd=cwd,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.splitlines()[0] == EXPECTED[name]
    assert "Traceback" not in result.stderr


def test_python_dash_m_optgraph_works(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run(
        [sys.executable, "-m", "optgraph", "opt", "name_undefined.ir", "-p", "dce"],
        cwd=BAD,
        env=env,
        check=False,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1
    assert result.stderr.startswith("name_undefined.ir:3:12: error: use of undefined value '%y'")


@pytest.mark.parametrize("command", [["compile"], ["opt", "-p", "dce"], ["run", "--device", "cpu"]])
def test_missing_file_and_directory(
    command: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "models").mkdir()
    name, *rest = command
    status, out, err = run_cli([name, "nope.ir", *rest], tmp_path, capsys)
    assert (status, out) == (1, "")
    assert err == "error: no such file: 'nope.ir'\n"
    status, out, err = run_cli([name, "models", *rest], tmp_path, capsys)
    assert (status, out) == (1, "")
    assert err == "error: 'models' is a directory, not a model file\n"


def test_every_error_of_a_file_is_printed(capsys: pytest.CaptureFixture[str]) -> None:
    status, _, err = run_cli(["opt", "type_errors_three.ir", "-p", "verify"], BAD / "multi", capsys)
    assert status == 1
    heads = [line for line in err.splitlines() if ": error: " in line]
    assert heads == [
        "type_errors_three.ir:3:8: error: neg: declared type f32[3] but the operands give f32[2,3]",
        "type_errors_three.ir:4:12: error: use of undefined value '%y'",
        "type_errors_three.ir:5:8: error: matmul: inner dimensions differ (3 vs 4)",
    ]
    assert len([line for line in err.splitlines() if CARET.match(line)]) == 3


def test_thousands_of_errors_are_capped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "m.ir").write_bytes(GENERATED["gen_many_errors_one_line.ir"]())
    status, _, err = run_cli(["compile", "m.ir", "-q"], tmp_path, capsys)
    assert status == 1
    assert len([line for line in err.splitlines() if ": error: " in line]) == 50
    assert err.rstrip().endswith("19950 more errors not shown (20000 in all)")
