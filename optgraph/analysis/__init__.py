"""What passes and codegen both need and that is not a pass: happens-before, fusion legality,
weight segments, the schedule and cost estimates, path covers and arena packing.

Imports run one way: `optgraph.ir` below, `optgraph.passes` and `optgraph.codegen` above.
"""
