"""attention kernels, chosen by shape in `variants.py`: decode (split-KV), prefill (tiled or on tensor cores)."""
