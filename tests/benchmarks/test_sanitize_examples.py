"""benchmarks/sanitize_examples.py covers what users run (issue 13, class 8): the default
pipeline with fuse (merged launches and PDL are the runtime's defaults) and a generated Llama
decode step, besides the examples. The GPU run itself is the lead's (compute-sanitizer)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from optgraph.passes.manager import DEFAULT_PIPELINE, run_pipeline

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "sanitize_examples.py"


def _load():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("sanitize_examples", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_models_include_a_llama_step_and_compile_with_fusion() -> None:
    script = _load()
    assert script.PIPELINES["default"] == DEFAULT_PIPELINE
    assert all(",fuse," in p for p in script.PIPELINES.values())
    names = []
    for name, graph in script.models():
        names.append(name)
        if name.startswith("llama_step"):
            fused = run_pipeline(graph, DEFAULT_PIPELINE)
            assert any(n.op == "fused" for n in fused.nodes), name
            assert any(n.op == "kv_cache_write" for n in fused.nodes), name
    assert {"llama_step_f16", "llama_step_f32", "llama_decode"} <= set(names)
