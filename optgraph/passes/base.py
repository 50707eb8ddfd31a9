"""What a pass is.

A pass is a frozen dataclass: its fields are its options (`assign-streams{max-streams=4}` sets
`max_streams=4`), its class attributes say what it is, and `run(graph)` returns a new graph without
touching the input. `requires` and `provides` name facts from `optgraph.passes.facts`, which are
checked on the graph itself, never on pipeline history.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from optgraph.ir.graph import Graph


@dataclass(frozen=True)
class Pass:
    name: ClassVar[str]
    summary: ClassVar[str]
    requires: ClassVar[tuple[str, ...]] = ()
    provides: ClassVar[tuple[str, ...]] = ()

    def run(self, graph: Graph) -> Graph:
        raise NotImplementedError(f"pass {self.name} does not implement run()")
