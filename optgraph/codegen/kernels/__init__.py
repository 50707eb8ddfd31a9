"""The kernel families: the CUDA work of one node or fused region, by what it computes.

elementwise (and its scalar statements), reductions, data movement, indexing, matrix products,
one-row products (`one_row/`), attention (`attention/`), rope, convolution and pooling, and the
readers of quantized weights (`quantized.py`, `quantized_one_row.py`).
`codegen/cuda_dispatch.py` is the one place that picks a family for a node.
"""
