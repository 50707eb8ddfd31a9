"""The planned CPU executor: a lowered program on a NumPy byte arena at the planned offsets."""
