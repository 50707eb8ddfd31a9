"""The scripts under benchmarks/ stay runnable and their imports stay one-way.

No GPU here: every script must at least answer `--help` (so none imports CuPy or PyTorch before
reading its arguments), every name one benchmark module takes from another must exist there, and
the imports between benchmark modules must form no circle.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
MODULES = {p.stem: p for p in sorted(BENCHMARKS.glob("*.py"))}
SCRIPTS = sorted(n for n, p in MODULES.items() if 'if __name__ == "__main__":' in p.read_text())


def _sibling_imports(name: str) -> dict[str, set[str]]:
    """Benchmark module -> the names this module takes from it (`import x` takes none)."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.ImportFrom) and node.module in MODULES and node.level == 0:
            found.setdefault(node.module, set()).update(a.name for a in node.names)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    found.setdefault(alias.name, set())
    return found


def _top_level_names(name: str) -> set[str]:
    names: set[str] = set()
    for node in ast.parse(MODULES[name].read_text()).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in node.names)
    return names


def test_the_scripts_are_found() -> None:
    assert {"bench_gpu", "bench_kernels", "bench_stream_threshold", "bench_compile"} <= set(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_answers_help(script: str) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    result = subprocess.run(
        [sys.executable, str(MODULES[script]), "--help"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "usage:" in result.stdout


@pytest.mark.parametrize("name", sorted(MODULES))
def test_names_taken_from_sibling_modules_exist(name: str) -> None:
    for module, names in _sibling_imports(name).items():
        missing = names - _top_level_names(module)
        assert not missing, f"benchmarks/{name}.py imports {sorted(missing)} from {module}.py"


def test_benchmark_modules_import_each_other_without_a_circle() -> None:
    graph = {name: set(_sibling_imports(name)) for name in MODULES}
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            circle = path[path.index(name) :] + [name]
            pytest.fail("import circle in benchmarks/: " + " -> ".join(circle))
        if name in done:
            return
        for target in sorted(graph[name]):
            visit(target, [*path, name])
        done.add(name)

    for name in sorted(graph):
        visit(name, [])
