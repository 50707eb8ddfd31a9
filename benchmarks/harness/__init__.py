"""What the benchmark scripts share, none of it runnable on its own: CUDA-event timing and the
results table (`timing`), the variants each suite times (`gpu_variants`, `head_to_head_variants`,
`gemv_variants`, `split_sync_way`), the op-by-op baselines (`cupy_interpreter`,
`torch_interpreter`), the head-to-head suite and its checks (`head_to_head`,
`head_to_head_checks`), the models and plans of the offload and split benchmarks (`moe_decode`,
`split_plan`, `offload_plan`, `offload_timing`).

A script puts the repository root on `sys.path` and imports these as `benchmarks.harness.NAME`;
modules here never import a script.
"""
