"""What passes and codegen both need and that is not a pass: happens-before, fusion legality,
weight segments, the schedule and cost estimates, path covers, buffer lifetimes, the arena plan
and its packing, memory bounds and the prefetch copies.

Imports run one way: `optgraph.ir` below, `optgraph.passes` and `optgraph.codegen` above.
"""
