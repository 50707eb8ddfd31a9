"""The CPU runtime: the planned executor (a lowered program on a NumPy byte arena at the planned
offsets) and the compiled kernels for quantized weights that it and split programs' CPU nodes use."""
