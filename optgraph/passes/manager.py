"""Pipelines: parse `dce,cse,assign-streams{max-streams=4}`, check facts, run, re-verify.

    run_pipeline(graph, "dce,assign-streams{max-streams=2},insert-sync")

Each pass's required facts are checked on the graph before it runs (the message names the pass to run
first); after each pass the graph is verified again, so a broken pass is caught where it broke.
`after_each` receives (pass, graph) after every pass, which is how `--print-ir-after-all` works.

`PASSES` is the one list of passes: a literal dictionary sorted by name.
"""

from __future__ import annotations

import dataclasses
import difflib
import re
from collections.abc import Callable, Sequence
from typing import Any, get_type_hints

from optgraph.errors import OptGraphError, PipelineError
from optgraph.ir.graph import Graph
from optgraph.ir.verify import verify
from optgraph.passes.analyze_lifetimes import AnalyzeLifetimesPass
from optgraph.passes.assign_streams import AssignStreamsPass
from optgraph.passes.base import Pass
from optgraph.passes.check_races import CheckRacesPass
from optgraph.passes.cse import CsePass
from optgraph.passes.dce import DcePass
from optgraph.passes.facts import FACTS
from optgraph.passes.fuse import FusePass
from optgraph.passes.fuse_siblings import FuseSiblingsPass
from optgraph.passes.insert_sync import InsertSyncPass
from optgraph.passes.plan_memory import PlanMemoryPass
from optgraph.passes.plan_prefetch import PlanPrefetchPass
from optgraph.passes.split_backends import SplitBackendsPass
from optgraph.passes.verify_pass import VerifyPass

PASSES: dict[str, type[Pass]] = {
    "analyze-lifetimes": AnalyzeLifetimesPass,
    "assign-streams": AssignStreamsPass,
    "check-races": CheckRacesPass,
    "cse": CsePass,
    "dce": DcePass,
    "fuse": FusePass,
    "fuse-siblings": FuseSiblingsPass,
    "insert-sync": InsertSyncPass,
    "plan-memory": PlanMemoryPass,
    "plan-prefetch": PlanPrefetchPass,
    "split-backends": SplitBackendsPass,
    "verify": VerifyPass,
}

# The pipeline `optgraph compile` runs when none is given. Passes join it as they land.
# fuse runs before stream assignment (streams then balance real kernels, and fusion is not limited
# to one stream) and before memory planning (fused regions need no buffers for their interiors).
# fuse-siblings is not in the default pipeline: it cuts launches (14 -> 11 kernels a Llama layer)
# but measured slower end to end on an H100 (launch-bound decode 536 -> 593 µs on one stream,
# realistic decode 1876 -> 1918 µs, and streams lost their q/k/v overlap; docs/benchmarks.md).
# Name it after fuse to use it: `-p verify,dce,cse,fuse{row-prologues=false},fuse-siblings,assign-streams,...`.
FUSION = "fuse"
DEFAULT_PIPELINE = (
    f"verify,dce,cse,{FUSION},assign-streams,insert-sync,analyze-lifetimes,plan-memory"
)

_PASS_RE = re.compile(r"\s*([A-Za-z0-9_-]+)\s*(\{([^{}]*)\})?\s*(,|$)")


def _suggest(word: str, choices: Sequence[str]) -> str:
    close = difflib.get_close_matches(word, list(choices), n=1)
    return f" (did you mean '{close[0]}'?)" if close else ""


def _convert(pass_name: str, option: str, raw: str, target: Any) -> Any:
    raw = raw.strip()
    if target is bool:
        if raw.lower() in ("true", "1", "yes", "on"):
            return True
        if raw.lower() in ("false", "0", "no", "off"):
            return False
    elif target is int:
        try:
            return int(raw)
        except ValueError:
            pass
    elif target is float:
        try:
            return float(raw)
        except ValueError:
            pass
    else:
        return raw.strip('"')
    kind = {bool: "true or false", int: "an integer", float: "a number"}[target]
    raise PipelineError(f"{pass_name}: option '{option}' must be {kind}, got '{raw}'")


def make_pass(name: str, options: dict[str, str] | None = None) -> Pass:
    """Instantiate the pass called `name` (kebab-case) with options given as text."""
    cls = PASSES.get(name)
    if cls is None:
        raise PipelineError(f"unknown pass '{name}'{_suggest(name, sorted(PASSES))}")
    fields = {f.name: f for f in dataclasses.fields(cls)}
    hints = get_type_hints(cls)
    kwargs: dict[str, Any] = {}
    for key, raw in (options or {}).items():
        attr = key.replace("-", "_")
        if attr not in fields:
            known = [f.replace("_", "-") for f in fields]
            hint = _suggest(key, known) or (
                f" ({name} takes {', '.join(known)})" if known else f" ({name} takes no options)"
            )
            raise PipelineError(f"{name}: unknown option '{key}'{hint}")
        kwargs[attr] = _convert(name, key, raw, hints[attr])
    try:
        return cls(**kwargs)
    except ValueError as err:  # a pass's own option validation
        raise PipelineError(f"{name}: {err}") from None


def parse_pipeline(text: str) -> list[Pass]:
    """`"dce,assign-streams{max-streams=4,policy=chains}"` -> pass instances. `default` expands."""
    text = text.strip()
    if text == "default":
        text = DEFAULT_PIPELINE
    if not text:
        return []
    passes: list[Pass] = []
    pos = 0
    while pos < len(text):
        match = _PASS_RE.match(text, pos)
        if match is None or match.end() == pos:
            raise PipelineError(f"cannot read the pipeline at '{text[pos:]}' (in '{text}')")
        name, body = match.group(1), match.group(3)
        options: dict[str, str] = {}
        for item in filter(None, (s.strip() for s in (body or "").split(","))):
            if "=" not in item:
                raise PipelineError(f"{name}: option '{item}' needs a value (name=value)")
            key, value = item.split("=", 1)
            options[key.strip()] = value
        if name == "default":
            passes.extend(parse_pipeline(DEFAULT_PIPELINE))
        else:
            passes.append(make_pass(name, options))
        pos = match.end()
    return passes


def check_requirements(p: Pass, graph: Graph) -> None:
    for fact_name in p.requires:
        fact = FACTS[fact_name]
        if not fact.holds(graph):
            raise PipelineError(
                f"{p.name} needs {fact.description} ({fact_name}): run {fact.established_by} first"
            )


def run_pipeline(
    graph: Graph,
    pipeline: str | Sequence[Pass],
    after_each: Callable[[Pass, Graph], None] | None = None,
) -> Graph:
    """Run passes in order, checking facts before and verifying after each one."""
    passes = parse_pipeline(pipeline) if isinstance(pipeline, str) else list(pipeline)
    verify(graph)
    for p in passes:
        check_requirements(p, graph)
        graph = p.run(graph)
        try:
            verify(graph)
        except OptGraphError as err:
            raise AssertionError(f"pass {p.name} produced an invalid graph:\n{err}") from err
        if after_each is not None:
            after_each(p, graph)
    return graph


def plan_memory_if_missing(graph: Graph) -> Graph:
    """`graph` itself when its lifetimes are analyzed and its memory planned, else `graph` through
    `analyze-lifetimes,plan-memory`: what every program needs before it is lowered."""
    if FACTS["memory-planned"].holds(graph) and FACTS["lifetimes-analyzed"].holds(graph):
        return graph
    return run_pipeline(graph, "analyze-lifetimes,plan-memory")


def describe_passes() -> list[tuple[str, str, list[tuple[str, str, Any]]]]:
    """(name, summary, [(option, type, default)]) for every pass, sorted by name."""
    out = []
    for name, cls in PASSES.items():
        hints = get_type_hints(cls)
        options = [
            (
                f.name.replace("_", "-"),
                getattr(hints[f.name], "__name__", str(hints[f.name])),
                f.default,
            )
            for f in dataclasses.fields(cls)
        ]
        out.append((name, cls.summary, options))
    return out
