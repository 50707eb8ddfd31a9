"""The static checks of the style guide, as tests: `ruff check` and `mypy --strict` on optgraph/.

Both read their settings from pyproject.toml (`[tool.ruff]`, `[tool.mypy]`), so these tests check
exactly what a developer runs by hand. Each is skipped, with the reason, where its tool is not
installed (`pip install -e '.[dev]'` installs both). mypy keeps its cache in .mypy_cache: a cold run
takes a few seconds, a warm one under a second.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _run_tool(module: str, *args: str) -> subprocess.CompletedProcess[str]:
    if importlib.util.find_spec(module) is None:
        pytest.skip(f"{module} is not installed (pip install -e '.[dev]')")
    return subprocess.run(
        [sys.executable, "-m", module, *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_ruff_check_is_clean() -> None:
    result = _run_tool("ruff", "check", "--no-cache", "optgraph")
    assert result.returncode == 0, f"ruff check optgraph:\n{result.stdout}{result.stderr}"


def test_mypy_strict_is_clean() -> None:
    result = _run_tool("mypy", "optgraph")
    assert result.returncode == 0, f"mypy optgraph:\n{result.stdout}{result.stderr}"
    assert "Success: no issues found" in result.stdout
