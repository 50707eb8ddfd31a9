"""What `optgraph --version` and `optgraph passes` print. Both start quickly: plain text, no rich,
and the pass list imports the pass classes only (no NumPy, networkx or lark).

    $ optgraph passes
    optgraph passes: name them with -p, e.g. -p dce,cse,assign-streams{max-streams=2}

    analyze-lifetimes  annotate each buffer's live range and, per stream, the node from which it is free
    assign-streams     put every node on a CUDA stream (chains: Nimble path cover, fork cost model)
                         max-streams: int = 4
                         policy: str = chains
                         ...
"""

from __future__ import annotations

import textwrap
from dataclasses import MISSING
from typing import Any

LINE_WIDTH = 100


def version() -> str:
    """The installed package's version; from pyproject.toml beside the package when optgraph runs
    from a source tree that is not installed."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as installed_version

    try:
        return installed_version("optgraph")
    except PackageNotFoundError:
        pass
    import tomllib
    from pathlib import Path

    pyproject = Path(__file__).resolve().parents[2] / "pyproject.toml"
    try:
        with pyproject.open("rb") as handle:
            return str(tomllib.load(handle)["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


def format_default(default: Any) -> str:
    """` = 4`, ` = true`, ` = ""`; nothing for an option without a default."""
    if default is MISSING:
        return ""
    if isinstance(default, bool):
        return " = true" if default else " = false"
    if default == "":
        return ' = ""'
    return f" = {default}"


def passes_listing(passes: list[tuple[str, str, list[tuple[str, str, Any]]]]) -> str:
    """The text of `optgraph passes` from `describe_passes()`: each pass's name and summary, then
    its options, one a line (`name: type = default`)."""
    column = max(len(name) for name, _, _ in passes) + 2
    indent = " " * column
    lines = [
        "optgraph passes: name them with -p, e.g. -p dce,cse,assign-streams{max-streams=2}",
        "",
    ]
    for name, summary, options in passes:
        lines += textwrap.wrap(
            summary,
            width=max(LINE_WIDTH, column + 40),
            initial_indent=name.ljust(column),
            subsequent_indent=indent,
        )
        lines += [f"{indent}  {opt}: {kind}{format_default(d)}" for opt, kind, d in options]
    return "\n".join(lines) + "\n"
