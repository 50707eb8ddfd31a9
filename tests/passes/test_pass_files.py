"""Every pass of `PASSES` has the files docs/adding-a-pass.md lists: its module
`optgraph/passes/<name>.py`, fixtures under `tests/fixtures/<name>/`, a section of docs/passes.md
and a row of its contract table. A pass that lacks one fails with what to add:

    dce: no fixtures: add tests/fixtures/dce/<behaviour>.ir (format: docs/passes.md)
"""

from __future__ import annotations

import re
from pathlib import Path

from optgraph.passes.manager import PASSES

ROOT = Path(__file__).resolve().parents[2]
DOCS = (ROOT / "docs" / "passes.md").read_text()

# Reviewed exceptions to "the module is the CLI name in snake_case".
MODULES = {
    # passes/verify.py would read as the verifier; the pass only calls ir/verify.py
    "verify": "verify_pass",
}


def _contract_rows() -> set[str]:
    """The passes named in the first column of docs/passes.md's contract table."""
    start = DOCS.index("| pass | requires |")
    names: set[str] = set()
    for line in DOCS[start:].splitlines()[2:]:
        if not line.startswith("| "):
            break
        names.update(n.strip() for n in line.split("|")[1].split(","))
    return names


def test_every_pass_has_its_module_fixtures_and_docs() -> None:
    headings = set(re.findall(r"^#{2,3} (\S+)$", DOCS, re.MULTILINE))
    rows = _contract_rows()
    missing = []
    for name, cls in sorted(PASSES.items()):
        module = MODULES.get(name, name.replace("-", "_"))
        if cls.__module__ != f"optgraph.passes.{module}":
            missing.append(f"{name}: lives in {cls.__module__}, not optgraph/passes/{module}.py")
        if not list((ROOT / "tests" / "fixtures" / name).glob("*.ir")):
            missing.append(f"{name}: no fixtures: add tests/fixtures/{name}/<behaviour>.ir")
        if name not in headings:
            missing.append(f"{name}: no section: add '## {name}' to docs/passes.md")
        if name not in rows:
            missing.append(f"{name}: no row in docs/passes.md's contract table ('| pass |')")
    assert not missing, "\n".join(missing)


def test_the_contract_rows_are_read() -> None:
    assert {"dce", "insert-sync", "tensor-parallel", "pipeline-parallel"} <= _contract_rows()
