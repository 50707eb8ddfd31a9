"""What a pass is.

A pass is a frozen dataclass: its fields are its options (`assign-streams{max-streams=4}` sets
`max_streams=4`), its class attributes say what it is, and `run(graph)` returns a new graph without
touching the input. Its contract names facts from `optgraph.passes.facts`, checked by the manager on
the graph itself, never on pipeline history:

- `requires`: facts that must hold before it runs ("insert-sync needs every node has a stream: run
  assign-streams first");
- `provides`: facts that hold after it ran;
- `invalidates`: facts whose annotations it would leave wrong without repairing them; the manager
  refuses to run it on a graph that carries them ("assign-streams invalidates the arena offsets:
  run assign-streams before plan-memory"). A pass that repairs or drops such annotations itself
  (fuse drops `live`/`visible`, plan-prefetch refreshes them) does not list them.

Every pipeline ordering rule is one of these declarations; none lives only in a comment.
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
    invalidates: ClassVar[tuple[str, ...]] = ()

    def run(self, graph: Graph) -> Graph:
        raise NotImplementedError(f"pass {self.name} does not implement run()")
