"""Run every example on the GPU (4 streams: eager, capture, replays) for compute-sanitizer.

    compute-sanitizer --tool memcheck python benchmarks/sanitize_examples.py
    compute-sanitizer --tool racecheck python benchmarks/sanitize_examples.py

Exits non-zero when an output differs from the reference interpreter.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import optgraph as og
from optgraph.codegen.lowering_options import LoweringOptions
from optgraph.passes.manager import run_pipeline
from optgraph.program import cuda_program
from optgraph.runtime.cuda import CHECK_BOUNDS
from optgraph.runtime.reference import nmse, random_inputs, random_weights, run_reference

PIPELINE = (
    "verify,dce,cse,assign-streams{max-streams=4,min-branch-us=0},insert-sync,"
    "analyze-lifetimes,plan-memory"
)


def main(argv: list[str] | None = None) -> int:
    argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0]).parse_args(argv)
    bad = 0
    for path in sorted((ROOT / "examples").glob("*.ir")):
        source = og.parse_file(path)
        inputs, weights = random_inputs(source, 0), random_weights(source, 0)
        want = run_reference(source, inputs, weights)
        graph = run_pipeline(source, PIPELINE)
        for use_graph in (False, True):
            program = cuda_program(
                graph, weights=weights, options=LoweringOptions(use_graph=use_graph)
            )
            for _ in range(3 if use_graph else 1):
                got = program.run(inputs)
            types = graph.value_types()
            for name in graph.output_names():
                err = nmse(got[name], want[name])
                if err > CHECK_BOUNDS.get(types[name].dtype, 0.0):
                    bad += 1
                    print(f"{path.stem} %{name}: nmse {err:.3e}", flush=True)
            program.close()
        print(f"{path.stem}: ran eagerly and as a CUDA graph", flush=True)
    print("mismatches:", bad)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
