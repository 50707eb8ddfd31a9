"""The CuPy runtime: a lowered program as one CUDA graph, captured once and replayed."""
