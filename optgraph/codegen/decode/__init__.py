"""Decode rewrites: launches of a decode step done by fewer kernels, decided while lowering."""
