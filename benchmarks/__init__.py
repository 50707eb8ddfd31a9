"""Scripts that print tables: each `benchmarks/NAME.py` runs as `python benchmarks/NAME.py` from
the repository root (what each measures, how to reproduce it and its current figures:
docs/benchmarks.md). What they share is in `benchmarks.harness`; nothing under `optgraph`
imports from here.
"""
