"""docs/benchmarks.md names every runnable script and every part of benchmarks/gpu_session.sh.

A script added to benchmarks/ without a row in the docs' table of scripts, or a session part
without a row in the docs' table of parts, fails here; so does a row for a script or part that
is gone, a link to a section of the page that does not exist, and a `benchmarks/...` path in the
docs or the session script that names no file (docs/results/ is a dated log and keeps the paths
of its day).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOC = ROOT / "docs" / "benchmarks.md"
SESSION = ROOT / "benchmarks" / "gpu_session.sh"
SCRIPTS = {p.name for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__"}


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end >= 0 else len(text)]


def _first_cells(section: str, header: str) -> list[str]:
    """The first cell of every row of the table whose header row starts with `header`."""
    lines = section.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header))
    cells = []
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells.append(line.split("|")[1].strip())
    return cells


def _session_parts() -> list[str]:
    """The parts `gpu_session.sh` runs: the arms of its `case $part in`."""
    text = SESSION.read_text()
    body = text[text.index("case $part in") : text.index("esac")]
    return re.findall(r"^    ([a-z0-9-]+)\)", body, flags=re.MULTILINE)


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    kept = "".join(c for c in heading.lower() if c.isalnum() or c in " -_")
    return kept.replace(" ", "-")


def test_the_session_parts_are_found() -> None:
    assert {"tests", "bench", "sanitize", "host", "multi"} <= set(_session_parts())


def test_every_runnable_script_has_a_row() -> None:
    rows = _first_cells(_section(DOC.read_text(), "The scripts"), "| script |")
    named = {cell.strip("`") for cell in rows}
    assert not SCRIPTS - named, f"scripts missing from docs/benchmarks.md: {SCRIPTS - named}"
    assert not named - SCRIPTS, f"rows for scripts that are not in benchmarks/: {named - SCRIPTS}"
    assert len(rows) == len(named), "a script has two rows"


def test_every_session_part_has_a_row_and_is_in_the_usage_lines() -> None:
    parts = _session_parts()
    doc = DOC.read_text()
    running = _section(doc, "Running them")
    rows = {cell.strip("`") for cell in _first_cells(running, "| part |")}
    assert set(parts) == rows, (
        f"parts without a row: {set(parts) - rows}; stale: {rows - set(parts)}"
    )
    usage = re.search(r"bash benchmarks/gpu_session\.sh (\[.*\])\n", running)
    assert usage and set(re.findall(r"\[([a-z0-9-]+)\]", usage.group(1))) == set(parts)
    header = SESSION.read_text().split("\nset -u\n")[0]
    assert all(f"[{part}]" in header for part in parts), "gpu_session.sh's usage comment"
    unknown = re.search(r"unknown part: \$part \(([^)]*)\)", SESSION.read_text())
    assert unknown and set(unknown.group(1).split()) == set(parts), "its unknown-part message"


def test_links_within_the_page_name_its_sections() -> None:
    text = DOC.read_text()
    slugs = {_slug(line[3:]) for line in text.splitlines() if line.startswith("## ")}
    links = set(re.findall(r"\]\(#([^)]+)\)", text))
    assert links, "the table of scripts links its sections"
    assert not links - slugs, f"links to no section: {sorted(links - slugs)}"


def test_benchmark_paths_in_docs_and_the_session_exist() -> None:
    texts = [*(ROOT / "docs").glob("*.md"), ROOT / "README.md", SESSION]
    missing = {
        f"{path.relative_to(ROOT)}: {found}"
        for path in texts
        for found in re.findall(r"(?<![\w/.])benchmarks/[a-z0-9_/]+\.(?:py|sh)", path.read_text())
        if not (ROOT / found).exists()
    }
    assert not missing, sorted(missing)
