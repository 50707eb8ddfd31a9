"""The front door: `optgraph --help`, `--version` and `passes` load no heavy module (checked in a
fresh process through `sys.modules`, no timing), `--version`'s number, the lazily loaded API."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tomllib
from importlib.metadata import PackageNotFoundError
from pathlib import Path

import pytest

import optgraph as og
from optgraph.cli import info
from optgraph.cli.main import main
from optgraph.passes.manager import PASSES, describe_passes

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("numpy", "networkx", "cupy", "lark", "ml_dtypes", "scipy")

# Runs the command in a fresh interpreter, then prints which heavy modules it loaded.
PROBE = """
import json, sys
from optgraph.cli.main import main
try:
    status = main(sys.argv[1:])
except SystemExit as exit:
    status = exit.code
loaded = sorted({name.split(".")[0] for name in sys.modules} & set(HEAVY))
print(json.dumps({"status": status, "loaded": loaded}), file=sys.stderr)
"""


def _probe(args: list[str]) -> tuple[dict[str, object], str]:
    done = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{PROBE}", *args],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=False,
    )
    return json.loads(done.stderr.strip().splitlines()[-1]), done.stdout


@pytest.mark.parametrize("args", [["--help"], ["--version"], ["passes"], ["run", "--help"]])
def test_front_door_commands_load_no_heavy_module(args: list[str]) -> None:
    result, out = _probe(args)
    assert result == {"status": 0, "loaded": []}
    assert out  # it did print its answer


def test_the_probe_sees_heavy_modules_when_a_command_loads_them() -> None:
    result, _ = _probe(["run", str(REPO / "examples" / "diamond.ir"), "--device", "cpu", "-q"])
    assert result["status"] == 0
    assert "lark" in result["loaded"] and "numpy" in result["loaded"]  # type: ignore[operator]


def test_version_is_the_installed_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit:
        main(["--version"])
    assert exit.value.code == 0
    assert capsys.readouterr().out == f"optgraph {version('optgraph')}\n"


def test_version_falls_back_to_pyproject_when_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def not_installed(name: str) -> str:
        raise PackageNotFoundError(name)

    monkeypatch.setattr("importlib.metadata.version", not_installed)
    with (REPO / "pyproject.toml").open("rb") as handle:
        expected = tomllib.load(handle)["project"]["version"]
    assert info.version() == expected


def test_a_command_is_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit:
        main([])
    assert exit.value.code == 2
    assert "COMMAND" in capsys.readouterr().err


def test_passes_lists_each_pass_and_option_from_the_pass_classes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["passes"]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    for name, summary, options in describe_passes():
        (line,) = [line for line in lines if line.startswith(name + " ")]
        assert summary.startswith(line[len(name) :].strip()), name
        for option, kind, default in options:
            assert f"  {option}: {kind}{info.format_default(default)}" in out
    assert len([line for line in lines if line and not line.startswith(" ")]) == len(PASSES) + 1
    assert "    max-streams: int = 4" in out  # assign-streams' option, spelled as in -p
    assert '    cpu-ops: str = ""' in out


def test_api_names_load_on_first_use() -> None:
    exports = og._EXPORTS  # the table behind __getattr__
    assert sorted(og.__all__) == sorted(exports)
    for name, (module, attribute) in exports.items():
        assert getattr(og, name) is getattr(importlib.import_module(module), attribute)
    assert og.Program is og.CompiledProgram
    assert set(og.__all__) <= set(dir(og))
    with pytest.raises(AttributeError, match="no attribute 'nothing_here'"):
        og.nothing_here  # noqa: B018


def test_import_optgraph_alone_loads_no_heavy_module() -> None:
    code = "import sys, optgraph; print(sorted(m for m in sys.modules if m.startswith(HEAVY)))"
    done = subprocess.run(
        [sys.executable, "-c", f"HEAVY = {HEAVY!r}\n{code}"],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        check=True,
    )
    assert done.stdout.strip() == "[]"
