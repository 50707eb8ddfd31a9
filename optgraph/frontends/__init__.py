"""Importers: PyTorch (torch.export) and ONNX models in, optgraph IR and weights out.

`from_torch` and `from_onnx` both return `(graph, weights)`; see docs/importers.md.
"""
