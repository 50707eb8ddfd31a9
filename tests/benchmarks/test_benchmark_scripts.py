"""The scripts under benchmarks/ stay runnable, apart from what they share, and their imports
stay one-way.

Layout: every `benchmarks/NAME.py` is a script (it has a main and prints a table); what the
scripts share is `benchmarks/harness/`, where nothing is runnable and nothing imports a script.
No GPU here: every script must at least answer `--help` when run as the docs say (`python
benchmarks/NAME.py` from the repository root, no PYTHONPATH: so none imports CuPy or PyTorch
before reading its arguments), every name one benchmark module takes from another must exist
there, and the imports between benchmark modules must form no circle.
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
MAIN = 'if __name__ == "__main__":'


def _modules(folder: Path, package: str) -> dict[str, Path]:
    return {f"{package}.{p.stem}": p for p in sorted(folder.glob("*.py")) if p.stem != "__init__"}


SCRIPTS = _modules(BENCHMARKS, "benchmarks")
HARNESS = _modules(BENCHMARKS / "harness", "benchmarks.harness")
MODULES = {**SCRIPTS, **HARNESS}
STEMS = {name.rsplit(".", 1)[1] for name in MODULES}


def _benchmark_imports(name: str) -> dict[str, set[str]]:
    """Benchmark module -> the names `name` takes from it (`import x` takes none)."""
    found: dict[str, set[str]] = {}
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            if node.module in MODULES:
                found.setdefault(node.module, set()).update(a.name for a in node.names)
            for alias in node.names:  # `from benchmarks import bench_x`: a module
                if f"{node.module}.{alias.name}" in MODULES:
                    found.setdefault(f"{node.module}.{alias.name}", set())
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in MODULES:
                    found.setdefault(alias.name, set())
    return found


def _bare_imports(name: str) -> set[str]:
    """Benchmark modules `name` imports by their bare file name (`from timing import ...`), as
    when benchmarks/ itself was on sys.path."""
    bare: set[str] = set()
    for node in ast.walk(ast.parse(MODULES[name].read_text())):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            bare.update({node.module} & STEMS)
        elif isinstance(node, ast.Import):
            bare.update({a.name for a in node.names} & STEMS)
    return bare


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


def test_the_scripts_and_the_harness_are_found() -> None:
    assert {"benchmarks.bench_gpu", "benchmarks.bench_compile"} <= set(SCRIPTS)
    assert {"benchmarks.harness.timing", "benchmarks.harness.head_to_head"} <= set(HARNESS)


def test_benchmarks_holds_scripts_and_the_harness_none() -> None:
    not_runnable = [name for name, path in SCRIPTS.items() if MAIN not in path.read_text()]
    assert not not_runnable, f"not scripts (move them to benchmarks/harness/): {not_runnable}"
    runnable = [name for name, path in HARNESS.items() if MAIN in path.read_text()]
    assert not runnable, f"scripts among the shared modules (move them up): {runnable}"


@pytest.mark.parametrize("name", sorted(HARNESS))
def test_the_harness_imports_no_script(name: str) -> None:
    scripts = set(_benchmark_imports(name)) & set(SCRIPTS)
    assert not scripts, f"{name} imports the scripts {sorted(scripts)}"


@pytest.mark.parametrize("name", sorted(MODULES))
def test_benchmark_modules_are_imported_by_their_full_name(name: str) -> None:
    bare = _bare_imports(name)
    assert not bare, f"{name} imports {sorted(bare)} by bare name: use benchmarks[.harness].NAME"


@pytest.mark.parametrize("script", sorted(SCRIPTS))
def test_script_answers_help(script: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    result = subprocess.run(
        [sys.executable, str(SCRIPTS[script].relative_to(ROOT)), "--help"],
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
def test_names_taken_from_other_benchmark_modules_exist(name: str) -> None:
    for module, names in _benchmark_imports(name).items():
        missing = names - _top_level_names(module)
        assert not missing, f"{name} imports {sorted(missing)} from {module}"


def test_benchmark_modules_import_each_other_without_a_circle() -> None:
    graph = {name: set(_benchmark_imports(name)) for name in MODULES}
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
