"""The Python API behind `optgraph.compile`: a compiled, runnable program on one or several devices."""
